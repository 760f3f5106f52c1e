//! What can be wrong with a Flax MessagePack file.

/// A Flax MessagePack file (`flax.serialization.msgpack_serialize`) that
/// breaks a rule of MessagePack or of Flax's encoding of arrays, or uses a
/// part of it we do not read. The error carries the byte offset and the
/// tensor's name where there is one; strings from the file are quoted with
/// escapes (`{:?}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum MsgpackError {
    #[error("the file ends inside {0}")]
    Truncated(&'static str),
    #[error("{0} bytes follow the top-level map")]
    Trailing(u64),
    #[error("the top-level value is not a map")]
    NotAMap,
    #[error("byte 0xc1 is not a MessagePack marker")]
    Reserved,
    /// Maps and arrays nested deeper than the limit.
    #[error("maps nest deeper than {0} levels")]
    TooDeep(usize),
    #[error("a map key is {0}, not a string")]
    KeyType(&'static str),
    /// A string longer than its limit, or not UTF-8.
    #[error(transparent)]
    Text(#[from] super::text::TextError),
    /// A map holding one key twice: Flax's reader (a Python dict) keeps
    /// the last value only, so the first one's tensors are not the model's.
    #[error("map key {0:?} appears twice in one map")]
    DuplicateKey(String),
    /// Two tensors of one name (`{"a.b": x}` and `{"a": {"b": y}}`).
    #[error("tensor {0:?} appears twice")]
    DuplicateTensor(String),
    /// An ndarray (ext type 1 or 3) not laid out as Flax writes it:
    /// `[shape, dtype name, bytes]`.
    #[error("ndarray: {0}")]
    Ndarray(&'static str),
    /// A dtype name Flax can write that safetensors cannot hold as it is,
    /// or one numpy does not define.
    #[error("dtype {0:?} is not supported")]
    Dtype(String),
    #[error("more than 64 dimensions")]
    TooManyDims,
    #[error("data holds {actual} bytes; shape and dtype make {expected}")]
    DataLength { expected: u64, actual: u64 },
    #[error("ext value of {declared} bytes holds {actual}")]
    ExtLength { declared: u64, actual: u64 },
    /// A chunked array (`__msgpack_chunked_array__`) not as Flax writes it.
    #[error("chunked array: {0}")]
    Chunked(String),
}
