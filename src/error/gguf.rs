//! What can be wrong with a GGUF file.

/// A GGUF file that breaks a rule of the format, or uses a part of it we
/// do not read. Names and keys are quoted with escapes (`{:?}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum GgufError {
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: it does not start with \"GGUF\"")]
    Magic,
    /// GGUF version 1 (32-bit counts), long superseded.
    #[error("GGUF version 1 is not supported (versions 2 and 3 are): re-save it with a current llama.cpp or gguf-py")]
    Version1,
    /// A version this reader does not know.
    #[error("GGUF version {0} is not supported (versions 2 and 3 are)")]
    Version(u32),
    #[error("file ends inside the GGUF header ({0})")]
    Truncated(&'static str),
    #[error("{count} {what} cannot fit in the {left} bytes left in the file")]
    TooMany {
        what: &'static str,
        count: u64,
        left: u64,
    },
    /// A string longer than its limit, or not UTF-8.
    #[error(transparent)]
    Text(#[from] super::text::TextError),
    #[error("metadata key {key:?} has unknown value type {ty}")]
    ValueType { key: String, ty: u32 },
    #[error("metadata key {0:?} nests arrays deeper than 8 levels")]
    TooDeep(String),
    #[error("metadata key {0:?} appears twice")]
    DuplicateKey(String),
    #[error("tensor {0:?} appears twice")]
    DuplicateTensor(String),
    #[error("general.alignment must be a non-zero power of two of type u32, not {0}")]
    Alignment(String),
    #[error("{0} dimensions; ggml tensors have at most 4")]
    Dims(u32),
    /// A dimension beyond ggml's signed 64-bit range, or an element count that overflows.
    #[error("dimensions {0:?} overflow 64 bits")]
    Overflow(Vec<u64>),
    #[error("unknown ggml tensor type {0}")]
    UnknownType(u32),
    /// A type ggml defines that we do not read.
    #[error("tensor type {name} is not supported: {why}")]
    Unsupported {
        name: &'static str,
        why: &'static str,
    },
    #[error("rows of {row} elements are not whole {name} blocks of {block}")]
    PartialBlock {
        name: &'static str,
        row: u64,
        block: u64,
    },
    #[error("data runs to byte {end} but the file has {len} bytes")]
    PastEnd { end: u64, len: u64 },
    /// A tensor whose offset from the data section is not a multiple of
    /// `general.alignment` (ggml's gguf.cpp refuses it too).
    #[error("offset {offset} is not a multiple of general.alignment {alignment}")]
    Misaligned { offset: u64, alignment: u64 },
    /// Two tensors sharing bytes.
    #[error("tensors {0:?} and {1:?} overlap")]
    Overlap(String, String),
}
