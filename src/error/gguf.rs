//! What can be wrong with a GGUF file.

/// A GGUF file that breaks a rule of the format, or uses a part of it we
/// do not read. Names and keys are quoted with escapes (`{:?}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The file ends inside its header.
    #[error("file ends inside the GGUF header ({0})")]
    Truncated(&'static str),
    /// A count that cannot fit in the rest of the file.
    #[error("{count} {what} cannot fit in the {left} bytes left in the file")]
    TooMany {
        /// What is counted.
        what: &'static str,
        /// The count the file claims.
        count: u64,
        /// Bytes left after the count.
        left: u64,
    },
    /// A string longer than its limit, or not UTF-8.
    #[error(transparent)]
    Text(#[from] super::text::TextError),
    /// A metadata value type outside 0..=12.
    #[error("metadata key {key:?} has unknown value type {ty}")]
    ValueType {
        /// The key.
        key: String,
        /// The type id.
        ty: u32,
    },
    /// Arrays nested deeper than the limit.
    #[error("metadata key {0:?} nests arrays deeper than 8 levels")]
    TooDeep(String),
    /// A metadata key that appears twice.
    #[error("metadata key {0:?} appears twice")]
    DuplicateKey(String),
    /// A tensor name that appears twice.
    #[error("tensor {0:?} appears twice")]
    DuplicateTensor(String),
    /// `general.alignment` that is not a u32 power of two.
    #[error("general.alignment must be a non-zero power of two of type u32, not {0}")]
    Alignment(String),
    /// More dimensions than ggml has (GGML_MAX_DIMS = 4).
    #[error("{0} dimensions; ggml tensors have at most 4")]
    Dims(u32),
    /// A dimension beyond ggml's signed 64-bit range, or an element count that overflows.
    #[error("dimensions {0:?} overflow 64 bits")]
    Overflow(Vec<u64>),
    /// A tensor type id that ggml does not define.
    #[error("unknown ggml tensor type {0}")]
    UnknownType(u32),
    /// A type ggml defines that we do not read.
    #[error("tensor type {name} is not supported: {why}")]
    Unsupported {
        /// The type's name.
        name: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A row that is not a whole number of blocks.
    #[error("rows of {row} elements are not whole {name} blocks of {block}")]
    PartialBlock {
        /// The type's name.
        name: &'static str,
        /// The row length (ggml's `ne[0]`).
        row: u64,
        /// Elements per block.
        block: u64,
    },
    /// Tensor data past the end of the file.
    #[error("data runs to byte {end} but the file has {len} bytes")]
    PastEnd {
        /// Where the tensor's data ends.
        end: u64,
        /// The file's length.
        len: u64,
    },
    /// A tensor whose offset from the data section is not a multiple of
    /// `general.alignment` (ggml's gguf.cpp refuses it too).
    #[error("offset {offset} is not a multiple of general.alignment {alignment}")]
    Misaligned {
        /// The tensor's offset from the start of the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// Two tensors sharing bytes.
    #[error("tensors {0:?} and {1:?} overlap")]
    Overlap(String, String),
}
