//! Opening an input from its [`Location`]: the one place a location's kind
//! is dispatched on. A file (or the checkpoint a folder stands for) goes to
//! the file opening, standard input and an object streamed whole to the
//! stream opening ([`super::input`]), a safetensors object to its ranged
//! source ([`super::object`]). What comes back reports every file or
//! object it read ([`Source::opened`]): the location opened, and what the
//! source read beyond it (an index's shards).

use std::path::Path;

use futures::future::BoxFuture;

use super::input::{self, Notice};
use super::{FileSpan, OpenBlocking, Source, SourceOptions, TensorData};
use crate::error::Result;
use crate::header::{Metadata, TensorMeta};
use crate::location::{Location, Opened};

/// Opens `path` (`-` for standard input, an object URL, a folder for the
/// checkpoint in it) as a source of tensors: [`open_location`] of what it
/// names ([`Location::parse`]).
pub async fn open_input(
    path: &Path,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    open_location(&Location::parse(path)?, options, notice).await
}

/// Opens `location` as a source of tensors, reading headers only.
pub async fn open_location(
    location: &Location,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    match location {
        Location::Stdio => {
            let source = input::open_stdin(options, notice).await?;
            Ok(located(source, Opened::stdin()))
        }
        Location::File(path) => open_file(path, options, notice).await,
        Location::Folder(path) => {
            let file = crate::folder::resolve_input(path)?;
            notice(&format!("{}: reading {}", path.display(), file.display()));
            open_file(&file, options, notice).await
        }
        #[cfg(feature = "object-store")]
        Location::Object(url) => {
            use super::object::{open_object, ObjectInput};
            match open_object(url, options).await? {
                ObjectInput::Ranged(source) => Ok(source),
                ObjectInput::Whole {
                    reader,
                    stem,
                    size,
                    etag,
                } => {
                    let input = url.as_str();
                    let source = input::open_reader(reader, input, stem, options, notice).await?;
                    Ok(located(source, Opened::object(url, size, etag)))
                }
            }
        }
    }
}

/// A local file, of any format (an index too).
async fn open_file(
    path: &Path,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let source = input::open_file(path, options, notice).await?;
    Ok(located(source, Opened::file(path)))
}

fn located(inner: Box<dyn Source>, origin: Opened) -> Box<dyn Source> {
    Box::new(Located { inner, origin })
}

/// A source opened from a location, which it reports with what the source
/// itself read; everything else is the source's own.
struct Located {
    inner: Box<dyn Source>,
    origin: Opened,
}

impl Source for Located {
    fn input_name(&self) -> &str {
        self.inner.input_name()
    }

    fn tensors(&self) -> &[TensorMeta] {
        self.inner.tensors()
    }

    fn metadata(&self) -> Option<&Metadata> {
        self.inner.metadata()
    }

    fn tied_groups(&self) -> Vec<Vec<usize>> {
        self.inner.tied_groups()
    }

    fn access(&self) -> super::Access {
        self.inner.access()
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        self.inner.open(k)
    }

    fn check_unchanged(&self) -> Result<()> {
        self.inner.check_unchanged()
    }

    fn open_ahead(&self, k: usize) -> Option<Result<TensorData<'static>>> {
        self.inner.open_ahead(k)
    }

    fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
        self.inner.open_blocking(k)
    }

    fn identity(&self) -> Option<String> {
        self.inner.identity()
    }

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        self.inner.file_span(k)
    }

    fn opened(&self) -> Vec<Opened> {
        let mut all = vec![self.origin.clone()];
        all.extend(self.inner.opened());
        all
    }
}
