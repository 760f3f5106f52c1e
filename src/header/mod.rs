//! The safetensors header: its model, its byte-exact encoding, and its
//! parsing and validation.
//!
//! Everything here is pure: no I/O. `read` holds thin drivers that fetch
//! the header bytes of a file (never its data) and hand them to the pure code.
//!
//! Layer: header, below every source. May import the error layer and
//! `dtype`; never a source, a plan or anything that writes.

pub(crate) mod encode;
mod json;
pub(crate) mod names;
pub(crate) mod read;
mod validate;

use std::collections::BTreeMap;

pub use encode::{encode, EncodedHeader};
pub use names::Order;
pub use read::read_header;
pub use validate::{
    check_file_len, check_prefix, parse_file_bytes, parse_header, parse_header_json, Mode, Rules,
};

use crate::{Dtype, Error, HeaderError, Result};

/// The format's hard limit on the header's length N, in bytes.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Checks what reading a header holds, `charged` bytes (its own bytes
/// included), against the README's bound for every header (safetensors,
/// index, raw manifest, GGUF): 3 times the `read` bytes + 64 MiB. One rule,
/// however each reader counts.
pub(crate) fn within_memory_bound(charged: u64, read: u64) -> std::result::Result<(), HeaderError> {
    let limit = read.saturating_mul(3).saturating_add(64 << 20);
    if charged > limit {
        return Err(HeaderError::HeaderBudget { limit });
    }
    Ok(())
}

/// The Hugging Face Hub refuses headers above this many bytes; we warn.
pub const HUB_HEADER_LIMIT: u64 = 25_000_000;

/// numpy's and torch's limit on one array's bytes: a signed 64-bit size.
pub const MAX_ARRAY_BYTES: u64 = i64::MAX as u64;

/// True when numpy (and torch) can hold an array of `dtype` and `shape`:
/// its non-zero dimensions times the element's bytes fit [`MAX_ARRAY_BYTES`].
/// numpy checks this before it looks for a zero, so `(0, 2**64 - 1)` is
/// "too big" although it has no elements; a file with that shape converts
/// to one that numpy (and the Python reference reading into numpy) cannot
/// load.
///
/// ```
/// use safetensors_stream::{Dtype, header::numpy_can_hold};
///
/// assert!(numpy_can_hold(Dtype::F32, &[0, 3]));
/// assert!(!numpy_can_hold(Dtype::U8, &[0, u64::MAX]));
/// assert!(!numpy_can_hold(Dtype::F32, &[1 << 62]));
/// ```
pub fn numpy_can_hold(dtype: Dtype, shape: &[u64]) -> bool {
    shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(dtype.bits().div_ceil(8), |acc, &d| acc.checked_mul(d))
        .is_some_and(|bytes| bytes <= MAX_ARRAY_BYTES)
}

/// Bytes of the little-endian length prefix.
pub const PREFIX_LEN: u64 = 8;

/// The `__metadata__` map: string keys to string values, kept sorted.
pub type Metadata = BTreeMap<String, String>;

/// A tensor as the header describes it, before it has a place in a buffer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorMeta {
    /// The tensor's name (any UTF-8 string but `__metadata__`).
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape; `[]` is a scalar.
    pub shape: Vec<u64>,
}

impl TensorMeta {
    /// A tensor description.
    pub fn new(name: impl Into<String>, dtype: Dtype, shape: impl Into<Vec<u64>>) -> Self {
        TensorMeta {
            name: name.into(),
            dtype,
            shape: shape.into(),
        }
    }

    /// Its byte length, or the error naming this tensor.
    pub fn byte_len(&self) -> Result<u64> {
        self.dtype.byte_len(&self.shape).map_err(|e| {
            let tensor = self.name.clone();
            let (dtype, shape) = (self.dtype, self.shape.clone());
            Error::new(match e {
                crate::dtype::ByteLenError::Overflow => HeaderError::ShapeOverflow {
                    tensor,
                    dtype,
                    shape,
                },
                crate::dtype::ByteLenError::NotWholeBytes { bits } => HeaderError::NotWholeBytes {
                    tensor,
                    dtype,
                    shape,
                    bits,
                },
            })
        })
    }
}

/// A tensor with its place `[begin, end)` in the data buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// Name, dtype and shape.
    pub meta: TensorMeta,
    /// Offset of its first byte, from the start of the data buffer.
    pub begin: u64,
    /// Offset one past its last byte.
    pub end: u64,
}

impl TensorEntry {
    /// Its byte length, `end - begin`.
    pub fn len(&self) -> u64 {
        self.end - self.begin
    }

    /// True for a tensor of 0 bytes.
    pub fn is_empty(&self) -> bool {
        self.begin == self.end
    }
}

/// A whole header: metadata and tensors in offset order, and its length N.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The `__metadata__` map, if the header has one (even empty).
    pub metadata: Option<Metadata>,
    /// The tensors, sorted by their offsets.
    pub tensors: Vec<TensorEntry>,
    /// N: the JSON's length in bytes, padding included.
    pub header_len: u64,
}

impl Header {
    /// Length of the data buffer: the last tensor's end.
    pub fn data_len(&self) -> u64 {
        self.tensors.last().map_or(0, |t| t.end)
    }

    /// Where the data buffer starts in the file: `8 + N`.
    pub fn data_start(&self) -> u64 {
        PREFIX_LEN + self.header_len
    }

    /// The file's whole length: `8 + N + data`.
    pub fn file_len(&self) -> u64 {
        self.data_start() + self.data_len()
    }

    /// The tensor called `name`, if any (a linear scan).
    pub fn get(&self, name: &str) -> Option<&TensorEntry> {
        self.tensors.iter().find(|t| t.meta.name == name)
    }
}
