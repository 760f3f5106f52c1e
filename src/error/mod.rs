//! One error type for the whole crate: a kind naming the rule broken, plus
//! where it happened (input, tensor, byte offset).
//!
//! Layer: error, below everything but `dtype`. A format, layer or service
//! whose errors a caller may tell apart owns an enum here (safetensors
//! headers, sharded checkpoints' indexes, GGUF, quantized weights, zip,
//! JSON, pickle and PyTorch checkpoints, object store), nested in
//! [`ErrorKind`] under one variant, and keeps the error beneath it
//! (serde's, the inflater's, the store's) as its source. Kind names stay
//! stable: the header's and the index's variants keep the names they had
//! as variants of [`ErrorKind`]. May import `dtype` and
//! those foreign error types only.

pub(crate) mod dcp;
pub mod gguf;
pub mod hdf5;
pub(crate) mod header;
pub(crate) mod index;
pub(crate) mod json;
pub(crate) mod limit;
pub mod msgpack;
pub(crate) mod note;
pub mod onnx;
pub(crate) mod pickle;
pub(crate) mod quantized;
pub(crate) mod store;
pub(crate) mod text;
pub(crate) mod zip;

pub use dcp::DcpError;
pub use header::HeaderError;
pub use index::IndexError;
pub use json::JsonError;
pub use limit::LimitExceeded;
pub use note::{Note, NoticeFn, Warning};
pub use pickle::{PickleError, PyTorchError, StorageShape};
pub use store::StoreError;
pub use text::TextError;
pub use zip::{ZipError, ZipFeature};

use std::fmt;
use std::io;

use crate::Dtype;

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error with its context: which input, which tensor, which byte.
///
/// Boxed so that `Result<T, Error>` stays one pointer wide on the hot path.
/// `Display` gives the one-line message the binary prints:
///
/// ```
/// use safetensors_stream::{Error, ErrorKind, HeaderError};
///
/// let e = Error::new(HeaderError::HeaderTooLarge { len: 1 << 40, limit: 100_000_000 })
///     .with_input("model.safetensors")
///     .at_offset(0);
/// assert_eq!(
///     e.to_string(),
///     "model.safetensors: header length 1099511627776 exceeds the limit of 100000000 bytes (at byte 0)"
/// );
/// assert!(matches!(e.kind(), ErrorKind::Header(HeaderError::HeaderTooLarge { .. })));
/// ```
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    file: Option<(Side, String)>,
    tensor: Option<String>,
    offset: Option<u64>,
}

/// Which side of a conversion the file named in an error is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Input,
    Output,
}

/// What broad class an error is in; the binary maps these to exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// The input is not what it claims to be (exit code 1).
    BadInput,
    /// The request itself is wrong: a bad flag value, conflicting names (exit code 2).
    Usage,
    /// The environment failed: I/O, permissions, disk full (exit code 3).
    Io,
}

/// The one error for a tensor of `expected` bytes that had only `actual`.
pub(crate) fn too_short(expected: u64, actual: u64) -> Error {
    Error::new(ErrorKind::TensorTooShort { expected, actual })
}

/// The one error for bytes whose CRC-32 is not the archive's.
pub(crate) fn crc_mismatch(actual: u32, expected: u32) -> Error {
    Error::new(ErrorKind::Zip(ZipError::CrcMismatch { actual, expected }))
}

impl Error {
    /// An error of `kind` (an [`ErrorKind`], or a [`HeaderError`] or
    /// [`IndexError`] it nests), with no context yet.
    pub fn new(kind: impl Into<ErrorKind>) -> Self {
        Error {
            inner: Box::new(Inner {
                kind: kind.into(),
                file: None,
                tensor: None,
                offset: None,
            }),
        }
    }

    /// An I/O error. One that carries an [`Error`] (see [`Error::into_io`])
    /// gives that error back, so a bad-input error raised inside a reader
    /// keeps its kind and context through `std::io` layers.
    pub fn io(err: io::Error) -> Self {
        if err.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            let inner = err.into_inner().expect("checked above");
            return *inner.downcast::<Error>().expect("checked above");
        }
        Error::new(ErrorKind::Io(err))
    }

    /// Wraps the error in an `io::Error`, for readers that must return one;
    /// [`Error::io`] unwraps it again.
    pub fn into_io(self) -> io::Error {
        let kind = match self.inner.kind {
            ErrorKind::Io(ref e) => e.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, self)
    }

    /// The rule broken.
    pub fn kind(&self) -> &ErrorKind {
        &self.inner.kind
    }

    /// Consumes the error, returning its kind.
    pub fn into_kind(self) -> ErrorKind {
        self.inner.kind
    }

    /// The input (file name, `-` for standard input) the error is about,
    /// if it is about an input. An output refused for being an input is
    /// about both: its input is the one it would replace.
    ///
    /// ```
    /// use safetensors_stream::{Error, ErrorKind};
    ///
    /// let e = Error::new(ErrorKind::OutputIsInput("m.npz".into())).with_output("link.npz");
    /// assert_eq!((e.input(), e.output()), (Some("m.npz"), Some("link.npz")));
    /// ```
    pub fn input(&self) -> Option<&str> {
        match &self.inner.kind {
            ErrorKind::OutputIsInput(input) => Some(input),
            _ => self.file_on(Side::Input),
        }
    }

    /// The output (file name, `-` for standard output) the error is about,
    /// if it is about an output: a full disk, a name that cannot be used.
    ///
    /// ```
    /// use safetensors_stream::{Error, ErrorKind};
    ///
    /// let e = Error::new(ErrorKind::TerminalOutput).with_output("-");
    /// assert_eq!((e.input(), e.output(), e.path()), (None, Some("-"), Some("-")));
    /// ```
    pub fn output(&self) -> Option<&str> {
        self.file_on(Side::Output)
    }

    /// The file the error is about, input or output.
    pub fn path(&self) -> Option<&str> {
        self.inner.file.as_ref().map(|(_, f)| f.as_str())
    }

    fn file_on(&self, side: Side) -> Option<&str> {
        match &self.inner.file {
            Some((s, f)) if *s == side => Some(f),
            _ => None,
        }
    }

    /// The tensor the error is about.
    pub fn tensor(&self) -> Option<&str> {
        self.inner.tensor.as_deref()
    }

    /// The byte offset in the input where the problem is.
    pub fn offset(&self) -> Option<u64> {
        self.inner.offset
    }

    /// Names the input, unless an inner layer already named a file.
    pub fn with_input(self, input: impl fmt::Display) -> Self {
        self.with_file(Side::Input, input)
    }

    /// Names the output, unless an inner layer already named a file.
    pub fn with_output(self, output: impl fmt::Display) -> Self {
        self.with_file(Side::Output, output)
    }

    fn with_file(mut self, side: Side, file: impl fmt::Display) -> Self {
        if self.inner.file.is_none() {
            self.inner.file = Some((side, file.to_string()));
        }
        self
    }

    /// Names the tensor, unless an inner layer already did.
    pub fn with_tensor(mut self, tensor: impl Into<String>) -> Self {
        if self.inner.tensor.is_none() {
            self.inner.tensor = Some(tensor.into());
        }
        self
    }

    /// Names the tensor, replacing any name an inner layer gave (an outer
    /// layer may know the name better: the input's, not the output's).
    pub fn set_tensor(mut self, tensor: impl Into<String>) -> Self {
        self.inner.tensor = Some(tensor.into());
        self
    }

    /// Sets the byte offset, unless an inner layer already did.
    pub fn at_offset(mut self, offset: u64) -> Self {
        if self.inner.offset.is_none() {
            self.inner.offset = Some(offset);
        }
        self
    }

    /// The error's broad class.
    pub fn category(&self) -> Category {
        self.inner.kind.category()
    }

    /// The message without the input prefix.
    pub fn message(&self) -> String {
        let mut msg = self.inner.kind.to_string();
        let mut parts = Vec::new();
        if let Some(o) = self.inner.offset {
            parts.push(format!("at byte {o}"));
        }
        if let Some(t) = &self.inner.tensor {
            parts.push(format!("tensor {t:?}"));
        }
        if !parts.is_empty() {
            msg.push_str(&format!(" ({})", parts.join(", ")));
        }
        msg
    }
}

/// The most characters one rendered error line holds; the rest is cut.
pub const MAX_MESSAGE_CHARS: usize = 2048;

/// True for characters a terminal must not receive raw from a file: C0/C1
/// controls (ESC sequences, BEL, CR, newlines that forge extra lines), line
/// and paragraph separators, and invisible format characters (zero-width,
/// bidirectional overrides that reorder what is shown, tag characters).
fn unsafe_to_print(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}'
            | '\u{17B5}' | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}'
            | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}')
}

/// `text` made safe to print as one line: every control or invisible
/// character written as `\u{..}`, and the line cut at
/// [`MAX_MESSAGE_CHARS`] characters, saying how many were cut. Errors
/// render through it; the JSON report keeps the raw names beside it.
///
/// ```
/// use safetensors_stream::printable_line;
///
/// assert_eq!(printable_line("a\u{1b}[2Jb\nc"), "a\\u{1b}[2Jb\\u{a}c");
/// assert_eq!(printable_line("rtl\u{202e}txt"), "rtl\\u{202e}txt");
/// assert!(printable_line(&"x".repeat(10_000)).len() < 2100);
/// ```
pub fn printable_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_MESSAGE_CHARS + 64));
    for (shown, (i, c)) in text.char_indices().enumerate() {
        if shown >= MAX_MESSAGE_CHARS {
            let rest = text[i..].chars().count();
            out.push_str(&format!("... ({rest} more characters cut)"));
            break;
        }
        if unsafe_to_print(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = String::new();
        if let Some(file) = self.path() {
            line.push_str(file);
            line.push_str(": ");
        }
        line.push_str(&self.message());
        f.write_str(&printable_line(&line))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.inner.kind)
            .field("input", &self.input())
            .field("output", &self.output())
            .field("tensor", &self.inner.tensor)
            .field("offset", &self.inner.offset)
            .finish()
    }
}

impl std::error::Error for Error {
    /// The kind's own source: the I/O error, or the enum a grouped kind
    /// nests ([`HeaderError`], [`IndexError`], [`ZipError`], ...), whose
    /// own source is the error beneath it (serde's, the store's).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.inner.kind)
    }
}

/// An [`ErrorKind`], or an enum it nests, as an [`Error`] with no context.
macro_rules! error_from {
    ($($kind:ty),*) => {$(
        impl From<$kind> for Error {
            fn from(kind: $kind) -> Self {
                Error::new(kind)
            }
        }
    )*};
}
error_from!(ErrorKind, HeaderError, IndexError);

impl From<io::Error> for Error {
    fn from(err: io::Error) -> Self {
        Error::io(err)
    }
}

/// A half-open byte range `[begin, end)` in a tensor buffer, displayed as such.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub u64, pub u64);

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{},{})", self.0, self.1)
    }
}

/// The rule that was broken. Each variant's `Display` is a short sentence.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum ErrorKind {
    /// The file's frame, its header's JSON and tensor layout, or a header
    /// being built breaks a rule: see [`HeaderError`].
    #[error("{0}")]
    Header(#[from] HeaderError),
    /// A file read whole (an index, a raw manifest) is over its size limit.
    #[error("{what} is over the limit of {limit} bytes")]
    FileTooLarge { what: &'static str, limit: u64 },

    // ---- streaming --------------------------------------------------------
    #[error("tensor data is {actual} bytes but its dtype and shape need {expected}")]
    TensorLength { expected: u64, actual: u64 },
    /// A source (or a Writer's caller) delivered fewer bytes for a tensor
    /// than planned. Said of "the data": an input's, or the caller's own.
    #[error("the data ended after {actual} of the tensor's {expected} bytes")]
    TensorTooShort { expected: u64, actual: u64 },
    /// A source (or a Writer's caller) delivered more bytes for a tensor than planned.
    #[error("the data holds more than the tensor's {expected} bytes")]
    TensorTooLong { expected: u64 },
    /// The sink was finished before every planned tensor was written.
    #[error("{missing} planned tensors were never written")]
    Unfinished { missing: usize },
    /// More tensors were written than planned.
    #[error("a tensor was written after the plan's last one")]
    PastPlan,
    #[error("bytes for tensor {tensor:?} came {}; write tensors in the file's order", match .expected { Some((t, left)) => format!("while tensor {t:?} still needs {left} bytes"), None => "after every tensor was complete".to_string() })]
    WriteOrder {
        tensor: String,
        expected: Option<(String, u64)>,
    },
    /// An option's value is invalid: a flag's value, a pattern, a rename
    /// that matches nothing, a raw manifest. The message names the option.
    #[error("{0}")]
    Usage(String),
    /// An input needs more than one of the caller's
    /// [`Limits`](crate::limits::Limits) allows: names it and how to raise it.
    #[error("{0}")]
    Limit(LimitExceeded),
    /// An input read from a stream has no name to give its tensor.
    #[error("{0} needs --name")]
    NameNeeded(&'static str),
    /// An input that can only be read forward, once (a pipe), was asked
    /// for its data again or out of its order.
    #[error("{0}")]
    ReadOnce(&'static str),
    /// A tensor asked for in memory is larger than this machine can address.
    #[error("tensor of {len} bytes is too large to hold in memory")]
    TooLargeForMemory { len: u64 },
    /// A blocking call was made from inside an async runtime, where it
    /// would stall the runtime's thread.
    #[error("{0} was called inside a tokio runtime; await its async form there")]
    BlockingInRuntime(&'static str),
    #[error("no tensor selected: {0}; pass --allow-empty to write a file with no tensors")]
    NothingSelected(String),
    /// A folder given as input that does not hold exactly one checkpoint.
    #[error("{0}")]
    FolderInput(String),
    /// A conversion was stopped by a signal.
    #[error("interrupted by {0}")]
    Interrupted(&'static str),
    /// The output is one of the inputs (the same file, by device and inode:
    /// a symbolic or hard link counts), and replacing an input was not asked for.
    #[error("is the same file as the input {0}; pass --overwrite-input to replace it")]
    OutputIsInput(String),
    /// Binary output to a terminal: almost surely a forgotten redirection.
    #[error("refusing to write binary output to a terminal; redirect it, or give -o a file name")]
    TerminalOutput,
    /// The output's name cannot be used as asked (an index name for one
    /// file, a name too long, a special file for a sharded set).
    #[error("{0}")]
    OutputName(String),

    // ---- numpy and input formats -------------------------------------------
    /// A malformed .npy header.
    #[error("npy: {0}")]
    NpyHeader(String),
    /// A numpy dtype with no safetensors equivalent, or not accepted.
    #[error("dtype {descr}: {reason}")]
    UnsupportedDtype { descr: String, reason: String },
    /// The data is not the length the header says.
    #[error("data is {actual} bytes but {expected} are expected{}", if .actual > .expected { " (a raw dump may pass --raw-allow-trailing)" } else { "" })]
    DataLength { expected: u64, actual: u64 },
    /// A malformed zip archive (an .npz, a PyTorch checkpoint), one whose
    /// records disagree, one using a feature this reader does not
    /// implement, or bytes whose CRC-32 is not the archive's: see
    /// [`ZipError`].
    #[error("{}{}", .0.prefix(), .0)]
    Zip(#[source] ZipError),
    /// A safetensors file was expected (validate, an index's shard) and the
    /// input is something else that convert reads.
    #[error("{what}, not a safetensors file (convert reads it; validate the converted output)")]
    NotSafetensors { what: String },
    #[error(
        "unknown input format (first bytes {0}); for a raw dump give its dtype and shape (--raw-dtype, --raw-shape)"
    )]
    UnknownFormat(String),
    /// An input that is no model file but a download gone wrong: a Git LFS
    /// pointer, a saved web page, an empty file. What it is and what to do.
    #[error("{0}")]
    BrokenDownload(String),
    /// A compressed input whose codec this build leaves out (a cargo
    /// feature turned off).
    #[error("{0}-compressed input, but this build reads no {0} (cargo feature \"{0}\" is off)")]
    CodecDisabled(&'static str),
    /// A compressed stream is corrupt or followed by something else.
    #[error("{codec}: {message}")]
    Decompress {
        codec: &'static str,
        message: String,
    },

    #[error(
        "input was {opened} bytes when opened and is {now} bytes now: it changed while being read"
    )]
    InputChanged { opened: u64, now: u64 },
    /// An input was written to while being converted, at the same length
    /// (a file's modification or status-change time moved; an object's
    /// ETag no longer matches).
    #[error(
        "input was modified while being read (a file: same length, new modification time; \
         an object: a new ETag)"
    )]
    InputModified,
    /// This run's plan is not the one expected (`--expect-plan`), or, with
    /// `--index-only`, a shard (named as the output) records another plan
    /// or none: an input was replaced since the plan was made, or the
    /// options differ.
    #[error(
        "the plan changed: {found}, --expect-plan says {expected} \
         (an input was replaced since the plan was made, or the options differ); nothing written"
    )]
    PlanMismatch { expected: String, found: String },
    /// A stream being spooled holds more bytes than its headers plan: a
    /// compression bomb, or junk after the data. Reading stopped one byte
    /// past the plan.
    #[error("input holds more than the {expected} bytes its header plans (reading stopped there)")]
    StreamTooLong { expected: u64 },
    #[error("no tensor named {0:?}")]
    TensorNotFound(String),
    /// The tensor is not of the dtype asked for.
    #[error("tensor is {actual}, not {expected}")]
    DtypeMismatch { expected: Dtype, actual: Dtype },

    // ---- PyTorch checkpoints --------------------------------------------------
    /// A pickle is malformed, breaks a limit or its budget, names a global
    /// that is not allowed, or uses an opcode on the wrong type.
    #[error("{}{}", .0.prefix(), .0)]
    Pickle(#[source] PickleError),
    /// A PyTorch checkpoint that breaks its format's rules or holds
    /// something we do not convert.
    #[error("{}{}", .0.prefix(), .0)]
    PyTorch(#[source] PyTorchError),

    // ---- sharded checkpoints ------------------------------------------------
    /// A sharded checkpoint's index, or its shards, break a rule: see
    /// [`IndexError`].
    #[error("{0}")]
    Index(#[from] IndexError),

    // ---- fan-out and object storage -----------------------------------------
    /// `--index-only`: a shard of the plan is not there, or not at its planned
    /// length (its worker has not finished, or failed).
    #[error("shard {shard} is not written yet: {detail}")]
    ShardNotWritten { shard: String, detail: String },
    /// Object storage refused or failed a request (credentials, a missing
    /// bucket, the network). The message never holds a credential.
    #[error("object store: {0}")]
    ObjectStore(#[source] StoreError),

    /// A PyTorch distributed checkpoint whose metadata or chunks do not
    /// describe its tensors.
    #[error("distributed checkpoint: {0}")]
    Dcp(#[from] dcp::DcpError),
    /// A malformed or unsupported GGUF file.
    #[error("gguf: {0}")]
    Gguf(#[from] gguf::GgufError),
    /// A malformed or unsupported HDF5 file.
    #[error("hdf5: {0}")]
    Hdf5(#[from] hdf5::Hdf5Error),
    /// A malformed or unsupported ONNX model.
    #[error("onnx: {0}")]
    Onnx(#[from] onnx::OnnxError),
    /// A malformed or unsupported Flax MessagePack file.
    #[error("msgpack: {0}")]
    Msgpack(#[from] msgpack::MsgpackError),
    /// A quantized weight (FP8, GPTQ, AWQ, bitsandbytes) whose scales,
    /// zeros or records do not describe it.
    #[error("{0}")]
    Quantized(quantized::QuantError),

    // ---- the environment --------------------------------------------------
    /// An I/O error.
    #[error("{0}")]
    Io(#[source] io::Error),
}

impl ErrorKind {
    /// The variant's name in snake case (`zip`, `header_too_large`), for
    /// machine-readable reports. Stable: a report's `kind` field. A
    /// [`Header`](ErrorKind::Header) or [`Index`](ErrorKind::Index) error
    /// is named by its inner variant, as before those were grouped.
    ///
    /// ```
    /// use safetensors_stream::{ErrorKind, HeaderError};
    /// assert_eq!(ErrorKind::Header(HeaderError::HeaderNotUtf8).name(), "header_not_utf8");
    /// ```
    pub fn name(&self) -> &'static str {
        // strum derives one match arm per variant: no Debug-text parsing.
        match self {
            ErrorKind::Header(e) => e.name(),
            ErrorKind::Index(e) => e.name(),
            ErrorKind::Pickle(e) => e.name(),
            ErrorKind::PyTorch(e) => e.name(),
            ErrorKind::Zip(e) => e.name(),
            ErrorKind::Limit(e) => e.kind,
            kind => kind.into(),
        }
    }

    /// The error's broad class. Every variant is listed: a new one must be
    /// placed on purpose.
    pub fn category(&self) -> Category {
        use {ErrorKind as K, HeaderError as H, IndexError as I};
        match self {
            K::Io(_) | K::Interrupted(_) | K::ShardNotWritten { .. } | K::ObjectStore(_) => {
                Category::Io
            }
            K::Header(H::DuplicateTensor { .. } | H::ReservedName)
            | K::Usage(_)
            | K::NameNeeded(_)
            | K::ReadOnce(_)
            | K::TooLargeForMemory { .. }
            | K::BlockingInRuntime(_)
            | K::OutputIsInput(_)
            | K::TerminalOutput
            | K::OutputName(_)
            | K::NothingSelected(_)
            | K::FolderInput(_)
            | K::TensorNotFound(_)
            | K::WriteOrder { .. }
            | K::DtypeMismatch { .. } => Category::Usage,
            K::Header(
                H::FileTooShort { .. }
                | H::HeaderTooLarge { .. }
                | H::HeaderBudget { .. }
                | H::HeaderPastEnd { .. }
                | H::HeaderNotUtf8
                | H::HeaderJson(_)
                | H::HeaderNotBrace(_)
                | H::BadPadding(_)
                | H::DuplicateKey { .. }
                | H::UnknownField { .. }
                | H::InvertedOffsets { .. }
                | H::Overlap { .. }
                | H::Gap { .. }
                | H::ShapeOverflow { .. }
                | H::NotWholeBytes { .. }
                | H::RangeLength { .. }
                | H::FileLength { .. },
            )
            | K::FileTooLarge { .. }
            | K::Limit(_)
            | K::TensorLength { .. }
            | K::TensorTooShort { .. }
            | K::TensorTooLong { .. }
            | K::Unfinished { .. }
            | K::PastPlan
            | K::NpyHeader(_)
            | K::Pickle(_)
            | K::PyTorch(_)
            | K::Zip(_)
            | K::Gguf(_)
            | K::Hdf5(_)
            | K::Onnx(_)
            | K::Msgpack(_)
            | K::Dcp(_)
            | K::UnsupportedDtype { .. }
            | K::DataLength { .. }
            | K::NotSafetensors { .. }
            | K::UnknownFormat(_)
            | K::BrokenDownload(_)
            | K::Decompress { .. }
            | K::CodecDisabled(_)
            | K::InputChanged { .. }
            | K::InputModified
            | K::PlanMismatch { .. }
            | K::StreamTooLong { .. }
            | K::Quantized(_)
            | K::Index(
                I::IndexJson(_)
                | I::NotRegularFile(_)
                | I::ShardName(_)
                | I::IndexTensorMissing { .. }
                | I::IndexTensorUnlisted { .. }
                | I::IndexDuplicate { .. }
                | I::IndexTotalSize { .. },
            ) => Category::BadInput,
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// serde_json's error for `{"a":}`, as a [`JsonError`]: "expected
    /// value at line 1 column 6".
    pub(super) fn json() -> JsonError {
        JsonError::new(serde_json::from_str::<serde_json::Value>("{\"a\":}").unwrap_err())
    }

    /// Each error says its words, and so does the kind it nests in, under
    /// its kind name.
    pub(super) fn assert_names_and_words<E>(cases: Vec<(E, &str, &str)>)
    where
        E: Into<ErrorKind> + fmt::Display,
    {
        for (e, name, words) in cases {
            assert_eq!(e.to_string(), words);
            let kind: ErrorKind = e.into();
            assert_eq!((kind.name(), kind.to_string().as_str()), (name, words));
        }
    }

    #[test]
    fn context_is_set_once_innermost_wins() {
        let e = Error::new(HeaderError::HeaderNotUtf8)
            .with_input("inner")
            .with_input("outer")
            .at_offset(3)
            .at_offset(9);
        assert_eq!(e.input(), Some("inner"));
        assert_eq!(e.offset(), Some(3));
    }

    #[test]
    fn header_and_index_errors_nest_with_their_source() {
        let header = Error::new(HeaderError::HeaderJson(json())).with_input("m");
        let index = Error::new(IndexError::IndexJson(json())).with_input("i.json");
        let words = "expected value at line 1 column 6";
        assert_eq!(header.to_string(), format!("m: header JSON: {words}"));
        assert_eq!(index.to_string(), format!("i.json: index JSON: {words}"));
        type Is = fn(&(dyn std::error::Error + 'static)) -> bool;
        let cases: [(Error, Is); 2] = [
            (header, |s| s.is::<HeaderError>()),
            (index, |s| s.is::<IndexError>()),
        ];
        for (e, is_inner) in cases {
            assert_eq!(e.category(), Category::BadInput);
            let inner = std::error::Error::source(&e).expect("the nested enum");
            assert!(is_inner(inner), "{e:?}");
            let under = inner.source().and_then(|j| j.source());
            assert!(under.is_some_and(|s| s.is::<serde_json::Error>()), "{e:?}");
        }
        let usage = Error::new(HeaderError::ReservedName);
        assert_eq!(usage.category(), Category::Usage);
    }

    #[test]
    fn survives_a_trip_through_io_error() {
        let e = Error::new(ErrorKind::Zip(ZipError::TooShort)).with_tensor("t");
        let back = Error::io(e.into_io());
        assert!(matches!(back.kind(), ErrorKind::Zip(_)));
        assert_eq!(back.tensor(), Some("t"));
    }

    #[test]
    fn kind_names_are_snake_case_variant_names() {
        let io = ErrorKind::Io(io::Error::other("x"));
        assert_eq!(io.name(), "io");
        let crc = crc_mismatch(0, 1);
        assert_eq!(crc.kind().name(), "crc_mismatch");
        assert_eq!(
            crc.to_string(),
            "CRC-32 is 00000000, the archive says 00000001"
        );
        assert_eq!(ErrorKind::Zip(ZipError::TooShort).name(), "zip");
        assert_eq!(ErrorKind::NameNeeded("x").name(), "name_needed");
        assert_eq!(
            ErrorKind::Zip(ZipError::Unsupported(ZipFeature::MultiDisk)).name(),
            "zip_unsupported"
        );
    }

    #[test]
    fn output_errors_name_the_output_not_an_input() {
        let e = Error::io(io::Error::other("disk full")).with_output("out.safetensors");
        assert_eq!(e.input(), None);
        assert_eq!(e.output(), Some("out.safetensors"));
        assert_eq!(e.to_string(), "out.safetensors: disk full");
        // The innermost file wins, whichever side it is on.
        assert_eq!(e.with_input("in.npz").input(), None);
    }

    #[test]
    fn error_is_small_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }
}
