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
mod writer;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<writer::NativeWriter>()?;
    m.add_function(wrap_pyfunction!(convert::convert, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_names, m)?)?;
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
