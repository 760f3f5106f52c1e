//! Library errors as the package's typed Python exceptions.

use pyo3::prelude::*;
use pyo3::PyErr;
use safetensors_stream::{Category, Error};

/// The Python exception for `e`: `BadInputError`, `UsageError` or
/// `IOError` from `safetensors_stream._errors`, carrying the error's kind
/// name, input, tensor, byte offset and output. The message names options
/// as Python keywords (`allow_empty=True`), not as the CLI's flags.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let class = match e.category() {
        Category::BadInput => "BadInputError",
        Category::Usage => "UsageError",
        Category::Io => "IOError",
    };
    let raised = (|| -> PyResult<PyErr> {
        let module = py.import("safetensors_stream._errors")?;
        let exc = module.getattr(class)?.call1((
            crate::options::pythonic(&e.to_string()),
            e.kind().name(),
            e.input(),
            e.tensor(),
            e.offset(),
            e.output(),
        ))?;
        Ok(PyErr::from_value(exc))
    })();
    raised.unwrap_or_else(|import_failed| import_failed)
}

/// A usage error raised from this crate's own checks.
pub(crate) fn usage(py: Python<'_>, message: impl Into<String>) -> PyErr {
    to_py(
        py,
        Error::new(safetensors_stream::ErrorKind::Usage(message.into())),
    )
}
