//! What can be wrong with an ONNX model read for its initializers.

/// An ONNX model that breaks a rule of protobuf's wire format or of
/// `onnx.proto`, or uses a part of it we do not read. The error carries
/// the byte offset and the initializer's name where there is one; strings
/// from the file are quoted with escapes (`{:?}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OnnxError {
    /// The file (or a message in it) ends inside a field.
    #[error("the model ends inside {0}")]
    Truncated(&'static str),
    /// A varint longer than protobuf's 10 bytes.
    #[error("a varint runs past 10 bytes")]
    Varint,
    /// A field with a wire type protobuf does not define, or a group (wire
    /// types 3 and 4: no ONNX message has one).
    #[error("field {field} has wire type {wire}, which ONNX never uses")]
    WireType {
        /// The field number.
        field: u64,
        /// The wire type.
        wire: u8,
    },
    /// A field of `onnx.proto` with the wrong wire type for its declared type.
    #[error("{what} (field {field}) has wire type {wire}")]
    FieldType {
        /// The field's name in `onnx.proto`.
        what: &'static str,
        /// Its number.
        field: u32,
        /// The wire type found.
        wire: u8,
    },
    /// A length that runs past the end of its message or of the file.
    #[error("{what} of {len} bytes runs past its message, which has {left} bytes left")]
    PastEnd {
        /// What the length belongs to.
        what: &'static str,
        /// The claimed length.
        len: u64,
        /// Bytes left.
        left: u64,
    },
    /// A string longer than its limit, or not UTF-8.
    #[error(transparent)]
    Text(#[from] super::text::TextError),
    /// An initializer without a name.
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
        /// The type's name in `onnx.proto`.
        name: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A negative dimension.
    #[error("dimension {0} is negative")]
    NegativeDim(i64),
    /// More dimensions than numpy's 64.
    #[error("more than 64 dimensions")]
    TooManyDims,
    /// A tensor stored in segments (`TensorProto.segment`), which onnx's own
    /// `to_array` does not read either.
    #[error("segmented tensors are not supported")]
    Segment,
    /// A tensor whose data is in none of its fields.
    #[error("{elements} elements but no data (no raw_data, no {field}, no external data)")]
    NoData {
        /// Its element count.
        elements: u64,
        /// The typed field its type would use.
        field: &'static str,
    },
    /// `raw_data` or external data whose length is not the tensor's.
    #[error("{what} holds {actual} bytes; dims and data_type make {expected}")]
    DataLength {
        /// Where the data is (`raw_data`, `external data`).
        what: &'static str,
        /// The tensor's byte length.
        expected: u64,
        /// The data's.
        actual: u64,
    },
    /// A typed field whose element count is not the tensor's.
    #[error("{field} holds {actual} values; dims and data_type make {expected}")]
    ElementCount {
        /// The field.
        field: &'static str,
        /// The values the tensor needs.
        expected: u64,
        /// The values the field holds.
        actual: u64,
    },
    /// A packed fixed-width field whose length is not whole values.
    #[error("{field} of {len} bytes is not whole {width}-byte values")]
    PackedWidth {
        /// The field.
        field: &'static str,
        /// Its length.
        len: u64,
        /// Its values' width.
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
