//! Reading HDF5 metadata: blocks read whole with positional reads, each
//! checked against the file's length (and a cap) before its buffer is
//! allocated, then parsed by [`Fields`], which knows the file offset of
//! every byte it reads so that errors name it.

use std::cell::Cell;
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::error::Hdf5Error;
use crate::{Error, Result};

/// The largest metadata block read at once (an object header chunk, a
/// local heap, a B-tree node): far above what h5py writes, and a bound on
/// what a header's claim can make us allocate.
pub(crate) const MAX_BLOCK: u64 = 16 << 20;

/// What every block read costs beyond its bytes: a structure of many tiny
/// blocks read again and again is bounded by their number too.
const READ_COST: u64 = 32;

/// The metadata listing one file may read, in all: 8 times its bytes plus
/// 64 MiB. A well-formed file's listing reads each block about once (a few
/// header prefixes twice); a hostile one that reaches the same blocks again
/// and again (B-tree nodes sharing children, groups linking one object or
/// one group many times, a chain of groups each linking the next twice:
/// 2^n paths) stops here, in time and in memory (what the listing holds is
/// copied from what it read), instead of multiplying.
#[derive(Debug)]
pub(crate) struct ReadBudget {
    spent: Cell<u64>,
    limit: u64,
}

impl ReadBudget {
    /// The budget of a file of `len` bytes.
    pub(crate) fn for_file(len: u64) -> Self {
        ReadBudget {
            spent: Cell::new(0),
            limit: len.saturating_mul(8).saturating_add(64 << 20),
        }
    }

    /// Charges `bytes` (read, or built from what was read) at `at`.
    pub(crate) fn charge(&self, bytes: u64, at: u64) -> Result<()> {
        let spent = self
            .spent
            .get()
            .saturating_add(bytes)
            .saturating_add(READ_COST);
        self.spent.set(spent);
        if spent > self.limit {
            let limit = self.limit;
            return Err(bad(Hdf5Error::Rereads { limit }, at));
        }
        Ok(())
    }
}

/// An error at a byte offset of the file.
pub(crate) fn bad(e: Hdf5Error, at: u64) -> Error {
    Error::new(e).at_offset(at)
}

/// A `what` of a `version` this reader does not read, at byte `at`.
pub(crate) fn unknown_version(what: &'static str, version: u8, at: u64) -> Error {
    bad(Hdf5Error::Version { what, version }, at)
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
    /// What the listing has read, and may.
    pub(crate) budget: &'f ReadBudget,
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

    /// Reads `len` bytes at `at`: inside the file, at most [`MAX_BLOCK`], and
    /// within the listing's [`ReadBudget`].
    pub(crate) fn block(&self, what: &'static str, at: u64, len: u64) -> Result<Fields<'f>> {
        self.check(what, at, len)?;
        if len > MAX_BLOCK {
            let e = Hdf5Error::Unsupported(format!("{what} of {len} bytes (over {MAX_BLOCK})"));
            return Err(bad(e, at));
        }
        self.budget.charge(len, at)?;
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

    /// The version byte here, which must be `version`: else the error of
    /// a `what` of another version, at that byte.
    pub(crate) fn version(&mut self, what: &'static str, version: u8) -> Result<()> {
        let at = self.at();
        match self.u8()? {
            v if v == version => Ok(()),
            v => Err(unknown_version(what, v, at)),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reading_the_same_block_again_and_again_stops_at_the_budget() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[0u8; 4096]).unwrap();
        let budget = ReadBudget::for_file(4096);
        let geo = Geometry {
            file: &f,
            len: 4096,
            offset_size: 8,
            length_size: 8,
            budget: &budget,
        };
        let limit = 8 * 4096 + (64 << 20);
        for _ in 0..limit / (4096 + READ_COST) {
            geo.block("a block", 0, 4096).unwrap();
        }
        let e = geo.block("a block", 0, 4096).err().unwrap();
        let refused = matches!(e.kind(), crate::ErrorKind::Hdf5(Hdf5Error::Rereads { limit: l }) if *l == limit);
        assert!(refused, "{e}");
        assert_eq!(e.offset(), Some(0));
    }
}
