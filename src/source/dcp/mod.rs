//! PyTorch distributed checkpoints (`torch.distributed.checkpoint`, DCP) as
//! a source: a folder holding `.metadata` and one or more `__R_S.distcp`
//! files per rank, each tensor cut into chunks by rank (row blocks under
//! FSDP, column blocks under tensor parallelism, both on a 2-D mesh).
//!
//! Read without torch and without running its pickle:
//! - [`metadata`]: `.metadata` read with the PyTorch unpickler and a table
//!   of the checkpoint's own classes; every tensor's global shape, dtype,
//!   chunks and their items' places, before a byte of data is read;
//! - [`layout`]: the chunks checked to tile each tensor exactly (torch
//!   checks it not), and the order a row-major copy takes them in;
//! - [`item`]: a chunk's item, a whole `torch.save` archive at its offset
//!   in its `.distcp` file, read with the PyTorch source's zip layout and
//!   tensor walk (its local shard with its own strides, CRC-32 checked);
//! - [`assemble`]: a full tensor read row after row from its chunks, each
//!   item opened when first needed, in bounded memory.
//!
//! Checked at open, before any item is read: every item lies inside its
//! file (named without a path), no two items share bytes, and each is at
//! least its chunk's bytes long; so the tensors planned are bounded by
//! the bytes on disk. Non-tensor values are skipped and counted.

mod assemble;
mod hf;
mod item;
mod layout;
mod metadata;
mod row;

use crate::location::Opened;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use self::assemble::{Assembly, Piece, Plan};
use self::item::{Form, Item};
use self::layout::{check_tiling, cut_axis, Chunk};
use self::metadata::{Entry, Stored};
use super::blocking::BlockingReader;
use super::span::first_overlap;
use super::{Listing, OpenBlocking, Source, SourceOptions, Stamp, StoredPiece, TensorData};
use crate::error::dcp::DcpError;
use crate::error::note::{Note, Notice, Warning};
use crate::header::names::first_repeated;
use crate::header::{Metadata, TensorMeta};
use crate::limits::{Limit, Limits};
use crate::source::pytorch::model;
use crate::transform::Transform;
use crate::{Error, Result};

/// The metadata file's name in a checkpoint's folder.
pub(crate) const METADATA_FILE: &str = ".metadata";

pub(crate) use row::ROW;

/// One tensor's non-empty chunks, each with its item, and its cut axis.
#[derive(Debug)]
struct Layout {
    chunks: Vec<(Chunk, Item)>,
    axis: Option<usize>,
}

/// A distributed checkpoint as a source.
#[derive(Debug)]
pub(crate) struct DcpSource {
    /// Its metadata is `{"format": "pt"}`, as PyTorch's own conversion writes.
    listing: Listing,
    layouts: Vec<Layout>,
    /// The `.distcp` files the chunks name, by index, and their names.
    files: Vec<Arc<File>>,
    names: Vec<String>,
    /// `.metadata`'s stamp, then each file's.
    stamps: Vec<Stamp>,
    /// `.metadata` and the files, as opened, for [`Source::check_unchanged`].
    handles: Vec<Arc<File>>,
    /// `.metadata` and the files, as locations with their identities: what
    /// the plan id and the output-is-input check cover.
    read: Vec<Opened>,
    skipped: Vec<String>,
}

fn bad(e: DcpError) -> Error {
    Error::new(e)
}

/// Reads `.metadata` whole (its size bounded first, by the caller's
/// `dcp-metadata-bytes`).
fn read_metadata(file: &mut File, len: u64, limits: &Limits) -> Result<Vec<u8>> {
    if len > limits.get(Limit::DcpMetadataBytes) {
        let what = format!(".metadata is {len} bytes");
        return Err(limits.refuse(Limit::DcpMetadataBytes, what));
    }
    let mut data = Vec::with_capacity(len as usize);
    file.take(len).read_to_end(&mut data).map_err(Error::io)?;
    Ok(data)
}

/// The `.distcp` files of a checkpoint, opened once each.
struct Files<'a> {
    dir: &'a Path,
    by_name: HashMap<String, u32>,
    opened: Vec<(Arc<File>, u64)>,
}

impl Files<'_> {
    /// File `name` of the folder: its index and length. A name with a path
    /// in it (torch joins it to the folder as it is: `../x`, `/etc/x`) is
    /// refused.
    fn get(&mut self, name: &str) -> Result<(u32, u64)> {
        if let Some(&i) = self.by_name.get(name) {
            return Ok((i, self.opened[i as usize].1));
        }
        let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']);
        if !plain || name == METADATA_FILE {
            return Err(bad(DcpError::FileName(name.to_string())));
        }
        let file = crate::index::open_regular(&self.dir.join(name))?;
        let len = file.metadata().map_err(Error::io)?.len();
        let i = self.opened.len() as u32;
        self.opened.push((Arc::new(file), len));
        self.by_name.insert(name.to_string(), i);
        Ok((i, len))
    }
}

/// Checks `stored`, the item of `chunk` of `e`, and places it.
fn place(files: &mut Files, e: &Entry, chunk: &Chunk, stored: Option<&Stored>) -> Result<Item> {
    let Some(s) = stored else {
        return Err(bad(DcpError::NoStorage {
            chunk: chunk.label(),
        }));
    };
    if !s.transforms.is_empty() {
        return Err(bad(DcpError::Transformed {
            chunk: chunk.label(),
            transforms: s.transforms.join(", "),
        }));
    }
    let (file, file_len) = files.get(&s.path)?;
    if s.offset
        .checked_add(s.length)
        .is_none_or(|end| end > file_len)
    {
        return Err(bad(DcpError::ItemOutside {
            chunk: chunk.label(),
            file: s.path.clone(),
            offset: s.offset,
            length: s.length,
            file_len,
        }));
    }
    // The chunk's bytes lie inside its item: a claim larger than the item
    // is refused before anything is planned on it.
    let width = model::width(e.dtype);
    let bytes = chunk.numel().saturating_mul(width);
    if bytes > s.length {
        return Err(bad(DcpError::ItemShort {
            chunk: chunk.label(),
            length: s.length,
            bytes,
        }));
    }
    Ok(Item {
        file,
        offset: s.offset,
        length: s.length,
        form: Form::Archive,
    })
}

/// Refuses two items sharing bytes of a file (torch writes each once).
fn check_items_apart(layouts: &[Layout], tensors: &[TensorMeta], names: &[String]) -> Result<()> {
    let all: Vec<(Item, usize)> = layouts
        .iter()
        .enumerate()
        .flat_map(|(k, l)| l.chunks.iter().map(move |(_, item)| (*item, k)))
        .collect();
    let spans = all.iter().enumerate();
    let spans = spans.map(|(j, (i, _))| (i.file, i.offset, i.offset + i.length, j));
    let Some((a, b, _)) = first_overlap(spans.collect()) else {
        return Ok(());
    };
    let ((item, ka), (_, kb)) = (all[a], all[b]);
    Err(bad(DcpError::ItemOverlap {
        file: names[item.file as usize].clone(),
        first: tensors[ka].name.clone(),
        second: tensors[kb].name.clone(),
    }))
}

impl DcpSource {
    /// Opens the checkpoint in folder `dir`.
    pub(crate) fn open(dir: &Path, options: &SourceOptions) -> Result<DcpSource> {
        let input = dir.display().to_string();
        Self::open_in(dir, &input, &options.limits).map_err(|e| e.with_input(&input))
    }

    fn open_in(dir: &Path, input: &str, limits: &Limits) -> Result<DcpSource> {
        let mut files = Files {
            dir,
            by_name: HashMap::new(),
            opened: Vec::new(),
        };
        let mut tensors = Vec::new();
        let mut layouts = Vec::new();
        let mut stamps = Vec::new();
        let mut handles = Vec::new();
        let mut skipped = Vec::new();
        if dir.join(METADATA_FILE).exists() {
            let mut meta = crate::index::open_regular(&dir.join(METADATA_FILE))?;
            let meta_len = meta.metadata().map_err(Error::io)?.len();
            let parsed = metadata::parse(&read_metadata(&mut meta, meta_len, limits)?)?;
            stamps.push(Stamp::of(&meta, meta_len));
            handles.push(Arc::new(meta));
            for e in &parsed.tensors {
                let on = |err: Error| err.with_tensor(&e.name);
                let chunks: Vec<Chunk> = e.chunks.iter().map(|(c, _)| c.clone()).collect();
                let layout = check(&e.name, e.dtype, &e.shape, &chunks, |placed| {
                    for (chunk, stored) in e.chunks.iter().filter(|(c, _)| c.numel() > 0) {
                        let item = place(&mut files, e, chunk, stored.as_ref())?;
                        placed.push((chunk.clone(), item));
                    }
                    Ok(())
                })
                .map_err(on)?;
                layouts.push(layout);
                tensors.push(TensorMeta::new(e.name.clone(), e.dtype, e.shape.clone()));
            }
            skipped = parsed.skipped;
        } else {
            for t in hf::read(dir, &mut files)? {
                let chunks: Vec<Chunk> = t.chunks.iter().map(|(c, _)| c.clone()).collect();
                let layout = check(&t.name, t.dtype, &t.shape, &chunks, |placed| {
                    placed.extend(t.chunks.into_iter().filter(|(c, _)| c.numel() > 0));
                    Ok(())
                })
                .map_err(|e| e.with_tensor(&t.name))?;
                layouts.push(layout);
                tensors.push(TensorMeta::new(t.name, t.dtype, t.shape));
            }
        }
        let mut names = vec![String::new(); files.opened.len()];
        for (name, &i) in &files.by_name {
            names[i as usize] = name.clone();
        }
        check_items_apart(&layouts, &tensors, &names)?;
        if let Some(name) = first_repeated(&tensors) {
            return Err(bad(DcpError::Twice {
                what: "tensor",
                name,
            }));
        }
        for (f, len) in &files.opened {
            stamps.push(Stamp::of(f, *len));
            handles.push(f.clone());
        }
        let described = Some(dir.join(METADATA_FILE)).filter(|m| m.exists());
        let data = names.iter().map(|n| dir.join(n));
        let read = described
            .into_iter()
            .chain(data)
            .map(|p| Opened::file(&p))
            .collect();
        let mut metadata = Metadata::new();
        metadata.insert("format".into(), "pt".into());
        Ok(DcpSource {
            read,
            listing: Listing {
                input: input.to_string(),
                tensors,
                metadata: Some(metadata),
            },
            layouts,
            files: files.opened.into_iter().map(|(f, _)| f).collect(),
            names,
            stamps,
            handles,
            skipped,
        })
    }

    /// The names of the non-tensor values skipped.
    pub(crate) fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// Tensor `k`'s chunks and cut axis, as [`Assembly`] reads them.
    fn plan(&self, k: usize) -> Plan {
        let t = &self.listing.tensors[k];
        let l = &self.layouts[k];
        let pieces = l
            .chunks
            .iter()
            .map(|(chunk, item)| Piece {
                chunk: chunk.clone(),
                item: *item,
                file: self.files[item.file as usize].clone(),
            })
            .collect();
        Plan {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            pieces,
            axis: l.axis,
        }
    }
}

/// Checks that `chunks` tile a tensor of `shape` exactly and that its
/// bytes fit 64 bits, then places its non-empty chunks' items (`place`
/// pushes them) and says where the chunks cut it.
fn check(
    name: &str,
    dtype: crate::Dtype,
    shape: &[u64],
    chunks: &[Chunk],
    place: impl FnOnce(&mut Vec<(Chunk, Item)>) -> Result<()>,
) -> Result<Layout> {
    check_tiling(name, shape, chunks)?;
    let bytes = crate::dtype::numel(shape).and_then(|n| n.checked_mul(model::width(dtype)));
    if bytes.is_none() {
        return Err(bad(DcpError::TooLarge {
            shape: shape.to_vec(),
        }));
    }
    let mut placed = Vec::new();
    place(&mut placed)?;
    Ok(Layout {
        chunks: placed,
        axis: cut_axis(shape, chunks),
    })
}

impl Source for DcpSource {
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn identity(&self) -> Option<String> {
        super::identities(&self.stamps)
    }

    fn opened(&self) -> Vec<Opened> {
        self.read.clone()
    }

    fn check_unchanged(&self) -> Result<()> {
        super::all_unchanged(&self.handles, &self.stamps, &self.listing.input)
    }

    /// Every tensor is assembled from its chunks' items on the calling
    /// thread: the items are opened (their archives read) there, not at
    /// planning.
    fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
        let plan = self.plan(k);
        // Items written big-endian (torch on such a machine) are swapped
        // by the dtype; the archives say their order once opened, so a
        // mixed tensor is refused there.
        let transform = Transform::Identity;
        Some(Box::new(move || {
            let r: super::BlockingRead = Box::new(Assembly::new(plan));
            Ok((r, transform))
        }))
    }

    fn pieces(&self, k: usize) -> Vec<StoredPiece> {
        let chunks = &self.layouts[k].chunks;
        let piece = |(c, item): &(Chunk, Item)| StoredPiece {
            offsets: c.offsets.to_vec(),
            sizes: c.sizes.to_vec(),
            file: self.names[item.file as usize].clone(),
            offset: item.offset,
            length: item.length,
        };
        chunks.iter().map(piece).collect()
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        async move {
            let open = self.open_blocking(k).expect("every tensor opens blocking");
            let opened = tokio::task::spawn_blocking(open).await;
            let (r, transform) = opened.map_err(std::io::Error::other)??;
            Ok(TensorData::new(BlockingReader::new(r)).with_transform(transform))
        }
        .boxed()
    }
}

/// Opens the checkpoint in folder `path` as a source, saying which
/// non-tensor values it skips (numbers, strings: a step count, the
/// optimizer's hyper-parameters), as the PyTorch source does.
pub(crate) fn open_folder(
    path: &Path,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let src = DcpSource::open(path, options)?;
    let skipped = src.skipped();
    if !skipped.is_empty() && !options.listing_only {
        notice(&Note::Warning(Warning::SkippedValues {
            input: src.input_name().to_string(),
            count: skipped.len(),
            paths: skipped.iter().take(8).cloned().collect(),
        }));
    }
    Ok(Box::new(src))
}
