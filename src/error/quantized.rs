//! What can be wrong with a quantized weight's tensors.

/// A quantized weight whose auxiliary tensors (scales, zeros, `g_idx`,
/// records) do not describe it. The error names the tensor at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum QuantError {
    /// An auxiliary tensor's shape does not fit the weight it scales.
    #[error("{scheme}: shape {actual:?}, expected {expected}")]
    Shape {
        scheme: &'static str,
        actual: Vec<u64>,
        expected: String,
    },
    /// An auxiliary tensor or weight has a dtype the scheme does not use.
    #[error("{scheme}: dtype {actual}, expected {expected}")]
    Dtype {
        scheme: &'static str,
        actual: crate::Dtype,
        expected: &'static str,
    },
    /// A group size that does not divide the weight's columns, or that
    /// disagrees with the model's `quantization_config`.
    #[error("{scheme}: {detail}")]
    Groups {
        scheme: &'static str,
        detail: String,
    },
    /// An act-order `g_idx` entry names a group the scales do not have.
    #[error("gptq: g_idx[{column}] is {value}, but the scales have {groups} groups")]
    GroupIndex {
        column: u64,
        value: i64,
        groups: u64,
    },
    /// A weight's tensors are incomplete (a `qweight` without `scales`).
    #[error("{scheme}: {missing} is missing")]
    Missing {
        scheme: &'static str,
        missing: String,
    },
    /// A variant of a scheme this build does not dequantize.
    #[error("{0}")]
    Unsupported(String),
    /// A bitsandbytes `quant_state` record that does not parse, or says
    /// what the library would refuse.
    #[error("bitsandbytes quant_state record: {0}")]
    Record(String),
    #[error("config.json quantization_config: {0}")]
    Config(String),
}
