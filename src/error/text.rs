//! A string read from a binary format (GGUF, ONNX, MessagePack) that
//! breaks one of the rules every such format shares.

/// A length-prefixed string of a binary input that cannot be read as a
/// name: each of those formats' errors wraps it, and reads as it does.
///
/// ```
/// use safetensors_stream::{source::gguf::error::GgufError, TextError};
///
/// let e = GgufError::from(TextError::TooLong { what: "a key", len: 9, limit: 8 });
/// assert_eq!(e.to_string(), "a key of 9 bytes exceeds the limit of 8");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum TextError {
    /// A string longer than its limit.
    #[error("{what} of {len} bytes exceeds the limit of {limit}")]
    TooLong {
        what: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("{0} is not valid UTF-8")]
    NotUtf8(&'static str),
}
