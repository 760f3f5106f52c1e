//! What can be wrong with a quantized weight's tensors.

/// A quantized weight whose auxiliary tensors (scales, zeros, `g_idx`,
/// records) do not describe it. The error names the tensor at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// An auxiliary tensor's shape does not fit the weight it scales.
    #[error("{scheme}: shape {actual:?}, expected {expected}")]
    Shape {
        /// The scheme (`fp8`, `gptq`, ...).
        scheme: &'static str,
        /// The shape found.
        actual: Vec<u64>,
        /// What fits, in words (`[32, 4096]`, `[ceil(rows / 128), ceil(cols / 128)]`).
        expected: String,
    },
    /// An auxiliary tensor or weight has a dtype the scheme does not use.
    #[error("{scheme}: dtype {actual}, expected {expected}")]
    Dtype {
        /// The scheme.
        scheme: &'static str,
        /// The dtype found.
        actual: crate::Dtype,
        /// The dtypes the scheme's library reads.
        expected: &'static str,
    },
    /// A group size that does not divide the weight's columns, or that
    /// disagrees with the model's `quantization_config`.
    #[error("{scheme}: {detail}")]
    Groups {
        /// The scheme.
        scheme: &'static str,
        /// What does not divide.
        detail: String,
    },
    /// An act-order `g_idx` entry names a group the scales do not have.
    #[error("gptq: g_idx[{column}] is {value}, but the scales have {groups} groups")]
    GroupIndex {
        /// The input column.
        column: u64,
        /// The entry.
        value: i64,
        /// The groups there are.
        groups: u64,
    },
    /// A weight's tensors are incomplete (a `qweight` without `scales`).
    #[error("{scheme}: {missing} is missing")]
    Missing {
        /// The scheme.
        scheme: &'static str,
        /// The tensor that should be there.
        missing: String,
    },
    /// A variant of a scheme this build does not dequantize.
    #[error("{0}")]
    Unsupported(String),
    /// A bitsandbytes `quant_state` record that does not parse, or says
    /// what the library would refuse.
    #[error("bitsandbytes quant_state record: {0}")]
    Record(String),
    /// A `config.json` `quantization_config` that does not parse.
    #[error("config.json quantization_config: {0}")]
    Config(String),
}
