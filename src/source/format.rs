//! A format's descriptor: one row of the format table ([`super::table`]).
//!
//! A row says how its format is recognised (by its first bytes, by its
//! path, or only when an option asks for it) and how it is opened from a
//! regular file and from a forward-only stream. Each format's module
//! defines its row next to its source; the table lists the rows; opening
//! an input ([`super::input`]) reads only the table.
//!
//! Layer: source, below every format (each imports its row's types from
//! here) and above the spool.

use std::fs::File;
use std::path::Path;

use futures::future::BoxFuture;

use super::spool::spool;
use super::{Source, SourceOptions, TensorReader};
use crate::location::Opened;
use crate::{Error, Result};

use crate::error::note::Note;
/// How a run tells the user things that are not errors ("spooling ...").
pub(crate) use crate::error::note::Notice;

/// One input format: how it is recognised and opened. Rows are made in
/// the crate; [`crate::source::Format`] carries one as an input's format.
pub struct FormatRow {
    /// Its short name, unique in the table (`npy`, `safetensors`).
    pub(crate) name: &'static str,
    /// What an input of it is, for messages ("an .npy array").
    pub(crate) describe: &'static str,
    /// Whether an input's first bytes are this format's (up to
    /// [`super::detect::FILE_SNIFF_LEN`] bytes from a file,
    /// [`super::detect::SNIFF_LEN`] from a stream). `None`: never by content.
    pub(crate) magic: Option<fn(&[u8]) -> bool>,
    /// Inputs recognised by their path alone, before anything is read
    /// (an index JSON, a folder), and how they are opened.
    pub(crate) path: Option<ByPath>,
    /// Whether the options ask for every input to be read as this format
    /// (a raw dump, which may begin with anything).
    pub(crate) asked: Option<fn(&SourceOptions) -> bool>,
    /// When a compressed input of this format is unwrapped.
    pub(crate) unwrap: Unwrap,
    /// Opens a regular file of the format (or a stream spooled to one).
    pub(crate) file: fn(FileInput<'_>) -> Result<Box<dyn Source>>,
    /// How a forward-only input of the format is opened.
    pub(crate) stream: Stream,
}

impl FormatRow {
    /// A row with only what every format has: how it is named and opened.
    /// Rows set how they are recognised on top of it (`..FormatRow::new(..)`).
    pub(crate) const fn new(
        name: &'static str,
        describe: &'static str,
        file: fn(FileInput<'_>) -> Result<Box<dyn Source>>,
        stream: Stream,
    ) -> FormatRow {
        FormatRow {
            name,
            describe,
            magic: None,
            path: None,
            asked: None,
            unwrap: Unwrap::ByMagic,
            file,
            stream,
        }
    }

    /// Its short name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What an input of it is, for messages ("an .npy array").
    pub fn describe(&self) -> &'static str {
        self.describe
    }

    /// Whether inputs of it are refused (recognised only to say so).
    pub(crate) fn refused(&self) -> bool {
        matches!(self.stream, Stream::Refused(_))
    }
}

impl std::fmt::Debug for FormatRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Rows are told apart by name (two uses of one `const` row may be two
/// copies of it in memory).
impl PartialEq for FormatRow {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for FormatRow {}

/// Inputs a format recognises by their path, and how it opens them.
pub(crate) struct ByPath {
    /// Whether `path` is one.
    pub(crate) recognise: fn(&Path) -> bool,
    /// Opens it.
    pub(crate) open: fn(PathInput<'_>) -> Result<Box<dyn Source>>,
}

/// An input recognised by its path, being opened.
pub(crate) struct PathInput<'a> {
    pub(crate) path: &'a Path,
    pub(crate) options: &'a SourceOptions,
    pub(crate) notice: Notice<'a>,
    /// Says what a file it names is when it is not of the format ("an
    /// .npz, not a safetensors file"), from the whole table's detection,
    /// which a row cannot import (the table imports it).
    pub(crate) explain: fn(Error, &Path) -> Error,
    /// The location it was opened from, for the source to report first in
    /// [`Source::opened`] (`None` for a folder a format reads as a whole:
    /// it reports the files it read).
    pub(crate) origin: Option<Opened>,
}

/// When a compressed input is unwrapped before its format opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unwrap {
    /// Whenever it begins with a codec's magic.
    ByMagic,
    /// Only when its name ends in the codec's extension too (a raw dump
    /// may begin with a codec's magic by chance).
    ByName,
}

/// A step applied to every set of opened inputs, for a format stored
/// inside another's tensors (quantized weights in safetensors, whose
/// scales may lie in any input): given the sources, it gives back one
/// source per input, each reading its tensors as that format says.
pub(crate) type Wrap =
    fn(Vec<Box<dyn Source>>, &SourceOptions, Notice<'_>) -> Result<Vec<Box<dyn Source>>>;

/// A format's way of opening a forward-only input as it comes.
pub(crate) type OpenStream = for<'a> fn(StreamInput<'a>) -> BoxFuture<'a, Result<Box<dyn Source>>>;

/// How a format opens a forward-only input (standard input, a pipe, an
/// object streamed whole, a decompressed stream).
pub(crate) enum Stream {
    /// As it comes, by the format's own function.
    Read(OpenStream),
    /// Spooled whole to a temporary file, then opened as a file: the
    /// format plans nothing before its end. Says why in the notice
    /// ("a GGUF file needs random access").
    Spool(&'static str),
    /// Refused, with this error, whatever the input is.
    Refused(fn() -> Error),
}

/// A regular file being opened as a format (or a stream spooled to one).
pub(crate) struct FileInput<'a> {
    /// The file, at any position (sources read it positionally).
    pub(crate) file: File,
    pub(crate) len: u64,
    /// Its path, when it has one of its own (not a spooled stream).
    pub(crate) path: Option<&'a Path>,
    /// How the input is named in messages.
    pub(crate) input: &'a str,
    /// The tensor name a single-array input takes: `--name`, else the
    /// file's name less its extensions; `None` when there is neither.
    pub(crate) name: Option<String>,
    pub(crate) options: &'a SourceOptions,
    pub(crate) notice: Notice<'a>,
    /// The location it was opened from (standard input for a spooled
    /// stream), for the source to report first in [`Source::opened`].
    pub(crate) origin: Option<Opened>,
}

/// A forward-only input being opened as a format: its fields as
/// [`FileInput`]'s, but its bytes are a reader from the first, and its
/// path (or URL) is `None` for standard input.
pub(crate) struct StreamInput<'a> {
    pub(crate) reader: TensorReader<'static>,
    pub(crate) path: Option<&'a Path>,
    pub(crate) input: &'a str,
    pub(crate) name: Option<String>,
    pub(crate) options: &'a SourceOptions,
    pub(crate) notice: Notice<'a>,
    pub(crate) origin: Option<Opened>,
}

impl<'a> FileInput<'a> {
    /// The same input read forward from its start (a pipe or FIFO, where
    /// positional reads fail; a compressed file, to unwrap).
    pub(crate) fn read_forward(self) -> StreamInput<'a> {
        StreamInput {
            reader: Box::pin(tokio::fs::File::from_std(self.file)),
            path: self.path,
            input: self.input,
            name: self.name,
            options: self.options,
            notice: self.notice,
            origin: self.origin,
        }
    }
}

impl<'a> StreamInput<'a> {
    /// Says why the stream is spooled, then spools it, reading at most
    /// `planned` bytes (plus one, to see there are more) when known: the
    /// same input as a file, with no path of its own.
    pub(crate) async fn spooled(self, why: &str, planned: Option<u64>) -> Result<FileInput<'a>> {
        (self.notice)(&spooling(self.input, why));
        let (file, len) = spool(self.reader, planned)
            .await
            .map_err(|e| e.with_input(self.input))?;
        Ok(FileInput {
            file,
            len,
            path: None,
            input: self.input,
            name: self.name,
            options: self.options,
            notice: self.notice,
            origin: self.origin,
        })
    }
}

/// The notice of a stream being spooled.
pub(crate) fn spooling(input: &str, why: &str) -> Note {
    Note::Info(format!("{input}: {why}; spooling it to a temporary file"))
}
