//! Reading HDF5 metadata: blocks read whole with positional reads, each
//! checked against the file's length (and a cap) before its buffer is
//! allocated, then parsed by [`Fields`], which knows the file offset of
//! every byte it reads so that errors name it.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::error::Hdf5Error;
use crate::{Error, Result};

/// The largest metadata block read at once (an object header chunk, a
/// local heap, a B-tree node): far above what h5py writes, and a bound on
/// what a header's claim can make us allocate.
pub(crate) const MAX_BLOCK: u64 = 16 << 20;

/// An error at a byte offset of the file.
pub(crate) fn bad(e: Hdf5Error, at: u64) -> Error {
    Error::new(e).at_offset(at)
}

/// A malformed structure at `at`.
pub(crate) fn malformed(what: impl Into<String>, at: u64) -> Error {
    bad(Hdf5Error::Malformed(what.into()), at)
}

/// The file, its length, and the sizes of its addresses and lengths.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry<'f> {
    pub(crate) file: &'f File,
    pub(crate) len: u64,
    /// Bytes of an address (the superblock's "size of offsets").
    pub(crate) offset_size: u8,
    /// Bytes of a length.
    pub(crate) length_size: u8,
}

impl<'f> Geometry<'f> {
    /// Checks `len` bytes at `at` are inside the file.
    pub(crate) fn check(&self, what: &'static str, at: u64, len: u64) -> Result<()> {
        match at.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(self.past_end(what, at, len)),
        }
    }

    /// `len` bytes at `at` that run past the end of the file.
    fn past_end(&self, what: &'static str, at: u64, len: u64) -> Error {
        let file_len = self.len;
        bad(
            Hdf5Error::PastEnd {
                what,
                at,
                len,
                file_len,
            },
            at,
        )
    }

    /// Reads `len` bytes at `at`: inside the file and at most [`MAX_BLOCK`].
    pub(crate) fn block(&self, what: &'static str, at: u64, len: u64) -> Result<Fields<'f>> {
        self.check(what, at, len)?;
        if len > MAX_BLOCK {
            let e = Hdf5Error::Unsupported(format!("{what} of {len} bytes (over {MAX_BLOCK})"));
            return Err(bad(e, at));
        }
        let mut buf = vec![0u8; len as usize];
        self.file.read_exact_at(&mut buf, at)?;
        Ok(Fields::new(buf, at, what, *self))
    }

    /// Reads up to `len` bytes at `at`, fewer where the file ends first.
    pub(crate) fn block_upto(&self, what: &'static str, at: u64, len: u64) -> Result<Fields<'f>> {
        if at >= self.len {
            return Err(self.past_end(what, at, len));
        }
        self.block(what, at, len.min(self.len - at))
    }

    /// Whether `addr` is the undefined address (all bits set).
    pub(crate) fn undefined(&self, addr: u64) -> bool {
        let bits = 8 * u32::from(self.offset_size);
        addr == u64::MAX >> (64 - bits)
    }
}

/// A block of metadata being parsed from its start.
pub(crate) struct Fields<'f> {
    buf: Vec<u8>,
    /// The file offset of `buf[0]`.
    base: u64,
    pos: usize,
    what: &'static str,
    pub(crate) geo: Geometry<'f>,
}

impl<'f> Fields<'f> {
    /// Fields over `buf`, which was read at `base`.
    pub(crate) fn new(buf: Vec<u8>, base: u64, what: &'static str, geo: Geometry<'f>) -> Self {
        Fields {
            buf,
            base,
            pos: 0,
            what,
            geo,
        }
    }

    /// The file offset of the next byte.
    pub(crate) fn at(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes left.
    pub(crate) fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.left() {
            return Err(bad(Hdf5Error::Truncated(self.what), self.at()));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Steps over `n` bytes.
    pub(crate) fn skip(&mut self, n: usize) -> Result<()> {
        self.bytes(n).map(|_| ())
    }

    /// A little-endian unsigned integer of `n` (1 to 8) bytes.
    pub(crate) fn uint(&mut self, n: usize) -> Result<u64> {
        let b = self.bytes(n)?;
        Ok(b.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        self.uint(2).map(|v| v as u16)
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        self.uint(4).map(|v| v as u32)
    }

    /// An address ("size of offsets" bytes).
    pub(crate) fn addr(&mut self) -> Result<u64> {
        self.uint(usize::from(self.geo.offset_size))
    }

    /// A length ("size of lengths" bytes).
    pub(crate) fn length(&mut self) -> Result<u64> {
        self.uint(usize::from(self.geo.length_size))
    }

    /// Checks the next bytes are `sig`.
    pub(crate) fn signature(&mut self, sig: &'static str) -> Result<()> {
        let at = self.at();
        if self.bytes(sig.len())? != sig.as_bytes() {
            return Err(bad(Hdf5Error::Signature(sig), at));
        }
        Ok(())
    }

    /// Every byte of the block, wherever the position is.
    pub(crate) fn peek_all(&self) -> &[u8] {
        &self.buf
    }

    /// The bytes from the current position to the end.
    pub(crate) fn rest(&mut self) -> &[u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// A sub-block of the next `n` bytes, parsed on its own.
    pub(crate) fn sub(&mut self, n: usize, what: &'static str) -> Result<Fields<'f>> {
        let at = self.at();
        let buf = self.bytes(n)?.to_vec();
        Ok(Fields::new(buf, at, what, self.geo))
    }
}
