//! The bytes of any C-contiguous Python buffer (bytes, bytearray,
//! memoryview, numpy array, array.array, mmap), written without Rust ever
//! reading them.
//!
//! # Why no `&[u8]`
//!
//! A buffer export keeps the memory allocated and its size fixed, but not
//! its contents: another Python thread may write into a bytearray or a
//! numpy array while this one writes it out, and holding the GIL does not
//! prevent it (numpy and torch release the GIL inside their copy and ufunc
//! loops; pyo3's `PyUntypedBuffer::buf_ptr` says as much). A `&[u8]` over
//! that memory promises Rust that it does not change while the reference
//! lives, and a Rust read that races with such a write is a data race:
//! undefined behaviour either way, whatever the bytes are then used for.
//!
//! So Rust code here never makes a reference to the buffer and never loads
//! from it. The memory stays behind the raw pointer of the export, handed
//! to code that reads user memory as a copy by design:
//!
//! - **the kernel**: a piece at least as long as the writer's buffer goes to
//!   the output's descriptor by `write(2)` from the pointer, after the bytes
//!   the writer buffered ([`safetensors_stream::Writer::write_with`]), with
//!   the GIL released. No copy, and the same `write(2)` calls as before:
//!   `BufWriter` sends such a piece straight through too.
//! - **CPython**: a shorter piece is copied while attached by
//!   `PyBuffer_ToContiguous` (pyo3's `copy_to_slice`; a buffer whose format
//!   is not bytes: `PyBytes_FromStringAndSize`) into memory Rust owns, then
//!   gathered in the writer's buffer as before. Every piece bound for a
//!   Python file object becomes bytes objects of at most [`PY_PIECE`] bytes
//!   the same way (memory stays bounded however large the chunk).
//!
//! Neither copy is Rust's: the kernel and CPython's `memcpy` are opaque to
//! it, no Rust reference or load of those bytes exists, so nothing the
//! compiler assumes can be contradicted by a concurrent writer. What such
//! a copy sees under a racing writer is what any consumer of the buffer
//! sees (`bytes(memoryview(a))`, `file.write(a)`).
//!
//! The cost against a `&[u8]`: one more copy of the short pieces, in cache;
//! none for long ones (`benches/python_results.md`, "Buffers without a
//! `&[u8]`").
//!
//! # What a concurrent write can and cannot do
//!
//! It can make the file hold some mix of old and new bytes of the piece
//! being written (torn values, even within one element): the same as
//! `numpy.ndarray.tofile` or `file.write(array)` racing with a writer.
//! It cannot make anything else go wrong: the piece's length was fixed when
//! it was exported, so the header, every tensor's offset and the file's
//! length are exact, every count check holds, and no byte outside the
//! export is read. On the `write(2)` path, memory that vanishes under the
//! pointer (a torch storage freed by another thread while its ctypes view
//! is written: a misuse) makes `write(2)` fail with `EFAULT`, an error.
//!
//! With the descriptor adopted in `writer.rs`, these are the crate's only
//! `unsafe` blocks (the core library forbids them).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::usage;

/// The largest bytes object made at once from a buffer (for Python file
/// objects): what one write holds beyond the caller's memory.
pub(crate) const PY_PIECE: usize = 1 << 20;

/// A held buffer export: the exporter keeps the memory alive and its size
/// fixed (a bytearray cannot be resized while exported) until this drops.
/// Its bytes are reachable only by pointer; see the module docs.
pub(crate) struct HeldBytes {
    buffer: PyUntypedBuffer,
}

impl HeldBytes {
    /// Exports `obj`'s buffer; refuses one that is not C-contiguous or is
    /// big-endian (safetensors is little-endian: the bytes go to the file
    /// as they are).
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        let buffer = PyUntypedBuffer::get(obj)?;
        if !buffer.is_c_contiguous() {
            return Err(usage(
                py,
                "the chunk is not C-contiguous; pass a contiguous copy (numpy.ascontiguousarray)",
            ));
        }
        let format = buffer.format().to_bytes();
        if matches!(format.first(), Some(b'>' | b'!')) && buffer.item_size() > 1 {
            return Err(usage(
                py,
                "the chunk is big-endian; safetensors stores little-endian bytes",
            ));
        }
        Ok(HeldBytes { buffer })
    }

    /// The length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.buffer.len_bytes()
    }

    /// The address of byte `at`, `at <= len` (never dereferenced here).
    fn ptr(&self, at: usize) -> *const u8 {
        debug_assert!(at <= self.len());
        self.buffer
            .buf_ptr()
            .cast::<u8>()
            .cast_const()
            .wrapping_add(at)
    }

    /// Every byte, copied by CPython into `scratch` (grown to fit), whose
    /// first `len` bytes are returned.
    pub(crate) fn copy_all<'a>(
        &self,
        py: Python<'_>,
        scratch: &'a mut Vec<u8>,
    ) -> PyResult<&'a [u8]> {
        let len = self.len();
        if scratch.len() < len {
            scratch.resize(len, 0);
        }
        let dst = &mut scratch[..len];
        match self.buffer.as_typed::<u8>() {
            // PyBuffer_ToContiguous: CPython's memcpy from the export.
            Ok(bytes) => bytes.copy_to_slice(py, dst)?,
            Err(_) => dst.copy_from_slice(self.copy(py, 0, len).as_bytes()),
        }
        Ok(dst)
    }

    /// Bytes `at..at + n`, copied by CPython into a new bytes object.
    pub(crate) fn copy<'py>(&self, py: Python<'py>, at: usize, n: usize) -> Bound<'py, PyBytes> {
        assert!(at <= self.len() && n <= self.len() - at);
        // SAFETY: the export is C-contiguous and held by `self`, so
        // `at..at + n` (checked above) lies within `len_bytes` readable
        // bytes that stay allocated while `self` lives. The bytes are read
        // by CPython's own copy (`PyBytes_FromStringAndSize`), not by Rust:
        // no Rust reference to them is made.
        unsafe { PyBytes::from_ptr(py, self.ptr(at), n) }
    }

    /// Writes every byte to the descriptor `fd` by `write(2)` from the
    /// export's pointer: the kernel reads them; Rust does not. Borrowed: it
    /// stays open for as long as the call, and the caller's to close.
    pub(crate) fn write_fd(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let fd = fd.as_raw_fd();
        let len = self.len();
        let mut at = 0;
        while at < len {
            // SAFETY: `ptr(at)..ptr(len)` lies within the held export (see
            // `copy`); `write(2)` only reads it, and only the kernel does:
            // a concurrent writer can tear the bytes it copies, not fault
            // it (memory gone from under it is `EFAULT`).
            let n = unsafe { libc::write(fd, self.ptr(at).cast(), len - at) };
            match n {
                n if n > 0 => at += n as usize,
                0 => return Err(io::ErrorKind::WriteZero.into()),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }
}
