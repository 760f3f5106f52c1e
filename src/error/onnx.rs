//! What can be wrong with an ONNX model read for its initializers.

/// An ONNX model that breaks a rule of protobuf's wire format or of
/// `onnx.proto`, or uses a part of it we do not read. The error carries
/// the byte offset and the initializer's name where there is one; strings
/// from the file are quoted with escapes (`{:?}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum OnnxError {
    /// The file (or a message in it) ends inside a field.
    #[error("the model ends inside {0}")]
    Truncated(&'static str),
    #[error("a varint runs past 10 bytes")]
    Varint,
    /// A field with a wire type protobuf does not define, or a group (wire
    /// types 3 and 4: no ONNX message has one).
    #[error("field {field} has wire type {wire}, which ONNX never uses")]
    WireType { field: u64, wire: u8 },
    /// A field of `onnx.proto` with the wrong wire type for its declared type.
    #[error("{what} (field {field}) has wire type {wire}")]
    FieldType {
        what: &'static str,
        field: u32,
        wire: u8,
    },
    #[error("{what} of {len} bytes runs past its message, which has {left} bytes left")]
    PastEnd {
        what: &'static str,
        len: u64,
        left: u64,
    },
    /// A string longer than its limit, or not UTF-8.
    #[error(transparent)]
    Text(#[from] super::text::TextError),
    #[error("an initializer has no name")]
    NoName,
    /// Two initializers of one name.
    #[error("initializer {0:?} appears twice")]
    DuplicateTensor(String),
    /// A `data_type` that `onnx.proto` does not define (or `UNDEFINED`).
    #[error("data_type {0} is not an ONNX tensor type")]
    DataType(i64),
    /// A type ONNX defines that safetensors cannot hold as it is.
    #[error("data_type {name} is not supported: {why}")]
    Unsupported {
        name: &'static str,
        why: &'static str,
    },
    #[error("dimension {0} is negative")]
    NegativeDim(i64),
    #[error("more than 64 dimensions")]
    TooManyDims,
    /// A tensor stored in segments (`TensorProto.segment`), which onnx's own
    /// `to_array` does not read either.
    #[error("segmented tensors are not supported")]
    Segment,
    /// A tensor whose data is in none of its fields.
    #[error("{elements} elements but no data (no raw_data, no {field}, no external data)")]
    NoData { elements: u64, field: &'static str },
    /// A tensor whose data is in two of its fields (`raw_data`, its typed
    /// field, external data): onnx's checker demands exactly one, and
    /// readers differ on which one wins.
    #[error("data in both {0} and {1}; a tensor has its data in one place")]
    TwoDataFields(&'static str, &'static str),
    /// `raw_data` or external data whose length is not the tensor's.
    #[error("{what} holds {actual} bytes; dims and data_type make {expected}")]
    DataLength {
        what: &'static str,
        expected: u64,
        actual: u64,
    },
    /// A typed field whose element count is not the tensor's.
    #[error("{field} holds {actual} values; dims and data_type make {expected}")]
    ElementCount {
        field: &'static str,
        expected: u64,
        actual: u64,
    },
    #[error("{field} of {len} bytes is not whole {width}-byte values")]
    PackedWidth {
        field: &'static str,
        len: u64,
        width: u64,
    },
    /// A packed field whose last varint is cut off.
    #[error("{0} ends inside a varint")]
    PackedVarint(&'static str),
    /// External data that cannot be read as the rules say: `location`
    /// missing, absolute, holding `..`, leading out of the model's folder
    /// (through a symbolic link too), not a regular file, an `offset` or
    /// `length` that is not a number or runs past the file.
    #[error("external data: {0}")]
    External(String),
    /// Two initializers whose external data shares bytes: a model of a few
    /// KB naming one big file's bytes many times would write it again and
    /// again (onnx's own writer gives each tensor its own bytes).
    #[error("initializers {0:?} and {1:?} share bytes of their external data")]
    Overlap(String, String),
}
