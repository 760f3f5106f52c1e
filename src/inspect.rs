//! What `convert inspect` shows: a table for people, JSON for machines.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::header::Header;
use crate::index::Checkpoint;
use crate::plan::Planned;

/// True if `path` names a PyTorch shard index (`pytorch_model.bin.index.json`):
/// `inspect` and `validate` read it (and its shards) through the PyTorch
/// source, not as a safetensors index, whose JSON it is not.
pub fn is_pytorch_index(path: &std::path::Path) -> bool {
    crate::source::pytorch::is_index_path(path)
}
use crate::source::gguf::header::Value as GgufValue;
use crate::source::gguf::GgufSource;
use crate::source::{Listed, Listing, Source, StoredPiece};
use crate::units::{ByteCount, Counted, HumanBytes};
use crate::Result;

/// Renders a checkpoint as a readable table with totals and metadata.
pub fn render_table(cp: &Checkpoint) -> String {
    let mut out = String::new();
    for (path, header) in &cp.files {
        let _ = writeln!(out, "{path}");
        render_file(&mut out, header);
        out.push('\n');
    }
    write_quantized(&mut out, cp);
    if let Some(index) = &cp.index {
        let _ = writeln!(
            out,
            "index: {}, {}, total_size {}",
            Counted(cp.files.len(), "shard"),
            Counted(index.weight_map.len(), "tensor"),
            ByteCount(index.metadata.total_size)
        );
    }
    out
}

/// A line on a quantized checkpoint: its schemes, how many weights, and
/// its size once `--dequantize`d (or why that would be refused).
fn write_quantized(out: &mut String, cp: &Checkpoint) {
    match crate::source::quantized::summarize(cp) {
        None => {}
        Some(Ok(q)) => {
            let _ = writeln!(
                out,
                "quantized: {} ({} weights); {} tensor bytes ({}) after --dequantize (BF16)",
                q.schemes.join(", "),
                q.weights,
                q.dequantized_bytes,
                HumanBytes(q.dequantized_bytes)
            );
        }
        Some(Err(e)) => {
            let _ = writeln!(out, "quantized, but --dequantize would refuse it: {e}");
        }
    }
}

/// [`write_quantized`] as JSON, for a quantized checkpoint.
fn quantized_json(cp: &Checkpoint) -> Option<Value> {
    Some(match crate::source::quantized::summarize(cp)? {
        Ok(q) => json!({
            "schemes": q.schemes,
            "weights": q.weights,
            "dequantized_bytes": q.dequantized_bytes,
        }),
        Err(e) => json!({"error": e.to_string()}),
    })
}

fn render_file(out: &mut String, h: &Header) {
    let rows: Vec<[String; 5]> = h
        .tensors
        .iter()
        .map(|t| {
            [
                t.meta.name.clone(),
                t.meta.dtype.to_string(),
                format!("{:?}", t.meta.shape),
                t.len().to_string(),
                t.begin.to_string(),
            ]
        })
        .collect();
    write_table(out, ["name", "dtype", "shape", "bytes", "offset"], &rows, 3);
    let _ = writeln!(
        out,
        "  {}, data {}, header {}, file {}",
        Counted(h.tensors.len(), "tensor"),
        ByteCount(h.data_len()),
        ByteCount(h.header_len),
        ByteCount(h.file_len())
    );
    write_metadata(out, h.metadata.as_ref());
}

/// Writes rows under a head, columns padded to their widest cell; columns
/// from `right_from` on (numbers) right-aligned, the others left-aligned.
fn write_table<const N: usize>(
    out: &mut String,
    head: [&str; N],
    rows: &[[String; N]],
    right_from: usize,
) {
    let mut widths = head.map(|h| h.chars().count());
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut line = |cells: [&str; N]| {
        let mut s = String::from("  ");
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            let pad = " ".repeat(w - c.chars().count());
            if i >= right_from {
                s.push_str(&pad);
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&pad);
            }
            s.push_str("  ");
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    line(head);
    for r in rows {
        line(r.each_ref().map(String::as_str));
    }
}

/// Renders the listing of any input (what a source reads from its headers:
/// names, dtypes, shapes, byte lengths; where the bytes lie is the
/// source's business) as a table with totals and metadata.
pub fn render_listing(listing: &Listing) -> Result<String> {
    let mut out = String::new();
    let _ = writeln!(out, "{}", listing.input);
    let mut rows = Vec::with_capacity(listing.tensors.len());
    let mut total = 0u64;
    for t in &listing.tensors {
        let bytes = t.byte_len()?;
        total = total.saturating_add(bytes);
        rows.push([
            t.name.clone(),
            t.dtype.to_string(),
            format!("{:?}", t.shape),
            bytes.to_string(),
        ]);
    }
    write_table(&mut out, ["name", "dtype", "shape", "bytes"], &rows, 3);
    let _ = writeln!(
        out,
        "  {}, data {}",
        Counted(listing.tensors.len(), "tensor"),
        ByteCount(total)
    );
    write_metadata(&mut out, listing.metadata.as_ref());
    Ok(out)
}

/// A GGUF file: each tensor's type as stored (ggml's `Q4_K`, `Q8_0`, `F32`)
/// beside the dtype it is written as, then every metadata key, arrays
/// summarised (`[32000 x string: "<unk>", "<s>", "</s>", ...]`).
pub fn render_gguf(src: &GgufSource) -> Result<String> {
    let mut out = String::new();
    let h = src.header();
    let order = if h.big_endian { "big" } else { "little" };
    let _ = writeln!(out, "{}", src.input_name());
    let _ = writeln!(out, "  GGUF v{}, {order}-endian", h.version);
    let mut rows = Vec::with_capacity(src.tensors().len());
    let mut total = 0u64;
    for (k, t) in src.tensors().iter().enumerate() {
        let bytes = t.byte_len()?;
        total = total.saturating_add(bytes);
        rows.push([
            t.name.clone(),
            src.stored_type(k).to_string(),
            t.dtype.to_string(),
            format!("{:?}", t.shape),
            bytes.to_string(),
        ]);
    }
    write_table(
        &mut out,
        ["name", "stored", "dtype", "shape", "bytes"],
        &rows,
        4,
    );
    let _ = writeln!(
        out,
        "  {}, data {} as written (quantized types dequantized: --dequantize-to F32, F16 or BF16)",
        Counted(src.tensors().len(), "tensor"),
        ByteCount(total)
    );
    let _ = writeln!(out, "  metadata ({}):", Counted(h.metadata.len(), "key"));
    for (k, v) in &h.metadata {
        let _ = writeln!(out, "    {k}: {}", v.describe());
    }
    Ok(out)
}

/// [`render_gguf`] as JSON: the listing's fields, each tensor's `stored`
/// type, and `metadata` holding every key (an array as `{"type", "len",
/// "first"}`).
pub fn gguf_to_json(src: &GgufSource) -> Result<Value> {
    let mut v = listing_to_json(&Listing::of(src))?;
    for (k, t) in v["tensors"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        t["stored"] = json!(src.stored_type(k));
    }
    let metadata: serde_json::Map<String, Value> = src
        .header()
        .metadata
        .iter()
        .map(|(k, value)| {
            let shown = match value {
                GgufValue::Array { of, len, first } => {
                    json!({"type": of, "len": len, "first": first})
                }
                other => json!(other.to_metadata()),
            };
            (k.clone(), shown)
        })
        .collect();
    v["format"] = json!("gguf");
    v["metadata"] = Value::Object(metadata);
    Ok(v)
}

/// The listing as JSON: `{"input", "tensors": [{name, dtype, shape, bytes}], "data_bytes", "metadata"}`.
pub fn listing_to_json(listing: &Listing) -> Result<Value> {
    let mut total = 0u64;
    let mut tensors = Vec::with_capacity(listing.tensors.len());
    for t in &listing.tensors {
        let bytes = t.byte_len()?;
        total = total.saturating_add(bytes);
        tensors.push(json!({
            "name": t.name,
            "dtype": t.dtype.as_str(),
            "shape": t.shape,
            "bytes": bytes,
        }));
    }
    Ok(json!({
        "input": listing.input,
        "tensors": tensors,
        "tensor_count": listing.tensors.len(),
        "data_bytes": total,
        "metadata": listing.metadata,
    }))
}

/// How `source` cuts each of its tensors ([`Source::pieces`]): empty for
/// a tensor stored whole, so for every tensor of most inputs.
pub fn pieces_of(source: &dyn Source) -> Vec<Vec<StoredPiece>> {
    (0..source.tensors().len())
        .map(|k| source.pieces(k))
        .collect()
}

/// The dimensions `pieces` cut a tensor of `shape` at: those no piece
/// spans whole.
fn cut_dims(shape: &[u64], pieces: &[StoredPiece]) -> Vec<usize> {
    (0..shape.len())
        .filter(|&d| pieces.iter().any(|p| p.sizes.get(d) != Some(&shape[d])))
        .collect()
}

/// Adds to [`listing_to_json`]'s value, for each tensor stored in pieces,
/// `"cut"` (the dimensions they cut) and `"pieces"` (each one's
/// `offsets`, `sizes`, and `file`, `offset`, `length` of its record).
pub fn add_pieces_json(v: &mut Value, listing: &Listing, pieces: &[Vec<StoredPiece>]) {
    let Some(tensors) = v["tensors"].as_array_mut() else {
        return;
    };
    for ((t, meta), pieces) in tensors.iter_mut().zip(&listing.tensors).zip(pieces) {
        if pieces.is_empty() {
            continue;
        }
        t["cut"] = json!(cut_dims(&meta.shape, pieces));
        let all: Vec<Value> = pieces
            .iter()
            .map(|p| {
                json!({
                    "offsets": p.offsets,
                    "sizes": p.sizes,
                    "file": p.file,
                    "offset": p.offset,
                    "length": p.length,
                })
            })
            .collect();
        t["pieces"] = Value::Array(all);
    }
}

/// [`add_pieces_json`] for people: under [`render_listing`]'s table, a
/// line per tensor stored in pieces (the dimensions they cut, then each
/// piece's block `offsets+sizes` and `file@offset+length`).
pub fn render_pieces(listing: &Listing, pieces: &[Vec<StoredPiece>]) -> String {
    let mut out = String::new();
    for (meta, pieces) in listing.tensors.iter().zip(pieces) {
        if pieces.is_empty() {
            continue;
        }
        if out.is_empty() {
            out.push_str("  stored in pieces:\n");
        }
        let dims = cut_dims(&meta.shape, pieces);
        let cut = match dims.as_slice() {
            [] => "whole".to_string(),
            [d] => format!("cut at dim {d}"),
            _ => format!("cut at dims {dims:?}"),
        };
        let _ = write!(
            out,
            "    {} {:?}: {cut}, {} piece{}:",
            meta.name,
            meta.shape,
            pieces.len(),
            if pieces.len() == 1 { "" } else { "s" }
        );
        for p in pieces {
            let _ = write!(
                out,
                " {:?}+{:?} {}@{}+{};",
                p.offsets, p.sizes, p.file, p.offset, p.length
            );
        }
        out.pop();
        out.push('\n');
    }
    out
}

fn write_metadata(out: &mut String, metadata: Option<&crate::header::Metadata>) {
    match metadata {
        None => {}
        Some(md) if md.is_empty() => out.push_str("  metadata: {}\n"),
        Some(md) => {
            out.push_str("  metadata:\n");
            for (k, v) in md {
                let _ = writeln!(out, "    {k:?}: {v:?}");
            }
        }
    }
}

/// The same facts as JSON: `{"files": [...], "tensors": n, "data_bytes": n, "index": ...}`.
pub fn to_json(cp: &Checkpoint) -> Value {
    let files: Vec<Value> = cp
        .files
        .iter()
        .map(|(path, h)| {
            let tensors: Vec<Value> = h
                .tensors
                .iter()
                .map(|t| {
                    json!({
                        "name": t.meta.name,
                        "dtype": t.meta.dtype.as_str(),
                        "shape": t.meta.shape,
                        "bytes": t.len(),
                        "data_offsets": [t.begin, t.end],
                    })
                })
                .collect();
            json!({
                "path": path.to_string(),
                "header_len": h.header_len,
                "file_len": h.file_len(),
                "data_bytes": h.data_len(),
                "metadata": h.metadata,
                "tensors": tensors,
            })
        })
        .collect();
    let mut v = json!({
        "files": files,
        "tensors": cp.tensor_count(),
        "data_bytes": cp.data_len(),
        "index": cp.index,
    });
    if let Some(q) = quantized_json(cp) {
        v["quantized"] = q;
    }
    v
}

/// What becomes of the tensor `p` takes from `source` on its way to the
/// output, as `(from, to)`: its type as stored when the source converts
/// it (a GGUF `Q4_K`, dequantized), else the dtype its cast is from;
/// `None` when it is written as it is.
fn cast_of<'a, L: Listed>(p: &Planned, source: &'a L) -> Option<(&'a str, &'static str)> {
    let from = match (source.stored_as(p.index), p.cast) {
        (Some(stored), _) => stored,
        (None, Some(c)) => c.from().as_str(),
        (None, None) => return None,
    };
    Some((from, p.entry.meta.dtype.as_str()))
}

/// A plan's output files as JSON, serialized as they are written out
/// (`--dry-run --json`'s `outputs`): each file's fields, its tensors in
/// order with offsets, sources and casts, keys in sorted order. Serialized
/// without building a `Value` tree: at 92k tensors that tree took a
/// fan-out driver's dry run from 114 MiB to 229.
pub struct PlanFilesJson<'a, L> {
    /// The plan.
    pub plan: &'a crate::plan::Plan,
    /// Each shard's output path.
    pub paths: &'a [String],
    /// The sources it was made from.
    pub sources: &'a [L],
}

impl<L: Listed> serde::Serialize for PlanFilesJson<'_, L> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = ser.serialize_seq(Some(self.plan.shards.len().min(self.paths.len())))?;
        for (shard, path) in self.plan.shards.iter().zip(self.paths) {
            let h = &*shard.header.header;
            seq.serialize_element(&FileJson {
                data_bytes: h.data_len(),
                file_len: h.file_len(),
                header_len: h.header_len,
                metadata: &h.metadata,
                path,
                tensors: TensorsJson {
                    shard,
                    sources: self.sources,
                },
            })?;
        }
        seq.end()
    }
}

/// One output file; fields in the sorted order `json!` gives them.
#[derive(serde::Serialize)]
#[serde(bound = "")]
struct FileJson<'a, L: Listed> {
    data_bytes: u64,
    file_len: u64,
    header_len: u64,
    metadata: &'a Option<crate::header::Metadata>,
    path: &'a str,
    tensors: TensorsJson<'a, L>,
}

struct TensorsJson<'a, L> {
    shard: &'a crate::plan::ShardPlan,
    sources: &'a [L],
}

impl<L: Listed> serde::Serialize for TensorsJson<'_, L> {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let h = &*self.shard.header.header;
        let mut seq = ser.serialize_seq(Some(h.tensors.len()))?;
        for p in self.shard.planned(0) {
            let (t, src) = (p.entry, &self.sources[p.source]);
            seq.serialize_element(&TensorJson {
                cast: cast_of(&p, src).map(|(from, to)| CastJson { from, to }),
                data_offsets: [t.begin, t.end],
                dtype: t.meta.dtype.as_str(),
                name: &t.meta.name,
                shape: &t.meta.shape,
                source: SourceJson {
                    input: &src.listing().input,
                    name: &src.listing().tensors[p.index].name,
                },
            })?;
        }
        seq.end()
    }
}

#[derive(serde::Serialize)]
struct TensorJson<'a> {
    cast: Option<CastJson<'a>>,
    data_offsets: [u64; 2],
    dtype: &'a str,
    name: &'a str,
    shape: &'a [u64],
    source: SourceJson<'a>,
}

#[derive(serde::Serialize)]
struct CastJson<'a> {
    from: &'a str,
    to: &'a str,
}

#[derive(serde::Serialize)]
struct SourceJson<'a> {
    input: &'a str,
    name: &'a str,
}

/// A plan for people: per output file, its tensors in order. Built at its
/// exact size, which a first pass counts: a doubling `String` holds both
/// buffers while it moves (issue 25 bounds `--dry-run`'s memory).
pub fn render_plan<L: Listed>(plan: &crate::plan::Plan, paths: &[String], sources: &[L]) -> String {
    let mut len = ByteCounter(0);
    write_plan(&mut len, plan, paths, sources);
    let mut out = String::with_capacity(len.0);
    write_plan(&mut out, plan, paths, sources);
    out
}

/// A [`Write`] that only counts the bytes written to it.
struct ByteCounter(usize);

impl Write for ByteCounter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// [`render_plan`]'s text, written to `out`.
fn write_plan<L: Listed>(
    out: &mut impl Write,
    plan: &crate::plan::Plan,
    paths: &[String],
    sources: &[L],
) {
    for (shard, path) in plan.shards.iter().zip(paths) {
        let h = &*shard.header.header;
        let _ = writeln!(
            out,
            "{path}: {}, header {}, file {}",
            Counted(h.tensors.len(), "tensor"),
            ByteCount(h.header_len),
            ByteCount(h.file_len())
        );
        for p in shard.planned(0) {
            let (t, src) = (p.entry, &sources[p.source]);
            let cast = cast_of(&p, src)
                .map(|(from, to)| format!("  cast {from} -> {to}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:?} {} {:?} [{},{})  from {}:{:?}{cast}",
                t.meta.name,
                t.meta.dtype,
                t.meta.shape,
                t.begin,
                t.end,
                src.listing().input,
                src.listing().tensors[p.index].name
            );
        }
    }
    let _ = writeln!(
        out,
        "{}, {} of tensor data, {} in all",
        Counted(plan.tensor_count(), "tensor"),
        HumanBytes(plan.data_len()),
        HumanBytes(plan.file_len())
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, PlanOptions};
    use crate::{Dtype, TensorMeta};

    #[test]
    fn a_plan_is_rendered_at_its_exact_size() {
        let listing = Listing {
            input: "in.pt".into(),
            tensors: (0..300)
                .map(|i| TensorMeta::new(format!("layer.{i}.w"), Dtype::F32, vec![i % 7, 3]))
                .collect(),
            metadata: None,
        };
        let listings = [listing];
        let p = plan(&listings, &PlanOptions::default()).unwrap();
        let text = render_plan(&p, &["out.safetensors".to_string()], &listings);
        assert_eq!(text.capacity(), text.len());
        assert!(text.starts_with("out.safetensors: 300 tensors, header "));
        assert!(text.contains("  \"layer.0.w\" F32 [0, 3] [0,0)  from in.pt:\"layer.0.w\"\n"));
        assert!(text.ends_with("\n300 tensors, 10.51 KiB of tensor data, 31.19 KiB in all\n"));
    }
}
