//! The bytes of any C-contiguous Python buffer (bytes, bytearray,
//! memoryview, numpy array, array.array, mmap), without a copy.
//!
//! This is the crate's only `unsafe`: the core library forbids it.

use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;

use crate::errors::usage;

/// A held buffer export: the exporter keeps the memory alive and its size
/// fixed (a bytearray cannot be resized while exported) until this drops.
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

    /// The bytes, valid while `self` lives.
    pub(crate) fn as_slice(&self) -> &[u8] {
        let len = self.buffer.len_bytes();
        if len == 0 {
            return &[];
        }
        // SAFETY: the export succeeded and is C-contiguous, so `buf_ptr`
        // points to `len_bytes` readable bytes, which the exporter keeps
        // allocated (and, for resizable objects, unresized) until the
        // export is released when `self.buffer` drops; the slice borrows
        // `self`. Another Python thread may still write into a mutable
        // buffer while the GIL is released: the file then gets some mix of
        // old and new bytes, as with any writer of a buffer being mutated
        // (numpy's own `tofile` included), but no memory is misread.
        unsafe { std::slice::from_raw_parts(self.buffer.buf_ptr().cast::<u8>(), len) }
    }
}
