//! The native half of the `safetensors_stream` Python package: thin
//! wrappers over the library's [`Writer`](safetensors_stream::Writer) and
//! [`convert_blocking`](safetensors_stream::convert_blocking). Dtype
//! spellings, numpy arrays and the context-manager protocol live in the
//! pure-Python half (`safetensors_stream/__init__.py`).
//!
//! No tokio runtime outlives a call: the Writer is blocking I/O and
//! `convert` builds a current-thread runtime per call, so a process may
//! `fork()` at any time between calls.

mod bytes;
mod convert;
mod errors;
mod options;
mod writer;

use pyo3::prelude::*;
use safetensors_stream::header::Order;
use safetensors_stream::{Dtype, Error, ErrorKind};

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<writer::NativeWriter>()?;
    m.add_function(wrap_pyfunction!(convert::convert, m)?)?;
    m.add_function(wrap_pyfunction!(convert::convert_options, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_names, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_name, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_bits, m)?)?;
    Ok(())
}

/// The safetensors dtype spellings, in the format's order.
#[pyfunction]
fn dtype_names() -> Vec<&'static str> {
    safetensors_stream::Dtype::ALL
        .iter()
        .map(|d| d.as_str())
        .collect()
}

/// The safetensors name of a dtype as people spell it (`"bf16"`,
/// `"float32"`, `"torch.half"`): the library's parse, shared with the CLI.
#[pyfunction]
fn dtype_name(py: Python<'_>, spelling: &str) -> PyResult<&'static str> {
    parse_dtype(spelling)
        .map(|d| d.as_str())
        .map_err(|e| errors::to_py(py, e))
}

/// The bits one element of a dtype takes (4 for F4): what a chunk's
/// items must add up to.
#[pyfunction]
fn dtype_bits(py: Python<'_>, spelling: &str) -> PyResult<u64> {
    parse_dtype(spelling)
        .map(|d| d.bits())
        .map_err(|e| errors::to_py(py, e))
}

/// `"canonical"` or `"input"`, as the CLI's `--order`.
pub(crate) fn parse_order(order: &str) -> Result<Order, Error> {
    match order {
        "canonical" => Ok(Order::Canonical),
        "input" => Ok(Order::AsGiven),
        other => Err(ErrorKind::Usage(format!(
            "order must be \"canonical\" or \"input\", not {other:?}"
        ))
        .into()),
    }
}

/// A safetensors dtype spelling ("BF16"); an unknown one is a usage error.
pub(crate) fn parse_dtype(s: &str) -> Result<Dtype, Error> {
    s.parse()
        .map_err(|e: safetensors_stream::UnknownDtype| ErrorKind::Usage(e.to_string()).into())
}
