//! A buffered reader of a file that knows where it is and can jump ahead
//! without reading: the formats whose metadata is interleaved with their
//! data (ONNX's protobuf, Flax's MessagePack) walk their structure with it,
//! stepping over each tensor's bytes instead of reading them.
//!
//! Layer: source, below the formats that use it.

use std::borrow::Borrow;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// Bytes read per refill: one positional read per 64 KiB of metadata.
const BUF: usize = 64 * 1024;

/// Reads `file` from any position up to `end`, with positional reads (the
/// handle's own offset is never used), through a buffer of 64 KiB.
pub(crate) struct FileCursor<F> {
    file: F,
    end: u64,
    /// The next byte's offset.
    pos: u64,
    buf: Vec<u8>,
    /// The offset of `buf[0]`.
    buf_at: u64,
}

impl<F: Borrow<File>> FileCursor<F> {
    /// A cursor at offset `at` of `file`, which is read no further than `end`.
    pub(crate) fn new(file: F, at: u64, end: u64) -> Self {
        FileCursor {
            file,
            end,
            pos: at,
            buf: Vec::new(),
            buf_at: 0,
        }
    }

    /// The next byte's offset.
    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    /// How far the cursor may read.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Moves to `at` (which the caller checked is at most [`Self::end`]);
    /// the buffer is kept when `at` is inside it.
    pub(crate) fn seek(&mut self, at: u64) {
        self.pos = at;
    }

    /// The next byte, or `None` at the end.
    pub(crate) fn byte(&mut self) -> io::Result<Option<u8>> {
        if self.pos >= self.end {
            return Ok(None);
        }
        if !self.buffered() {
            self.refill()?;
        }
        let b = self.buf[(self.pos - self.buf_at) as usize];
        self.pos += 1;
        Ok(Some(b))
    }

    fn buffered(&self) -> bool {
        self.pos >= self.buf_at && self.pos < self.buf_at + self.buf.len() as u64
    }

    /// Reads from `pos` into the buffer: at least one byte, as `pos < end`.
    fn refill(&mut self) -> io::Result<()> {
        let want = (self.end - self.pos).min(BUF as u64) as usize;
        self.buf.resize(want, 0);
        let got = crate::io_util::fill_at(self.file.borrow(), &mut self.buf, self.pos)?;
        self.buf.truncate(got);
        self.buf_at = self.pos;
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while being read",
            ));
        }
        Ok(())
    }
}

impl<F: Borrow<File>> Read for FileCursor<F> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.end || out.is_empty() {
            return Ok(0);
        }
        if !self.buffered() {
            // A read as large as the buffer skips it.
            if out.len() >= BUF {
                let want = (self.end - self.pos).min(out.len() as u64) as usize;
                let n = self.file.borrow().read_at(&mut out[..want], self.pos)?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                self.pos += n as u64;
                return Ok(n);
            }
            self.refill()?;
        }
        let from = (self.pos - self.buf_at) as usize;
        let n = (self.buf.len() - from).min(out.len());
        out[..n].copy_from_slice(&self.buf[from..from + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn reads_bytes_jumps_and_stops_at_its_end() {
        let data: Vec<u8> = (0..=255)
            .cycle()
            .take(200_000)
            .map(|b: u32| b as u8)
            .collect();
        let f = file(&data);
        let mut c = FileCursor::new(&f, 10, 150_000);
        assert_eq!(c.byte().unwrap(), Some(10));
        c.seek(100_000);
        let mut four = [0u8; 4];
        c.read_exact(&mut four).unwrap();
        assert_eq!(four, data[100_000..100_004]);
        assert_eq!(c.position(), 100_004);
        // Back inside the buffer, then a read larger than the buffer.
        c.seek(100_001);
        assert_eq!(c.byte().unwrap(), Some(data[100_001]));
        c.seek(20);
        let mut big = vec![0u8; BUF + 7];
        c.read_exact(&mut big).unwrap();
        assert_eq!(big, data[20..20 + BUF + 7]);
        c.seek(149_999);
        assert_eq!(c.byte().unwrap(), Some(data[149_999]));
        assert_eq!(c.byte().unwrap(), None);
        assert_eq!(c.read(&mut four).unwrap(), 0);
    }

    #[test]
    fn a_file_shorter_than_its_end_is_an_error() {
        let f = file(b"abc");
        let mut c = FileCursor::new(&f, 0, 10);
        let mut out = [0u8; 5];
        let e = c.read_exact(&mut out).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
