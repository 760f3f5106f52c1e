//! Existing safetensors files, alone or as a sharded checkpoint: reading
//! their headers from a path ([`read_file_header`], [`Checkpoint::open`])
//! and reading their tensors ([`SafetensorsSource`]).
//!
//! Layer: source. May import format detection, the header and index
//! layers and below.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::detect::say_what_it_is;
use super::npz::zip::PositionalReader;
use super::{file_range, FileSpan, Source, TensorData};
use crate::header::read::{read_header, read_path_header};
use crate::header::{Header, Metadata, Rules, TensorMeta};
use crate::index::ShardIndex;
use crate::index::{check_against_shards, file_name, is_index_path, open_regular, Checkpoint};
use crate::location::{Location, Opened};
use crate::Result;

/// Opens `path` (`-` for standard input) and validates its header; the
/// error names the path, and says what the file is when it is another
/// format convert reads (an .npz, a PyTorch checkpoint).
///
/// ```no_run
/// use safetensors_stream::{header::Rules, source::read_file_header};
///
/// let header = read_file_header("model.safetensors".as_ref(), Rules::STRICT)?;
/// println!("{} tensors, {} data bytes", header.tensors.len(), header.data_len());
/// # Ok::<(), safetensors_stream::Error>(())
/// ```
pub fn read_file_header(path: &Path, rules: Rules) -> Result<Header> {
    read_path_header(path, rules)
        .map_err(|e| say_what_it_is(e, path))
        .map_err(|e| e.with_input(path.display()))
}

impl Checkpoint {
    /// Opens `path`: a `.safetensors` file, or an index whose shards are all
    /// validated and checked against its `weight_map` and `total_size`.
    /// Reads headers only.
    pub fn open(path: &Path, rules: Rules) -> Result<Checkpoint> {
        let (index, files) = open_local(path, rules)?;
        let files = files.into_iter();
        Ok(Checkpoint {
            index,
            files: files.map(|(p, h)| (Location::File(p), h)).collect(),
        })
    }
}

/// A checkpoint's files by their paths, each with its header.
type LocalFiles = Vec<(PathBuf, Header)>;

/// [`Checkpoint::open`], each file by its path.
fn open_local(path: &Path, rules: Rules) -> Result<(Option<ShardIndex>, LocalFiles)> {
    if !is_index_path(path) {
        let header = read_file_header(path, rules)?;
        return Ok((None, vec![(path.to_path_buf(), header)]));
    }
    let index = ShardIndex::from_json_file(path)?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut files = Vec::new();
    for name in index
        .shard_names()
        .map_err(|e| e.with_input(path.display()))?
    {
        let shard = dir.join(name);
        // Its type first, without blocking: reading the header opens it again.
        drop(open_regular(&shard)?);
        let header = read_file_header(&shard, rules)?;
        files.push((shard, header));
    }
    let named: Vec<_> = files.iter().map(|(p, h)| (file_name(p), h)).collect();
    check_against_shards(&index, &named).map_err(|e| e.with_input(path.display()))?;
    Ok((Some(index), files))
}

/// A safetensors file, or a sharded checkpoint opened by its index, as one source.
///
/// Validated on open with the reference reader's rules, except that a key
/// given twice is refused: which of the two would we copy?
#[derive(Debug)]
pub struct SafetensorsSource {
    input: String,
    files: Vec<Arc<File>>,
    /// Each file as it was when opened.
    opened: Vec<super::Stamp>,
    /// The shards an index named, as opened (none for one file).
    shards: Vec<Opened>,
    tensors: Vec<TensorMeta>,
    /// Where each tensor's bytes start in its file. A tensor ends where the
    /// next one of its file starts (a header's tensors tile its data, checked
    /// on open) and the file is found from `parts`: a million tensors carry
    /// 8 bytes each, not a file index and a length too.
    offsets: Vec<u64>,
    /// Per file, in order: its first tensor and the end of its data.
    parts: Vec<Part>,
    metadata: Option<Metadata>,
}

/// One file's share of the listing (tensors are listed file by file).
#[derive(Debug)]
struct Part {
    /// Index of the file's first tensor.
    first: usize,
    /// Absolute offset of the end of the file's data: its length.
    data_end: u64,
}

impl SafetensorsSource {
    /// Opens `path` (a `.safetensors` file or a `.safetensors.index.json`), reading headers only.
    pub fn open(path: &Path) -> Result<Self> {
        let (index, files) = open_local(path, Rules::SOURCE)?;
        let mut parts = Vec::with_capacity(files.len());
        let mut shards = Vec::new();
        for (shard, header) in files {
            let file = open_regular(&shard)?;
            if index.is_some() {
                shards.push(Opened::open_file(&shard, &file));
            }
            parts.push((file, header));
        }
        let mut src = Self::from_parts(path.display().to_string(), parts);
        src.shards = shards;
        Ok(src)
    }

    /// Reads the header of the safetensors file `file`, `len` bytes long.
    pub fn from_file(file: File, len: u64, input: &str) -> Result<Self> {
        // Positional reads: the handle's offset may be anywhere (a spooled temp file).
        let mut r =
            std::io::BufReader::with_capacity(64 * 1024, PositionalReader::new(&file, 0, len));
        let header = read_header(&mut r, len, Rules::SOURCE).map_err(|e| e.with_input(input))?;
        Ok(Self::from_parts(input.to_string(), vec![(file, header)]))
    }

    /// A safetensors file whose header was already read and checked
    /// against its length (a spooled stream).
    pub(crate) fn from_data(file: File, header: Header, input: &str) -> Self {
        Self::from_parts(input.to_string(), vec![(file, header)])
    }

    fn from_parts(input: String, parts: Vec<(File, Header)>) -> Self {
        let count = parts.iter().map(|(_, h)| h.tensors.len()).sum();
        let mut src = SafetensorsSource {
            input,
            files: Vec::with_capacity(parts.len()),
            opened: Vec::with_capacity(parts.len()),
            shards: Vec::new(),
            tensors: Vec::with_capacity(count),
            offsets: Vec::with_capacity(count),
            parts: Vec::with_capacity(parts.len()),
            metadata: None,
        };
        for (file, header) in parts {
            let (start, file_len) = (header.data_start(), header.file_len());
            src.opened.push(super::Stamp::of(&file, file_len));
            // Shards' metadata merge in shard order; usually they are all equal.
            if let Some(md) = header.metadata {
                src.metadata.get_or_insert_with(Metadata::new).extend(md);
            }
            src.parts.push(Part {
                first: src.tensors.len(),
                data_end: file_len,
            });
            for t in header.tensors {
                src.offsets.push(start + t.begin);
                src.tensors.push(t.meta);
            }
            src.files.push(Arc::new(file));
        }
        src
    }
}

impl SafetensorsSource {
    /// Tensor `k`'s file, and the absolute offset and length of its bytes.
    fn locate(&self, k: usize) -> (&Arc<File>, u64, u64) {
        // The last file whose first tensor is at or before k. (A shard with
        // no tensors shares its first index with the next: the later one,
        // which holds k, is found.)
        let part = self.parts.partition_point(|p| p.first <= k) - 1;
        let next_part = self
            .parts
            .get(part + 1)
            .map_or(self.offsets.len(), |p| p.first);
        let end = match k + 1 < next_part {
            true => self.offsets[k + 1],
            false => self.parts[part].data_end,
        };
        let offset = self.offsets[k];
        (&self.files[part], offset, end - offset)
    }
}

impl Source for SafetensorsSource {
    fn input_name(&self) -> &str {
        &self.input
    }

    fn tensors(&self) -> &[TensorMeta] {
        &self.tensors
    }

    fn metadata(&self) -> Option<&Metadata> {
        self.metadata.as_ref()
    }

    fn identity(&self) -> Option<String> {
        super::identities(&self.opened)
    }

    fn opened(&self) -> Vec<Opened> {
        self.shards.clone()
    }

    fn check_unchanged(&self) -> Result<()> {
        for (f, opened) in self.files.iter().zip(&self.opened) {
            super::unchanged(f, opened, &self.input)?;
        }
        Ok(())
    }

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        let (file, offset, len) = self.locate(k);
        Some(FileSpan {
            file: file.clone(),
            offset,
            len,
            transform: crate::transform::Transform::Identity,
            crc: None,
        })
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        let (file, offset, len) = self.locate(k);
        async move { Ok(TensorData::new(file_range(file, offset, len).await?)) }.boxed()
    }
}
