//! `_native.NativeWriter`: the library's blocking [`Writer`] for Python.
//! The Python `safetensors_stream.Writer` wraps it in a context manager.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, FromRawFd};
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use safetensors_stream::{Error, TensorMeta, Writer, WriterOptions};

use crate::bytes::{HeldBytes, PY_PIECE};
use crate::errors::{to_py, usage};
use crate::{parse_dtype, parse_order};

/// Where the bytes go.
enum Out {
    /// A path (a temp file renamed into place by `finish`) or a file
    /// descriptor (bytes stream as written): large pieces go to it by
    /// `write(2)` from the buffer's pointer.
    File(Writer<File>),
    /// A Python file object: bytes go to its `write` as bytes objects.
    Py(Writer<PyFileWrite>),
}

/// The native writer; see the Python `Writer` for the contract.
#[pyclass(module = "safetensors_stream._native")]
pub(crate) struct NativeWriter {
    /// `None` once finished or aborted.
    out: Option<Out>,
    /// Pieces this long or longer skip the write buffer (its size, as
    /// `BufWriter` does): they go to a file by `write(2)` from their pointer.
    direct_min: usize,
    /// Where CPython copies a shorter piece (see `bytes.rs`); at most
    /// `direct_min` bytes.
    scratch: Vec<u8>,
}

/// A Python object with `write` (and maybe `flush`), called with the GIL.
struct PyFileWrite(Py<PyAny>);

impl PyFileWrite {
    /// Writes every byte of `bytes`, however many calls `write` takes.
    fn write_all_py(&mut self, bytes: &Bound<'_, PyBytes>) -> io::Result<()> {
        let py = bytes.py();
        let mut left = bytes.clone();
        while !left.as_bytes().is_empty() {
            let n = self.write(left.as_bytes())?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            left = PyBytes::new(py, &left.as_bytes()[n..]);
        }
        Ok(())
    }

    /// Writes the held buffer's bytes, copied by CPython a bounded piece
    /// at a time (see `bytes.rs`: Rust never reads the buffer itself).
    fn write_held(&mut self, py: Python<'_>, held: &HeldBytes) -> io::Result<()> {
        let len = held.len();
        let mut at = 0;
        while at < len {
            let n = (len - at).min(PY_PIECE);
            self.write_all_py(&held.copy(py, at, n))?;
            at += n;
        }
        Ok(())
    }
}

impl Write for PyFileWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Python::attach(|py| {
            let n = self
                .0
                .bind(py)
                .call_method1("write", (PyBytes::new(py, buf),))
                .map_err(io::Error::other)?;
            // Raw files may write less and say so; buffered ones return the
            // full count, and writers of our users' own often None. A count
            // below 0 or above the bytes given, or no number, is a lie that
            // would leave bytes out of the file unsaid.
            if n.is_none() {
                return Ok(buf.len());
            }
            match n.extract::<i128>() {
                Ok(n) if (0..=buf.len() as i128).contains(&n) => Ok(n as usize),
                _ => Err(io::Error::other(format!(
                    "write() of {} bytes returned {}, not a count of the bytes written",
                    buf.len(),
                    n.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                ))),
            }
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        Python::attach(|py| {
            let obj = self.0.bind(py);
            if obj.hasattr("flush").map_err(io::Error::other)? {
                obj.call_method0("flush").map_err(io::Error::other)?;
            }
            Ok(())
        })
    }
}

/// What the Python layer passed as the target.
enum Target {
    Path(PathBuf),
    Fd(File),
    Py(PyFileWrite),
}

impl Target {
    /// `target`: a path (str), a file descriptor (int) the caller keeps
    /// (the writer writes through a duplicate of its own, so closing one
    /// leaves the other open: `NativeWriter(1, ...)` never closes stdout),
    /// or an object with `write`.
    fn of(target: &Bound<'_, PyAny>) -> PyResult<Self> {
        if let Ok(path) = target.extract::<PathBuf>() {
            return Ok(Target::Path(path));
        }
        if let Ok(fd) = target.extract::<i32>() {
            return Ok(Target::Fd(duplicate(target.py(), fd)?));
        }
        if target.hasattr("write")? {
            return Ok(Target::Py(PyFileWrite(target.clone().unbind())));
        }
        Err(usage(
            target.py(),
            "the target must be a path, a file object or a file descriptor",
        ))
    }
}

/// A descriptor of this writer's own, duplicating the caller's `fd` (close
/// on exec, as Python's own descriptors are).
fn duplicate(py: Python<'_>, fd: i32) -> PyResult<File> {
    if fd < 0 {
        return Err(usage(
            py,
            format!("{fd} is not a file descriptor: they are 0 or more"),
        ));
    }
    // SAFETY: fcntl reads no memory; a bad descriptor is an error (EBADF).
    let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if own < 0 {
        let e = io::Error::last_os_error();
        return Err(usage(
            py,
            format!("file descriptor {fd} is not open for writing: {e}"),
        ));
    }
    // SAFETY: `own` was just created for this File alone, which closes it once.
    Ok(unsafe { File::from_raw_fd(own) })
}

fn metas(tensors: Vec<(String, String, Vec<u64>)>) -> Result<Vec<TensorMeta>, Error> {
    tensors
        .into_iter()
        .map(|(name, dtype, shape)| {
            let dtype = parse_dtype(&dtype).map_err(|e| e.with_tensor(name.clone()))?;
            Ok(TensorMeta::new(name, dtype, shape))
        })
        .collect()
}

#[pymethods]
impl NativeWriter {
    /// `target`: see [`Target::of`].
    #[new]
    #[pyo3(signature = (target, tensors, metadata=None, order="canonical", sync=true))]
    fn new(
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        tensors: Vec<(String, String, Vec<u64>)>,
        metadata: Option<BTreeMap<String, String>>,
        order: &str,
        sync: bool,
    ) -> PyResult<Self> {
        // The target first: a descriptor handed over is then owned (and
        // closed on any error below) before anything else can fail.
        let target = Target::of(target)?;
        let err = |e: Error| to_py(py, e);
        let mut options = WriterOptions::default()
            .order(parse_order(order).map_err(err)?)
            .sync(sync);
        options.metadata = metadata;
        let direct_min = options.buffer_size.max(1);
        let tensors = metas(tensors).map_err(err)?;
        let out = match target {
            Target::Path(path) => {
                let w = py.detach(|| Writer::create(&path, tensors, options));
                Out::File(w.map_err(err)?)
            }
            Target::Fd(file) => Out::File(Writer::new(file, tensors, options).map_err(err)?),
            Target::Py(sink) => Out::Py(Writer::new(sink, tensors, options).map_err(err)?),
        };
        Ok(NativeWriter {
            out: Some(out),
            direct_min,
            scratch: Vec::new(),
        })
    }

    /// The tensors' names in the file's order.
    #[getter]
    fn order(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let names = match self.live(py)? {
            Out::File(w) => w.order().map(str::to_string).collect(),
            Out::Py(w) => w.order().map(str::to_string).collect(),
        };
        Ok(names)
    }

    /// Bytes written so far, header included.
    #[getter]
    fn bytes_written(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(match self.live(py)? {
            Out::File(w) => w.bytes_written(),
            Out::Py(w) => w.bytes_written(),
        })
    }

    /// The length in bytes the file will be.
    #[getter]
    fn file_len(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(match self.live(py)? {
            Out::File(w) => w.header().file_len(),
            Out::Py(w) => w.header().file_len(),
        })
    }

    /// Appends the bytes of `chunk` (any C-contiguous buffer) to tensor
    /// `name`. Rust never reads the chunk's memory (see `bytes.rs`): a
    /// large chunk goes to a file by `write(2)` from its pointer with the
    /// GIL released; a small one, or any to a Python file object, is copied
    /// by CPython first.
    fn write(&mut self, py: Python<'_>, name: &str, chunk: &Bound<'_, PyAny>) -> PyResult<()> {
        let held = HeldBytes::get(chunk)?;
        let len = held.len();
        let direct = len >= self.direct_min;
        let NativeWriter { out, scratch, .. } = self;
        let out = out.as_mut().ok_or_else(|| closed(py))?;
        let done = match out {
            Out::File(w) if direct => {
                let held = &held;
                py.detach(|| w.write_with(name, len, |file| held.write_fd(file.as_fd())))
            }
            Out::File(w) => {
                let bytes = held.copy_all(py, scratch)?;
                py.detach(|| w.write(name, bytes))
            }
            Out::Py(w) if direct => w.write_with(name, len, |file| file.write_held(py, &held)),
            Out::Py(w) => w.write(name, held.copy_all(py, scratch)?),
        };
        done.map_err(|e| to_py(py, e))
    }

    /// Checks every count, flushes and, for a path, syncs and renames the
    /// file into place. On an error the temp file is deleted.
    fn finish(&mut self, py: Python<'_>) -> PyResult<()> {
        let out = self.out.take().ok_or_else(|| closed(py))?;
        let done = py.detach(|| match out {
            Out::File(w) => w.finish().map(drop),
            Out::Py(w) => w.finish().map(drop),
        });
        done.map_err(|e| to_py(py, e))
    }

    /// Gives up: for a path, the temp file is deleted and nothing appears.
    fn abort(&mut self) {
        self.out = None;
    }

    /// Whether the writer was finished or aborted.
    #[getter]
    fn closed(&self) -> bool {
        self.out.is_none()
    }
}

impl NativeWriter {
    fn live(&self, py: Python<'_>) -> PyResult<&Out> {
        self.out.as_ref().ok_or_else(|| closed(py))
    }
}

fn closed(py: Python<'_>) -> PyErr {
    usage(py, "the writer is closed (finished or aborted)")
}
