//! What can be wrong with a safetensors header: the file's frame (the
//! length prefix and the header's bounds), the header's JSON, the tensor
//! layout it describes, or a header being built from tensors.

use super::{JsonError, Span};
use crate::Dtype;

/// A safetensors header, or the frame around it, that breaks a rule of the
/// format; or a header that cannot be built as asked (a reserved or
/// repeated tensor name). Names from the file are quoted with escapes
/// (`{:?}`).
///
/// Raised by the header layer ([`header`](crate::header): reading the
/// frame, parsing and validating the header, encoding one) and by the
/// layers that build or check a header's parts on its behalf: the planner
/// (tensor names), a raw dump's manifest (its layout), a stream's length
/// prefix. Nested in [`ErrorKind::Header`](super::ErrorKind::Header); each
/// variant's [`name`](HeaderError::name) is the kind name reports give.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum HeaderError {
    // ---- the file's frame -------------------------------------------------
    #[error("file is {len} bytes, shorter than the 8-byte header length")]
    FileTooShort { len: u64 },
    #[error("header length {len} exceeds the limit of {limit} bytes")]
    HeaderTooLarge { len: u64, limit: u64 },
    /// Holding the header would take more memory than its budget: three
    /// times its length plus 64 MiB (entries that cost far more than their
    /// text, such as a million one-letter metadata keys or a shape of a
    /// million dimensions).
    #[error("header would take more than {limit} bytes of memory to hold (3 times its length + 64 MiB): refused")]
    HeaderBudget { limit: u64 },
    /// The header runs past the end of the file.
    #[error("header claims {len} bytes but the file has only {available} after the length prefix")]
    HeaderPastEnd { len: u64, available: u64 },
    #[error("header is not valid UTF-8")]
    HeaderNotUtf8,
    #[error("header JSON: {0}")]
    HeaderJson(#[source] JsonError),
    #[error("header starts with byte 0x{0:02x}, not '{{' (strict mode)")]
    HeaderNotBrace(u8),
    /// Strict: something other than spaces follows the JSON object.
    #[error("header padding holds byte 0x{0:02x}; only trailing spaces are allowed (strict mode)")]
    BadPadding(u8),
    /// Strict: a key appears twice in one JSON object.
    #[error("duplicate key {key:?} in {within} (strict mode)")]
    DuplicateKey { key: String, within: String },
    /// Strict: a tensor's entry has a field other than dtype, shape, data_offsets.
    #[error("unknown field {field:?} in tensor {tensor:?} (strict mode)")]
    UnknownField { tensor: String, field: String },

    // ---- tensor layout ----------------------------------------------------
    #[error("tensor {tensor:?} has data_offsets {span} with end before begin")]
    InvertedOffsets { tensor: String, span: Span },
    /// Two tensors' byte ranges overlap.
    #[error("tensors {first:?} {first_span} and {second:?} {second_span} overlap")]
    Overlap {
        first: String,
        first_span: Span,
        second: String,
        second_span: Span,
    },
    /// Bytes that belong to no tensor lie between two tensors (or before the first).
    #[error("bytes [{begin},{end}) of the data buffer belong to no tensor (before {next:?})")]
    Gap { begin: u64, end: u64, next: String },
    #[error("tensor {tensor:?}: shape {shape:?} overflows 64 bits for {dtype}")]
    ShapeOverflow {
        tensor: String,
        dtype: Dtype,
        shape: Vec<u64>,
    },
    #[error(
        "tensor {tensor:?}: {dtype} shape {shape:?} is {bits} bits, not a whole number of bytes"
    )]
    NotWholeBytes {
        tensor: String,
        dtype: Dtype,
        shape: Vec<u64>,
        bits: u64,
    },
    /// A tensor's range length differs from its dtype and shape's byte length.
    #[error("tensor {tensor:?}: data_offsets {span} hold {} bytes but {dtype} {shape:?} needs {expected}", span.1 - span.0)]
    RangeLength {
        tensor: String,
        dtype: Dtype,
        shape: Vec<u64>,
        span: Span,
        expected: u64,
    },
    /// The file is not exactly 8 + header + data bytes long.
    #[error("file is {actual} bytes but its header describes {expected}")]
    FileLength { expected: u64, actual: u64 },

    // ---- building a header --------------------------------------------------
    #[error("a tensor may not be named \"__metadata__\"")]
    ReservedName,
    /// Two tensors have the same name.
    #[error("tensor name {name:?} is given twice{}", inputs_clause(.inputs))]
    DuplicateTensor {
        name: String,
        inputs: Option<(String, String)>,
    },
}

impl HeaderError {
    /// The variant's name in snake case (`overlap`, `header_too_large`):
    /// the [`ErrorKind::name`](super::ErrorKind::name) of the error it is in.
    pub fn name(&self) -> &'static str {
        self.into()
    }
}

fn inputs_clause(inputs: &Option<(String, String)>) -> String {
    match inputs {
        Some((a, b)) => format!(" (in {a} and {b})"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::tests::{assert_names_and_words, json};

    /// Each variant's kind name and words, as they were when these were
    /// variants of `ErrorKind`.
    #[test]
    fn names_and_messages_are_what_they_were() {
        let s = |t: &str| t.to_string();
        let cases: Vec<(HeaderError, &str, &str)> = vec![
            (
                HeaderError::FileTooShort { len: 5 },
                "file_too_short",
                "file is 5 bytes, shorter than the 8-byte header length",
            ),
            (
                HeaderError::HeaderTooLarge {
                    len: 1 << 40,
                    limit: 100_000_000,
                },
                "header_too_large",
                "header length 1099511627776 exceeds the limit of 100000000 bytes",
            ),
            (
                HeaderError::HeaderBudget { limit: 67_108_928 },
                "header_budget",
                "header would take more than 67108928 bytes of memory to hold (3 times its length + 64 MiB): refused",
            ),
            (
                HeaderError::HeaderPastEnd {
                    len: 100,
                    available: 16,
                },
                "header_past_end",
                "header claims 100 bytes but the file has only 16 after the length prefix",
            ),
            (
                HeaderError::HeaderNotUtf8,
                "header_not_utf8",
                "header is not valid UTF-8",
            ),
            (
                HeaderError::HeaderJson(json()),
                "header_json",
                "header JSON: expected value at line 1 column 6",
            ),
            (
                HeaderError::HeaderNotBrace(b'n'),
                "header_not_brace",
                "header starts with byte 0x6e, not '{' (strict mode)",
            ),
            (
                HeaderError::BadPadding(b'\t'),
                "bad_padding",
                "header padding holds byte 0x09; only trailing spaces are allowed (strict mode)",
            ),
            (
                HeaderError::DuplicateKey {
                    key: s("k"),
                    within: s("__metadata__"),
                },
                "duplicate_key",
                "duplicate key \"k\" in __metadata__ (strict mode)",
            ),
            (
                HeaderError::UnknownField {
                    tensor: s("a"),
                    field: s("x"),
                },
                "unknown_field",
                "unknown field \"x\" in tensor \"a\" (strict mode)",
            ),
            (
                HeaderError::InvertedOffsets {
                    tensor: s("a"),
                    span: Span(4, 0),
                },
                "inverted_offsets",
                "tensor \"a\" has data_offsets [4,0) with end before begin",
            ),
            (
                HeaderError::Overlap {
                    first: s("a"),
                    first_span: Span(0, 16),
                    second: s("b"),
                    second_span: Span(8, 24),
                },
                "overlap",
                "tensors \"a\" [0,16) and \"b\" [8,24) overlap",
            ),
            (
                HeaderError::Gap {
                    begin: 4,
                    end: 8,
                    next: s("b"),
                },
                "gap",
                "bytes [4,8) of the data buffer belong to no tensor (before \"b\")",
            ),
            (
                HeaderError::ShapeOverflow {
                    tensor: s("a"),
                    dtype: Dtype::U8,
                    shape: vec![1 << 40, 1 << 40],
                },
                "shape_overflow",
                "tensor \"a\": shape [1099511627776, 1099511627776] overflows 64 bits for U8",
            ),
            (
                HeaderError::NotWholeBytes {
                    tensor: s("f"),
                    dtype: Dtype::F4,
                    shape: vec![3],
                    bits: 12,
                },
                "not_whole_bytes",
                "tensor \"f\": F4 shape [3] is 12 bits, not a whole number of bytes",
            ),
            (
                HeaderError::RangeLength {
                    tensor: s("a"),
                    dtype: Dtype::F32,
                    shape: vec![3],
                    span: Span(0, 8),
                    expected: 12,
                },
                "range_length",
                "tensor \"a\": data_offsets [0,8) hold 8 bytes but F32 [3] needs 12",
            ),
            (
                HeaderError::FileLength {
                    expected: 24,
                    actual: 30,
                },
                "file_length",
                "file is 30 bytes but its header describes 24",
            ),
            (
                HeaderError::ReservedName,
                "reserved_name",
                "a tensor may not be named \"__metadata__\"",
            ),
            (
                HeaderError::DuplicateTensor {
                    name: s("w"),
                    inputs: Some((s("a.npz"), s("b.npz"))),
                },
                "duplicate_tensor",
                "tensor name \"w\" is given twice (in a.npz and b.npz)",
            ),
            (
                HeaderError::DuplicateTensor {
                    name: s("w"),
                    inputs: None,
                },
                "duplicate_tensor",
                "tensor name \"w\" is given twice",
            ),
        ];
        assert_names_and_words(cases);
    }
}
