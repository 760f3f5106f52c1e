//! Existing safetensors files, alone or as a sharded checkpoint: reading
//! their headers from a path (for `read_file_header` and
//! [`Checkpoint::open`], in `super::checkpoint`), reading their tensors
//! ([`SafetensorsSource`]), and the format's row.
//!
//! Layer: source, a format: may import the format descriptor, the spool,
//! the header and index layers and below.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use tokio::io::AsyncReadExt;

use super::format::{spooling, ByPath, FileInput, FormatRow, Stream, StreamInput};
use super::spool::spool;
use super::{file_range, FileSpan, Listing, Source, TensorData, TensorReader};
use crate::header::read::{read_header, read_path_header};
use crate::header::{check_file_len, check_prefix, parse_header_json};
use crate::header::{Header, Metadata, Rules};
use crate::index::{
    check_against_shards, file_name, is_index_path, open_regular, Checkpoint, ShardIndex,
};
use crate::io_util::PositionalReader;
use crate::limits::Limits;
use crate::location::{Location, Opened};
use crate::{Error, HeaderError, Result};

/// [`read_file_header`](super::read_file_header), saying what a file of
/// another format is by `explain`.
pub(crate) fn read_header_explained(path: &Path, rules: Rules, explain: Explain) -> Result<Header> {
    read_path_header(path, rules)
        .map_err(|e| explain(e, path))
        .map_err(|e| e.with_input(path.display()))
}

/// What turns an error reading a path as safetensors into one saying what
/// the file is instead (`detect::say_what_it_is`, which a format cannot
/// import: the format table, which detection reads, imports the formats).
pub(crate) type Explain = fn(crate::Error, &Path) -> crate::Error;

/// [`Checkpoint::open`], saying what a file of another format is by `explain`.
pub(crate) fn open_checkpoint(path: &Path, rules: Rules, explain: Explain) -> Result<Checkpoint> {
    let (index, files) = open_local(path, rules, explain, &Limits::default())?;
    let files = files.into_iter();
    Ok(Checkpoint {
        index,
        files: files.map(|(p, h)| (Location::File(p), h)).collect(),
    })
}

/// A checkpoint's files by their paths, each with its header.
type LocalFiles = Vec<(PathBuf, Header)>;

/// [`open_checkpoint`], each file by its path.
fn open_local(
    path: &Path,
    rules: Rules,
    explain: Explain,
    limits: &Limits,
) -> Result<(Option<ShardIndex>, LocalFiles)> {
    if !is_index_path(path) {
        let header = read_header_explained(path, rules, explain)?;
        return Ok((None, vec![(path.to_path_buf(), header)]));
    }
    let index = ShardIndex::from_json_file_within(path, limits)?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut files = Vec::new();
    for name in index
        .shard_names()
        .map_err(|e| e.with_input(path.display()))?
    {
        let shard = dir.join(name);
        // Its type first, without blocking: reading the header opens it again.
        drop(open_regular(&shard)?);
        let header = read_header_explained(&shard, rules, explain)?;
        files.push((shard, header));
    }
    let named: Vec<_> = files.iter().map(|(p, h)| (file_name(p), h)).collect();
    check_against_shards(&index, &named).map_err(|e| e.with_input(path.display()))?;
    Ok((Some(index), files))
}

/// The safetensors row of the format table: a file whose first 8 bytes
/// are a header length within the limit followed by `{`, or a sharded
/// checkpoint by its `*.safetensors.index.json`.
pub(crate) const ROW: FormatRow = FormatRow {
    magic: Some(looks_like_safetensors),
    path: Some(ByPath {
        recognise: is_index_path,
        open: |p| {
            let mut src = SafetensorsSource::open_explained(p.path, p.explain, &p.options.limits)?;
            src.origin = p.origin;
            Ok(Box::new(src))
        },
    }),
    ..FormatRow::new(
        "safetensors",
        "a safetensors file",
        open_file,
        Stream::Read(open_stream),
    )
};

fn looks_like_safetensors(first: &[u8]) -> bool {
    let Some(prefix) = first.get(..8) else {
        return false;
    };
    let n = u64::from_le_bytes(prefix.try_into().expect("8 bytes"));
    // The first 16 bytes decide, as they always have.
    let json = &first[8..first.len().min(16)];
    let brace = json.iter().find(|b| !b.is_ascii_whitespace());
    (2..=crate::header::MAX_HEADER_LEN).contains(&n) && brace == Some(&b'{')
}

fn open_file(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    let mut prefix = [0u8; 8];
    {
        use std::os::unix::fs::FileExt;
        // A short file is refused by the header's own reading.
        if o.file.read_exact_at(&mut prefix, 0).is_ok() {
            within_header_limit(u64::from_le_bytes(prefix), &o.options.limits)
                .map_err(|e| e.with_input(o.input))?;
        }
    }
    let mut src = SafetensorsSource::from_file(o.file, o.len, o.input)?;
    src.origin = o.origin;
    Ok(Box::new(src))
}

/// Refuses a header of `n` bytes past the caller's `header-bytes` limit
/// (below the format's own, which [`check_prefix`] words as the format's
/// rule).
fn within_header_limit(n: u64, limits: &crate::limits::Limits) -> Result<()> {
    use crate::limits::Limit;
    let limit = limits.get(Limit::HeaderBytes);
    if n > limit && n <= crate::header::MAX_HEADER_LEN {
        let what = format!("header length {n}");
        return Err(limits.refuse(Limit::HeaderBytes, what).at_offset(0));
    }
    Ok(())
}

/// A safetensors stream: spooled, its header first; for a listing only
/// (inspect), read up to the end of its header and no further.
fn open_stream(o: StreamInput<'_>) -> BoxFuture<'_, Result<Box<dyn Source>>> {
    async move {
        let on_input = |e: crate::Error| e.with_input(o.input);
        if o.options.listing_only {
            let (_, json, _) = stream_header(o.reader).await.map_err(on_input)?;
            within_header_limit(json.len() as u64, &o.options.limits).map_err(on_input)?;
            let header = parse_header_json(&json, Rules::SOURCE).map_err(on_input)?;
            // No data is read: an empty file stands for it.
            let mut src = SafetensorsSource::from_data(tempfile::tempfile()?, header, o.input);
            src.origin = o.origin;
            return Ok(Box::new(src) as Box<dyn Source>);
        }
        (o.notice)(&spooling(o.input, "not seekable"));
        let mut src = spool_safetensors(o.reader, o.input)
            .await
            .map_err(on_input)?;
        src.origin = o.origin;
        Ok(Box::new(src) as Box<dyn Source>)
    }
    .boxed()
}

/// A safetensors file, or a sharded checkpoint opened by its index, as one source.
///
/// Validated on open with the reference reader's rules, except that a key
/// given twice is refused: which of the two would we copy?
#[derive(Debug)]
pub struct SafetensorsSource {
    /// The location it was opened from, reported first by `opened`.
    origin: Option<crate::location::Opened>,
    /// Shards' metadata merged in shard order (usually they are all equal).
    listing: Listing,
    files: Vec<Arc<File>>,
    /// Each file as it was when opened.
    opened: Vec<super::Stamp>,
    /// The shards an index named, as opened (none for one file).
    shards: Vec<Opened>,
    /// Where each tensor's bytes start in its file. A tensor ends where the
    /// next one of its file starts (a header's tensors tile its data, checked
    /// on open) and the file is found from `parts`: a million tensors carry
    /// 8 bytes each, not a file index and a length too.
    offsets: Vec<u64>,
    /// Per file, in order: its first tensor and the end of its data.
    parts: Vec<FileShare>,
}

/// One file's share of the listing (tensors are listed file by file).
#[derive(Debug)]
struct FileShare {
    /// Index of the file's first tensor.
    first: usize,
    /// Absolute offset of the end of the file's data: its length.
    data_end: u64,
}

impl SafetensorsSource {
    /// [`SafetensorsSource::open`], saying what a file of another format is by `explain`.
    pub(crate) fn open_explained(path: &Path, explain: Explain, limits: &Limits) -> Result<Self> {
        let (index, files) = open_local(path, Rules::SOURCE, explain, limits)?;
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
            origin: None,
            listing: Listing {
                input,
                tensors: Vec::with_capacity(count),
                metadata: None,
            },
            files: Vec::with_capacity(parts.len()),
            opened: Vec::with_capacity(parts.len()),
            shards: Vec::new(),
            offsets: Vec::with_capacity(count),
            parts: Vec::with_capacity(parts.len()),
        };
        for (file, header) in parts {
            let (start, file_len) = (header.data_start(), header.file_len());
            src.opened.push(super::Stamp::of(&file, file_len));
            if let Some(md) = header.metadata {
                let metadata = src.listing.metadata.get_or_insert_with(Metadata::new);
                metadata.extend(md);
            }
            src.parts.push(FileShare {
                first: src.listing.tensors.len(),
                data_end: file_len,
            });
            for t in header.tensors {
                src.offsets.push(start + t.begin);
                src.listing.tensors.push(t.meta);
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
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn identity(&self) -> Option<String> {
        super::identities(&self.opened)
    }

    fn opened(&self) -> Vec<Opened> {
        self.origin.iter().chain(&self.shards).cloned().collect()
    }

    fn check_unchanged(&self) -> Result<()> {
        super::all_unchanged(&self.files, &self.opened, &self.listing.input)
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

/// Spools a safetensors stream: its header first, which plans the file's
/// length; then at most that many bytes (plus one, to see there are more).
async fn spool_safetensors(reader: TensorReader<'_>, input: &str) -> Result<SafetensorsSource> {
    let (prefix, json, reader) = stream_header(reader).await?;
    let header = parse_header_json(&json, Rules::SOURCE)?;
    let planned = header.file_len();
    let whole = std::io::Cursor::new(&prefix[..])
        .chain(std::io::Cursor::new(&json[..]))
        .chain(reader);
    let (data, len) = spool(Box::pin(whole), Some(planned)).await?;
    check_file_len(&header, len)?;
    drop(json);
    Ok(SafetensorsSource::from_data(data, header, input))
}

/// Reads a safetensors stream's length prefix and header JSON, no further.
async fn stream_header(
    mut reader: TensorReader<'_>,
) -> Result<([u8; 8], Vec<u8>, TensorReader<'_>)> {
    let eof_at = |at: u64| {
        move |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::new(HeaderError::FileTooShort { len: at })
            } else {
                Error::io(e)
            }
        }
    };
    let mut prefix = [0u8; 8];
    reader.read_exact(&mut prefix).await.map_err(eof_at(0))?;
    // The limit is checked before anything is allocated on the claim.
    let n = check_prefix(prefix, u64::MAX)?;
    let mut json = Vec::new();
    (&mut reader).take(n).read_to_end(&mut json).await?;
    if (json.len() as u64) < n {
        let available = json.len() as u64;
        return Err(Error::new(HeaderError::HeaderPastEnd { len: n, available }).at_offset(0));
    }
    Ok((prefix, json, reader))
}
