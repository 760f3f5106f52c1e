//! Existing safetensors files, alone or as a sharded checkpoint.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::npz::zip::PositionalReader;
use super::{file_range, FileSpan, Source, TensorData};
use crate::header::read::read_header;
use crate::header::{Header, Metadata, Rules, TensorMeta};
use crate::index::Checkpoint;
use crate::{Error, Result};

/// Where one tensor's bytes lie: which file, at what absolute offset.
#[derive(Debug, Clone)]
struct Location {
    file: usize,
    offset: u64,
    len: u64,
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
    tensors: Vec<TensorMeta>,
    locations: Vec<Location>,
    metadata: Option<Metadata>,
}

impl SafetensorsSource {
    /// Opens `path` (a `.safetensors` file or a `.safetensors.index.json`), reading headers only.
    pub fn open(path: &Path) -> Result<Self> {
        let cp = Checkpoint::open(path, Rules::SOURCE)?;
        let mut parts = Vec::with_capacity(cp.files.len());
        for (shard, header) in cp.files {
            let file = File::open(&shard).map_err(|e| Error::io(e).with_input(shard.display()))?;
            parts.push((file, header));
        }
        Ok(Self::from_parts(path.display().to_string(), parts))
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
            tensors: Vec::with_capacity(count),
            locations: Vec::with_capacity(count),
            metadata: None,
        };
        for (index, (file, header)) in parts.into_iter().enumerate() {
            let start = header.data_start();
            src.opened.push(super::Stamp::of(&file, header.file_len()));
            // Shards' metadata merge in shard order; usually they are all equal.
            if let Some(md) = header.metadata {
                src.metadata.get_or_insert_with(Metadata::new).extend(md);
            }
            for t in header.tensors {
                src.locations.push(Location {
                    file: index,
                    offset: start + t.begin,
                    len: t.len(),
                });
                src.tensors.push(t.meta);
            }
            src.files.push(Arc::new(file));
        }
        src
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

    fn check_unchanged(&self) -> Result<()> {
        for (f, opened) in self.files.iter().zip(&self.opened) {
            super::unchanged(f, opened, &self.input)?;
        }
        Ok(())
    }

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        let loc = &self.locations[k];
        Some(FileSpan {
            file: self.files[loc.file].clone(),
            offset: loc.offset,
            len: loc.len,
            transform: crate::transform::Transform::Identity,
            crc: None,
        })
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        let loc = self.locations[k].clone();
        let file = &self.files[loc.file];
        async move {
            Ok(TensorData::new(
                file_range(file, loc.offset, loc.len).await?,
            ))
        }
        .boxed()
    }
}
