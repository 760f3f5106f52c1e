//! Opening an input from its [`Location`]: the one place a location's kind
//! is dispatched on. A file (or the checkpoint a folder stands for) goes to
//! the file opening, standard input and an object streamed whole to the
//! stream opening ([`super::input`]), a safetensors object to its ranged
//! source ([`super::object`]). What comes back reports every file or
//! object it read ([`Source::opened`]): the location opened, and what the
//! source read beyond it (an index's shards).

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use super::input::{self, Notice};
use super::table::{FORMATS, WRAPS};
use super::{FileSpan, OpenBlocking, Source, SourceOptions, TensorData};
use crate::error::{Error, ErrorKind, Result};
use crate::header::{Metadata, TensorMeta};
use crate::location::{Location, Opened};
use crate::Note;

/// Opens `path` (`-` for standard input, an object URL, a folder for the
/// checkpoint in it) as a source of tensors, as a conversion opens it:
/// quantized weights are read as the options ask.
pub async fn open_input(
    path: &Path,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    let mut opened = open_inputs(&[path.to_path_buf()], options, notice).await?;
    let one = opened.pop().filter(|_| opened.is_empty());
    one.ok_or_else(|| Error::new(ErrorKind::Usage("one input opened as several".into())))
}

/// Opens every input at `paths` (files of any supported kind, folders for
/// the checkpoint in them, object URLs, or `-`), each parsed once into the
/// [`Location`] it names: [`open_locations`].
pub async fn open_inputs(
    paths: &[PathBuf],
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Vec<Box<dyn Source>>> {
    open_locations(&Location::parse_all(paths)?, options, notice).await
}

/// Opens every input at `locations`, reading headers only; then applies
/// the table's wraps to them all (quantized weights, whose scales may lie
/// in any input). Each source reports the files and objects it read
/// ([`Source::opened`]).
pub async fn open_locations(
    locations: &[Location],
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Vec<Box<dyn Source>>> {
    let mut sources = Vec::with_capacity(locations.len());
    for location in locations {
        sources.push(open_location(location, options, notice).await?);
    }
    WRAPS
        .iter()
        .try_fold(sources, |sources, wrap| wrap(sources, options, notice))
}

/// Opens `location` as a source of tensors, reading headers only (and
/// no wrap: [`open_locations`] applies them).
pub async fn open_location(
    location: &Location,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    match location {
        Location::Stdio => {
            let source = input::open_path(FORMATS, Path::new("-"), options, notice).await?;
            Ok(located(source, Opened::stdin()))
        }
        Location::File(path) => open_file(path, options, notice).await,
        Location::Folder(path) => {
            // A folder a format reads as a whole (a distributed
            // checkpoint) is its own input; else the one checkpoint in it.
            // It reports the files it read; the folder has no version.
            let folder = super::resolve_folder(path)?;
            let file = &folder.path;
            if file == path {
                return input::open_path(FORMATS, path, options, notice).await;
            }
            match crate::folder::passed_over_notice(path, &folder) {
                Some(said) => notice(&Note::Info(said)),
                None => {
                    let (dir, file_shown) = (path.display(), file.display());
                    notice(&Note::Info(format!("{dir}: reading {file_shown}")));
                }
            }
            open_file(file, options, notice).await
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
                    let source = input::open_reader(reader, url, stem, options, notice).await?;
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
    let source = input::open_path(FORMATS, path, options, notice).await?;
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

    fn tied_views(&self) -> Vec<Vec<usize>> {
        self.inner.tied_views()
    }

    fn stored_as(&self, k: usize) -> Option<&str> {
        self.inner.stored_as(k)
    }

    fn pieces(&self, k: usize) -> Vec<super::StoredPiece> {
        self.inner.pieces(k)
    }

    fn names_mapped(&self) -> bool {
        self.inner.names_mapped()
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

    fn open_blocking_parts(&self, k: usize, target: u64) -> Option<Vec<super::BlockingPart>> {
        self.inner.open_blocking_parts(k, target)
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
