//! HDF5 files (Keras `save_weights`: transformers' `tf_model.h5`, Keras 3
//! `*.weights.h5`, anything h5py writes with its defaults) as a source:
//! each dataset is a tensor named by its path from the root, without the
//! leading `/` (`bert/tf_bert_model/bert/embeddings/word_embeddings/weight:0`,
//! `layers/dense/vars/0`). Attributes (Keras' `layer_names`,
//! `weight_names`) are not needed for that and are not read; `--names hf`
//! (`source::hf::tf`) maps a transformers TF file's paths to PyTorch names.
//!
//! The reader is our own, of what h5py and libhdf5 write by default and a
//! little more (the README's "HDF5 files" lists what is read and what is
//! refused by name): superblocks 0 to 3, object headers 1 and 2, groups
//! as symbol tables or link messages (`dense`: a fractal heap indexed by a
//! version 2 B-tree), contiguous, compact and chunked layouts, each chunk
//! index a module (`btree`, `farray`, `earray`, `bt2index`; or none).
//!
//! Why not a crate: a binding to libhdf5 (`hdf5`, `hdf5-metno`) needs the C
//! library at build time, which a fresh machine with only the registry
//! does not have. Of the pure-Rust readers on crates.io, `hdf5-reader`
//! (0.12, 30,000 lines, with ndarray, rayon, memmap2, lru) reads a
//! dataset into an ndarray or a chunk iterator that first lists every
//! chunk and caches whole datasets, and does not expose where a contiguous
//! dataset's bytes are, so the copy engine's zero-copy file ranges could
//! not be used and memory would follow the dataset's size; `hdf5-pure`
//! and `rust-hdf5` are read-write libraries of a similar size whose read
//! paths also decode whole datasets. The subset Keras files use is small:
//! about a thousand lines here, every claim bounded by the file's length
//! before it is allocated, fuzzed (`fuzz/fuzz_targets/hdf5_file.rs`).
//!
//! How the bytes are served: a contiguous dataset is a file range (the
//! fast path: positional reads, or the kernel's copy); a compact one is
//! in its object header (at most 64 KiB, held); a chunked one is read a
//! row of chunks at a time (`chunks`); what was never written is its
//! fill value. Big-endian data is swapped by the sink.
//!
//! Recognised by content: HDF5's 8-byte signature at the start of the file
//! ([`looks_like_hdf5`]).

mod bt2index;
mod btree;
mod chunks;
mod dataset;
mod dense;
mod earray;
mod farray;
mod filters;
mod group;
mod header;
mod read;
mod superblock;

use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;

use self::chunks::{chunk_bytes, list_chunks, Chunked, ChunkedReader};
use self::dataset::{read_dataset, Layout};
use self::read::{bad, Geometry, ReadBudget};
use super::backed::{FileBacked, Places};
use super::format::{FileInput, FormatRow, Stream};
use super::span::first_overlap;
use super::{BlockingRead, Source, Stamp};
use crate::error::note::Note;
use crate::header::TensorMeta;
use crate::limits::Limits;
use crate::transform::Transform;
use crate::{Error, Result};

/// The HDF5 row of the format table: HDF5's signature; spooled from a
/// stream.
pub(crate) const ROW: FormatRow = FormatRow {
    magic: Some(looks_like_hdf5),
    ..FormatRow::new(
        "hdf5",
        "an HDF5 file",
        open_file,
        Stream::Spool("an HDF5 file needs random access"),
    )
};

/// Opens the file, says how many links were skipped, and names its
/// tensors as PyTorch does when `--names hf` asks.
fn open_file(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    let mut src = Hdf5Source::open_within(o.file, o.len, o.input, &o.options.limits)?;
    src.origin = o.origin;
    if src.places.skipped > 0 {
        (o.notice)(&Note::Info(format!(
            "{}: skipped {} soft or external links, links to an object listed before, and objects that are not datasets",
            o.input, src.places.skipped
        )));
    }
    super::hf::named(Box::new(src), o.options, super::hf::Convention::Tf)
}

/// The HDF5 reader's errors (they live in the error layer).
pub use crate::error::hdf5 as error;

/// Where a tensor's bytes are.
#[derive(Debug, Clone)]
enum Data {
    /// A run of the file.
    Span { offset: u64, len: u64 },
    /// In the object header (a compact dataset).
    Held(Arc<Vec<u8>>),
    /// Never written: `len` bytes of the fill value.
    Fill { element: Vec<u8>, len: u64 },
    /// In chunks.
    Chunked(Chunked),
}

/// An HDF5 file's datasets as a source.
pub type Hdf5Source = FileBacked<Hdf5Places>;

/// Where an HDF5 file's datasets are, and how their bytes become little-endian.
#[derive(Debug)]
pub struct Hdf5Places {
    data: Vec<Data>,
    transforms: Vec<Transform>,
    skipped: u64,
}

impl Hdf5Source {
    /// Lists the datasets of the HDF5 file `file`, `len` bytes long.
    pub fn open(file: File, len: u64, input: &str) -> Result<Self> {
        Self::open_within(file, len, input, &Limits::default())
    }

    /// [`open`](Self::open) under the caller's limits (a row of chunks
    /// over `hdf5-chunk-row-bytes` is refused).
    pub fn open_within(file: File, len: u64, input: &str, limits: &Limits) -> Result<Self> {
        let listed = list(&file, len, limits).map_err(|e| e.with_input(input))?;
        let stamp = Stamp::of(&file, len);
        let places = Hdf5Places {
            data: listed.data,
            transforms: listed.transforms,
            skipped: listed.skipped,
        };
        let files = vec![(Arc::new(file), stamp)];
        Ok(FileBacked::new(input, files, listed.tensors, places))
    }

    /// Soft and external links, hard links to an object listed before
    /// (each is listed once, under its first path), and objects that are
    /// not datasets (a committed datatype), which are not read.
    pub fn skipped(&self) -> u64 {
        self.places.skipped
    }
}

impl Places for Hdf5Places {
    fn span(&self, k: usize) -> Option<(usize, u64, u64)> {
        let Data::Span { offset, len } = self.data[k] else {
            return None;
        };
        Some((0, offset, len))
    }

    fn transform(&self, k: usize) -> Transform {
        self.transforms[k]
    }

    /// A blocking reader of tensor `k`'s bytes, unless it is a file range.
    fn reader(source: &Hdf5Source, k: usize) -> Option<BlockingRead> {
        Some(match &source.places.data[k] {
            Data::Span { .. } => return None,
            Data::Held(bytes) => Box::new(io::Cursor::new(Arc::clone(bytes).to_vec())),
            Data::Fill { element, len } => Box::new(Repeat::new(element.clone(), *len)),
            Data::Chunked(c) => Box::new(ChunkedReader::new(
                source.files()[0].clone(),
                c.clone(),
                source.input_name(),
                &source.tensors()[k].name,
            )),
        })
    }
}

/// What [`list`] found.
struct Listed {
    tensors: Vec<TensorMeta>,
    data: Vec<Data>,
    transforms: Vec<Transform>,
    skipped: u64,
}

fn list(file: &File, len: u64, limits: &Limits) -> Result<Listed> {
    let budget = ReadBudget::for_file(len);
    let mut geo = Geometry {
        file,
        len,
        offset_size: 8,
        length_size: 8,
        budget: &budget,
    };
    let sb = superblock::read_superblock(geo)?;
    geo.offset_size = sb.offset_size;
    geo.length_size = sb.length_size;
    let walked = group::walk(geo, sb.root)?;
    let mut out = Listed {
        tensors: Vec::new(),
        data: Vec::new(),
        transforms: Vec::new(),
        skipped: walked.links_skipped,
    };
    let unwritten_limit = len.saturating_mul(16).saturating_add(1 << 20);
    let mut unwritten = 0u64;
    for found in walked.objects {
        let named = |e: Error| e.with_tensor(found.path.as_str());
        let Some(d) = read_dataset(geo, found.header, found.messages).map_err(named)? else {
            out.skipped += 1;
            continue;
        };
        let meta = TensorMeta::new(found.path.as_str(), d.dtype, d.shape.clone());
        let byte_len = meta.byte_len().map_err(named)?;
        let width = d.fill.len();
        let wrong_size = |size: u64| {
            let e = error::Hdf5Error::Malformed(format!(
                "data of {size} bytes; shape and dtype make {byte_len}"
            ));
            named(bad(e, d.header))
        };
        let data = match d.layout {
            Layout::Contiguous(Some((offset, size))) => {
                if size != byte_len {
                    return Err(wrong_size(size));
                }
                Data::Span { offset, len: size }
            }
            Layout::Contiguous(None) => {
                unwritten = unwritten.saturating_add(byte_len);
                Data::Fill {
                    element: d.fill,
                    len: byte_len,
                }
            }
            Layout::Compact(bytes) => {
                if bytes.len() as u64 != byte_len {
                    return Err(wrong_size(bytes.len() as u64));
                }
                Data::Held(Arc::new(bytes))
            }
            Layout::Chunked { chunk, index } => {
                let chunks = list_chunks(geo, index, &d.shape, &d.max_shape, &chunk, width, limits)
                    .map_err(named)?;
                let per_chunk = chunk_bytes(&chunk, width);
                let stored = per_chunk.saturating_mul(chunks.len() as u64);
                unwritten = unwritten.saturating_add(byte_len.saturating_sub(stored));
                Data::Chunked(Chunked {
                    shape: d.shape,
                    chunk,
                    width,
                    filters: d.filters,
                    fill: d.fill,
                    chunks: Arc::new(chunks),
                })
            }
        };
        if unwritten > unwritten_limit {
            let e = error::Hdf5Error::Unwritten {
                bytes: unwritten,
                limit: unwritten_limit,
            };
            return Err(named(bad(e, d.header)));
        }
        out.transforms
            .push(Transform::to_little_endian(meta.dtype, d.big_endian));
        out.tensors.push(meta);
        out.data.push(data);
    }
    check_shared_bytes(&out)?;
    Ok(out)
}

/// Refuses two datasets, or two chunks, whose stored bytes overlap:
/// libhdf5 gives each its own, and records naming one compressed chunk (or
/// one run of the file) again and again would write it again and again, an
/// output of any size from a small file.
fn check_shared_bytes(listed: &Listed) -> Result<()> {
    let mut spans = Vec::new();
    for (k, data) in listed.data.iter().enumerate() {
        match data {
            Data::Span { offset, len } => spans.push(((), *offset, offset.saturating_add(*len), k)),
            Data::Chunked(c) => {
                let chunks = c.chunks.iter();
                spans.extend(chunks.map(|ch| ((), ch.addr, ch.addr.saturating_add(ch.size), k)));
            }
            Data::Held(_) | Data::Fill { .. } => {}
        }
    }
    let Some((a, b, at)) = first_overlap(spans) else {
        return Ok(());
    };
    let name = |k: usize| listed.tensors[k].name.as_str();
    let e = error::Hdf5Error::Malformed(format!(
        "datasets {:?} and {:?} share stored bytes",
        name(a),
        name(b)
    ));
    Err(bad(e, at).with_tensor(name(b)))
}

/// `len` bytes of one element repeated.
struct Repeat {
    element: Vec<u8>,
    left: u64,
    /// Where in the element the next byte is.
    phase: usize,
}

impl Repeat {
    fn new(element: Vec<u8>, len: u64) -> Self {
        Repeat {
            element,
            left: len,
            phase: 0,
        }
    }
}

impl Read for Repeat {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = out
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        for b in &mut out[..n] {
            *b = self.element[self.phase];
            self.phase = (self.phase + 1) % self.element.len();
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Whether `first` (an input's first bytes) is the start of an HDF5 file.
///
/// ```
/// use safetensors_stream::source::hdf5::looks_like_hdf5;
///
/// assert!(looks_like_hdf5(b"\x89HDF\r\n\x1a\n\x00\x00"));
/// assert!(!looks_like_hdf5(b"\x89PNG\r\n\x1a\n"));
/// ```
pub fn looks_like_hdf5(first: &[u8]) -> bool {
    first.starts_with(superblock::SIGNATURE)
}
