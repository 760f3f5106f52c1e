//! Opening an input from its [`Location`]: the one place a location's kind
//! is dispatched on. A file (or the checkpoint a folder stands for) goes to
//! the file opening, standard input and an object streamed whole to the
//! stream opening ([`super::input`]), a safetensors object to its ranged
//! source ([`super::object`]). What comes back reports every file or
//! object it read ([`Source::opened`]): the location opened, which travels
//! into the source with its input ([`super::format::FileInput::origin`]),
//! and what the source read beyond it (an index's shards).

use std::path::{Path, PathBuf};

use super::input::{self, Notice};
use super::table::{FORMATS, WRAPS};
use super::{Source, SourceOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limit;
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
    let source = open_location_unchecked(location, options, notice).await?;
    // Every format's listing, counted in one place (formats that know
    // their count early refuse it before listing).
    let listed = source.tensors().len() as u64;
    if listed > options.limits.get(Limit::TensorCount) {
        let what = format!("it lists {listed} tensors");
        return Err(options
            .limits
            .refuse(Limit::TensorCount, what)
            .with_input(location));
    }
    Ok(source)
}

async fn open_location_unchecked(
    location: &Location,
    options: &SourceOptions,
    notice: Notice<'_>,
) -> Result<Box<dyn Source>> {
    match location {
        Location::Stdio => {
            let stdin = Some(Opened::stdin());
            input::open_path(FORMATS, Path::new("-"), stdin, options, notice).await
        }
        Location::File(path) => open_file(path, options, notice).await,
        Location::Folder(path) => {
            // A folder a format reads as a whole (a distributed
            // checkpoint) is its own input; else the one checkpoint in it.
            // It reports the files it read; the folder has no version.
            let folder = super::resolve_folder(path)?;
            let file = &folder.path;
            if file == path {
                return input::open_path(FORMATS, path, None, options, notice).await;
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
                    let origin = Opened::object(url, size, etag);
                    input::open_reader(reader, url, stem, origin, options, notice).await
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
    let origin = Some(Opened::file(path));
    input::open_path(FORMATS, path, origin, options, notice).await
}
