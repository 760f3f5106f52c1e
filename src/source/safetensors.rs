//! Existing safetensors files, alone or as a sharded checkpoint.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::{Source, TensorReader};
use crate::header::{Metadata, Rules, TensorMeta};
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
    paths: Vec<PathBuf>,
    tensors: Vec<TensorMeta>,
    locations: Vec<Location>,
    metadata: Option<Metadata>,
}

impl SafetensorsSource {
    /// Opens `path` (a `.safetensors` file or a `.safetensors.index.json`), reading headers only.
    pub fn open(path: &Path) -> Result<Self> {
        let cp = Checkpoint::open(path, Rules::SOURCE)?;
        let mut src = SafetensorsSource {
            input: path.display().to_string(),
            paths: Vec::with_capacity(cp.files.len()),
            tensors: Vec::with_capacity(cp.tensor_count()),
            locations: Vec::with_capacity(cp.tensor_count()),
            metadata: None,
        };
        for (file, (shard_path, header)) in cp.files.into_iter().enumerate() {
            let start = header.data_start();
            // Shards' metadata merge in shard order; usually they are all equal.
            if let Some(md) = header.metadata {
                src.metadata.get_or_insert_with(Metadata::new).extend(md);
            }
            for t in header.tensors {
                src.locations.push(Location {
                    file,
                    offset: start + t.begin,
                    len: t.len(),
                });
                src.tensors.push(t.meta);
            }
            src.paths.push(shard_path);
        }
        Ok(src)
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

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorReader<'_>>> {
        let loc = self.locations[k].clone();
        let path = &self.paths[loc.file];
        async move {
            let on_path = |e: std::io::Error| Error::io(e).with_input(path.display());
            let mut f = tokio::fs::File::open(path).await.map_err(on_path)?;
            f.seek(SeekFrom::Start(loc.offset)).await.map_err(on_path)?;
            Ok(Box::pin(f.take(loc.len)) as TensorReader<'_>)
        }
        .boxed()
    }
}
