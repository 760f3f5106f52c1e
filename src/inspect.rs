//! What `convert inspect` shows: a table for people, JSON for machines.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::header::Header;
use crate::index::Checkpoint;
use crate::units::HumanBytes;

/// Renders a checkpoint as a readable table with totals and metadata.
pub fn render_table(cp: &Checkpoint) -> String {
    let mut out = String::new();
    for (path, header) in &cp.files {
        let _ = writeln!(out, "{}", path.display());
        render_file(&mut out, header);
        out.push('\n');
    }
    if let Some(index) = &cp.index {
        let _ = writeln!(
            out,
            "index: {} shards, {} tensors, total_size {} ({})",
            cp.files.len(),
            index.weight_map.len(),
            index.metadata.total_size,
            HumanBytes(index.metadata.total_size)
        );
    }
    out
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
    let head = ["name", "dtype", "shape", "bytes", "offset"];
    let mut widths = head.map(str::len);
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::from("  ");
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            let pad = w - c.chars().count();
            // Numbers right-aligned, text left-aligned.
            if i >= 3 {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            }
            s.push_str("  ");
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(head));
    for r in &rows {
        let _ = writeln!(
            out,
            "{}",
            line([&r[0], &r[1], &r[2], &r[3], &r[4]].map(|s| s.as_str()))
        );
    }
    let _ = writeln!(
        out,
        "  {} tensors, {} data bytes ({}), header {} bytes, file {} bytes",
        h.tensors.len(),
        h.data_len(),
        HumanBytes(h.data_len()),
        h.header_len,
        h.file_len()
    );
    match &h.metadata {
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
            file_json(&path.display().to_string(), h, tensors)
        })
        .collect();
    json!({
        "files": files,
        "tensors": cp.tensor_count(),
        "data_bytes": cp.data_len(),
        "index": cp.index,
    })
}

/// A plan as JSON, for `--dry-run --json`: every output file with its
/// tensors in order, offsets, sources and casts.
pub fn plan_to_json(
    plan: &crate::plan::Plan,
    paths: &[String],
    sources: &[crate::source::Listing],
) -> Value {
    let files: Vec<Value> = plan
        .shards
        .iter()
        .zip(paths)
        .map(|(shard, path)| {
            let h = shard.header.header();
            let tensors: Vec<Value> = h
                .tensors
                .iter()
                .zip(&shard.refs)
                .map(|(t, r)| {
                    let src = &sources[r.source];
                    json!({
                        "name": t.meta.name,
                        "dtype": t.meta.dtype.as_str(),
                        "shape": t.meta.shape,
                        "data_offsets": [t.begin, t.end],
                        "source": {"input": src.input, "name": src.tensors[r.index].name},
                        "cast": r.cast.map(|c| json!({"from": c.from().as_str(), "to": c.to().as_str()})),
                    })
                })
                .collect();
            file_json(path, h, tensors)
        })
        .collect();
    json!({
        "outputs": files,
        "tensors": plan.tensor_count(),
        "data_bytes": plan.data_len(),
        "file_bytes": plan.file_len(),
    })
}

/// A plan for people: per output file, its tensors in order.
pub fn render_plan(
    plan: &crate::plan::Plan,
    paths: &[String],
    sources: &[crate::source::Listing],
) -> String {
    let mut out = String::new();
    for (shard, path) in plan.shards.iter().zip(paths) {
        let h = shard.header.header();
        let _ = writeln!(
            out,
            "{path}: {} tensors, header {} bytes, file {} bytes ({})",
            h.tensors.len(),
            h.header_len,
            h.file_len(),
            HumanBytes(h.file_len())
        );
        for (t, r) in h.tensors.iter().zip(&shard.refs) {
            let src = &sources[r.source];
            let cast = r
                .cast
                .map(|c| format!("  cast {} -> {}", c.from(), c.to()))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {:?} {} {:?} [{},{})  from {}:{:?}{cast}",
                t.meta.name,
                t.meta.dtype,
                t.meta.shape,
                t.begin,
                t.end,
                src.input,
                src.tensors[r.index].name
            );
        }
    }
    let _ = writeln!(
        out,
        "{} tensors, {} of tensor data, {} in all",
        plan.tensor_count(),
        HumanBytes(plan.data_len()),
        HumanBytes(plan.file_len())
    );
    out
}

/// One file's facts, shared by `inspect --json` and `--dry-run --json`.
fn file_json(path: &str, h: &Header, tensors: Vec<Value>) -> Value {
    json!({
        "path": path,
        "header_len": h.header_len,
        "file_len": h.file_len(),
        "data_bytes": h.data_len(),
        "metadata": h.metadata,
        "tensors": tensors,
    })
}

/// A source's listing for people (`convert inspect` of a PyTorch
/// checkpoint): its tensors in the input's order, from headers alone.
pub fn render_listing(l: &crate::source::Listing) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", l.input);
    let mut total = 0u64;
    for t in &l.tensors {
        let bytes = t.byte_len().unwrap_or(0);
        total = total.saturating_add(bytes);
        let _ = writeln!(out, "  {:?} {} {:?} {bytes}", t.name, t.dtype, t.shape);
    }
    let _ = writeln!(
        out,
        "  {} tensors, {total} data bytes ({})",
        l.tensors.len(),
        HumanBytes(total)
    );
    if let Some(md) = &l.metadata {
        out.push_str("  metadata:\n");
        for (k, v) in md {
            let _ = writeln!(out, "    {k:?}: {v:?}");
        }
    }
    out
}

/// A source's listing as JSON: `{"input", "tensors": [{name, dtype, shape, bytes}], "metadata"}`.
pub fn listing_to_json(l: &crate::source::Listing) -> Value {
    let tensors: Vec<Value> = l
        .tensors
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "dtype": t.dtype.as_str(),
                "shape": t.shape,
                "bytes": t.byte_len().ok(),
            })
        })
        .collect();
    json!({
        "input": l.input,
        "tensors": tensors,
        "metadata": l.metadata,
    })
}
