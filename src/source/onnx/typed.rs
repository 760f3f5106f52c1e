//! A tensor's values from its typed field (`float_data`, `int32_data`,
//! ...), decoded as they are read: the `TensorProto`'s bytes are walked
//! again, each occurrence of the field (packed or not) decoded in turn, and
//! each value written as the low `width` bytes of its little-endian form
//! (onnx's `to_array` casts the same way). Memory: the cursor's buffer.

use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;

use super::types::Storage;
use super::wire::{next_field, varint, Value};
use crate::source::cursor::FileCursor;

/// Reads the `values` values of `storage` in the message at `[start, end)`.
pub(crate) struct TypedReader {
    c: FileCursor<Arc<File>>,
    end: u64,
    storage: Storage,
    width: usize,
    /// The end of the packed run being decoded, if one is.
    run_end: Option<u64>,
    /// Values still to give.
    left: u64,
    /// A value's bytes not given yet (a read shorter than a value).
    pending: ([u8; 8], usize, usize),
}

impl TypedReader {
    /// A reader of the field's values, `width` bytes each.
    pub(crate) fn new(
        file: Arc<File>,
        (start, end): (u64, u64),
        storage: Storage,
        width: usize,
        values: u64,
    ) -> Self {
        TypedReader {
            c: FileCursor::new(file, start, end),
            end,
            storage,
            width,
            run_end: None,
            left: values,
            pending: ([0; 8], 0, 0),
        }
    }

    /// The next value, as the 8 little-endian bytes of its 64-bit form.
    fn next_value(&mut self) -> io::Result<[u8; 8]> {
        loop {
            if let Some(run_end) = self.run_end {
                if self.c.position() < run_end {
                    return self.decode(run_end);
                }
                self.run_end = None;
            }
            let f = next_field(&mut self.c, self.end)
                .map_err(|e| e.into_io())?
                .ok_or_else(changed)?;
            if f.number != self.storage.field() {
                continue;
            }
            match f.value {
                Value::Bytes { start, len } => {
                    self.c.seek(start);
                    self.run_end = Some(start + len);
                }
                Value::Varint(v) => return Ok(v.to_le_bytes()),
                Value::Fixed64(v) => return Ok(v.to_le_bytes()),
                Value::Fixed32(v) => return Ok(u64::from(v).to_le_bytes()),
            }
        }
    }

    /// One value of a packed run ending at `run_end`.
    fn decode(&mut self, run_end: u64) -> io::Result<[u8; 8]> {
        match self.storage.fixed() {
            Some(w) => {
                let mut b = [0u8; 8];
                self.c.read_exact(&mut b[..w])?;
                Ok(b)
            }
            None => varint(&mut self.c, run_end, "a packed value")
                .map(u64::to_le_bytes)
                .map_err(|e| e.into_io()),
        }
    }
}

/// The message changed since it was checked on open.
fn changed() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the model changed while being read: a typed field has fewer values than on open",
    )
}

impl Read for TypedReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let w = self.width;
        let (bytes, from, to) = &mut self.pending;
        if from < to {
            let k = (*to - *from).min(out.len());
            out[..k].copy_from_slice(&bytes[*from..*from + k]);
            *from += k;
            return Ok(k);
        }
        let mut n = 0;
        while self.left > 0 && out.len() - n >= w {
            let v = self.next_value()?;
            out[n..n + w].copy_from_slice(&v[..w]);
            n += w;
            self.left -= 1;
        }
        if n == 0 && self.left > 0 && !out.is_empty() {
            // A buffer smaller than one value: give its first bytes.
            let v = self.next_value()?;
            let k = out.len();
            out.copy_from_slice(&v[..k]);
            self.left -= 1;
            self.pending = (v, k, w);
            return Ok(k);
        }
        Ok(n)
    }
}
