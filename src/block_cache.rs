//! Small positional reads served from one block read ahead. An archive of
//! 20,000 small members was read with six `pread`s a member (its local
//! header twice, its npy header twice, its bytes twice: 120,048 in all, by
//! `strace`); through this cache it is one `pread` a block.
//!
//! Read-ahead grows while the reader goes on forward, to a block, and stops
//! when it jumps (tensors copied in name order from an archive in another
//! order): a jump reads just what was asked for, which for a small member is
//! its npy header and bytes together.
//!
//! Reads keep `pread`'s meaning: they may come back short only where the
//! file ends, and a file that changes under us is seen as it is when the
//! block is read. Large reads bypass the cache.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::io_util::{fill_at, fill_with};

/// Bytes read ahead at once by a reader moving forward; the most a
/// [`BlockCache::prefetch`] reads.
pub(crate) const BLOCK: usize = 128 * 1024;

/// Bytes read at least by a reader going on forward; also how far past
/// the last read a reader may start and still be going on (a zip local
/// header lies between two members).
pub(crate) const SMALL: usize = 4096;

/// One block of one file, read ahead.
#[derive(Debug, Default)]
pub(crate) struct BlockCache {
    block: Vec<u8>,
    /// The file the block is from, by address: the cache lives for one
    /// pass over files that all outlive it, so no two share an address.
    owner: usize,
    start: u64,
    len: usize,
    /// The block was cut short by the end of the file.
    at_end: bool,
}

impl BlockCache {
    /// Like [`FileExt::read_at`]: up to `buf.len()` bytes of `file` from
    /// `at`, fewer only at the end of the file.
    pub(crate) fn read_at(&mut self, file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
        if !self.holds(file, at, buf.len()) {
            if buf.len() > BLOCK / 2 {
                return file.read_at(buf, at);
            }
            self.refill(file, at, buf.len())?;
        }
        let from = (at - self.start) as usize;
        let n = buf.len().min(self.len - from);
        buf[..n].copy_from_slice(&self.block[from..from + n]);
        Ok(n)
    }

    /// Like [`FileExt::read_exact_at`], with the same `UnexpectedEof`.
    pub(crate) fn read_exact_at(&mut self, file: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
        let got = fill_with(buf, |rest, done| self.read_at(file, rest, at + done as u64))?;
        match got == buf.len() {
            true => Ok(()),
            false => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }

    /// Reads `[at, at + len)` of `file` (at most a block) in one `pread`,
    /// unless the cache holds it already: for a reader that knows which
    /// bytes it wants next (a batch of small members in file order), where
    /// read-ahead would guess. A failure is not reported here: it leaves
    /// the cache empty, and the read that follows meets it again and says
    /// what it was reading.
    pub(crate) fn prefetch(&mut self, file: &File, at: u64, len: usize) {
        let len = len.min(BLOCK);
        if !self.holds(file, at, len) {
            let _ = self.refill_exactly(file, at, len);
        }
    }

    /// Bytes `[at, at + len)` of `file` as a reader through this cache.
    pub(crate) fn range<'c>(&'c mut self, file: &'c File, at: u64, len: u64) -> CachedRange<'c> {
        CachedRange {
            cache: self,
            file,
            pos: at,
            end: at.saturating_add(len),
        }
    }

    fn holds(&self, file: &File, at: u64, n: usize) -> bool {
        let end = self.start + self.len as u64;
        let inside = self.owner == address(file) && at >= self.start;
        // A block cut short ends where the file did: what it lacks is not there.
        inside && (at.saturating_add(n as u64) <= end || self.at_end && at <= end)
    }

    /// Reads from `at`, at least `need` bytes: twice the last read, up to
    /// a block, if the reader went on past the end of the last read; just
    /// `need` if it jumped.
    fn refill(&mut self, file: &File, at: u64, need: usize) -> io::Result<()> {
        let end = self.start + self.len as u64;
        // Going on: within the last read, or a header's length past it.
        let forward = self.owner == address(file)
            && at >= self.start
            && at <= end.saturating_add(SMALL as u64);
        let want = match forward {
            true => (2 * self.len).clamp(SMALL, BLOCK).max(need),
            false => need,
        };
        self.refill_exactly(file, at, want)
    }

    fn refill_exactly(&mut self, file: &File, at: u64, want: usize) -> io::Result<()> {
        self.block.resize(want.max(self.block.len()), 0);
        // Forget the old block first: a failed read leaves nothing stale.
        (self.owner, self.start, self.len) = (address(file), at, 0);
        let block = &mut self.block[..want];
        self.len = fill_at(file, block, at)?;
        self.at_end = self.len < want;
        Ok(())
    }
}

fn address(file: &File) -> usize {
    file as *const File as usize
}

/// A range of a file read through a [`BlockCache`].
pub(crate) struct CachedRange<'c> {
    cache: &'c mut BlockCache,
    file: &'c File,
    pos: u64,
    end: u64,
}

impl io::Read for CachedRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (self.end - self.pos).min(buf.len() as u64) as usize;
        let n = self.cache.read_at(self.file, &mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn file(len: usize) -> (File, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 253) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&bytes).unwrap();
        (f, bytes)
    }

    #[test]
    fn reads_agree_with_pread_everywhere() {
        let (f, bytes) = file(3 * BLOCK + 100);
        let mut cache = BlockCache::default();
        for (at, n) in [
            (0, 10),
            (5, 100),
            (BLOCK - 3, 10),
            (2 * BLOCK, BLOCK / 2),
            (3 * BLOCK + 90, 10),
        ] {
            let mut buf = vec![0; n];
            cache.read_exact_at(&f, &mut buf, at as u64).unwrap();
            assert_eq!(buf, &bytes[at..at + n], "at {at}");
        }
        let mut big = vec![0; BLOCK];
        cache.read_exact_at(&f, &mut big, 7).unwrap();
        assert_eq!(big, &bytes[7..7 + BLOCK]);
    }

    #[test]
    fn the_end_of_the_file_is_a_short_read_then_eof() {
        let (f, bytes) = file(1000);
        let mut cache = BlockCache::default();
        let mut buf = [0u8; 50];
        assert_eq!(cache.read_at(&f, &mut buf, 980).unwrap(), 20);
        assert_eq!(&buf[..20], &bytes[980..]);
        assert_eq!(cache.read_at(&f, &mut buf, 1000).unwrap(), 0);
        let e = cache.read_exact_at(&f, &mut buf, 990).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// A cache that counts the bytes it asked the file for.
    fn reads_of(pattern: &[(u64, usize)]) -> usize {
        let (f, bytes) = file(4 * BLOCK);
        let mut cache = BlockCache::default();
        let mut refills = 0;
        for &(at, n) in pattern {
            let mut buf = vec![0; n];
            if !cache.holds(&f, at, n) {
                refills += 1;
            }
            cache.read_exact_at(&f, &mut buf, at).unwrap();
            assert_eq!(buf, &bytes[at as usize..at as usize + n]);
        }
        refills
    }

    #[test]
    fn a_reader_moving_forward_reads_a_block_at_a_time() {
        // 200 small reads 1,000 bytes apart: reads double from a small one
        // to a block, then go on a block at a time.
        let forward: Vec<(u64, usize)> = (0..200).map(|i| (i * 1000, 100)).collect();
        let ramp = (BLOCK / SMALL).ilog2() as usize + 1;
        let refills = reads_of(&forward);
        assert!(refills <= ramp + 200 * 1000 / BLOCK, "{refills}");
        // Reads that skip ahead by more than a header's length are jumps.
        let skipping: Vec<(u64, usize)> = (0..20).map(|i| (i * 3 * SMALL as u64, 100)).collect();
        assert_eq!(reads_of(&skipping), 20);
    }

    #[test]
    fn a_reader_that_jumps_reads_just_what_it_asks_for() {
        // Two interleaved streams far apart, a member read whole each time:
        // one read a member, of its bytes alone.
        let jumping: Vec<(u64, usize)> = (0..50u64)
            .map(|i| match i % 2 {
                0 => (i * 500, 364),
                _ => (3 * BLOCK as u64 + i * 500, 364),
            })
            .collect();
        assert_eq!(reads_of(&jumping), 50);
        let mut cache = BlockCache::default();
        let (f, _) = file(BLOCK);
        cache.read_exact_at(&f, &mut [0; 364], 5000).unwrap();
        assert_eq!(cache.len, 364);
    }

    #[test]
    fn a_prefetched_range_serves_every_read_inside_it() {
        let (f, bytes) = file(4 * BLOCK);
        let mut cache = BlockCache::default();
        cache.prefetch(&f, 1000, 3 * BLOCK);
        assert_eq!((cache.start, cache.len), (1000, BLOCK), "at most a block");
        // Reads inside, a large one too, come from the block.
        for (at, n) in [(1000, 10), (5000, 300), (1000, BLOCK)] {
            assert!(cache.holds(&f, at, n));
            let mut buf = vec![0; n];
            cache.read_exact_at(&f, &mut buf, at).unwrap();
            assert_eq!(buf, &bytes[at as usize..at as usize + n]);
        }
        assert_eq!((cache.start, cache.len), (1000, BLOCK), "no read since");
        // Prefetching what it holds reads nothing; past the end, what is there.
        cache.prefetch(&f, 2000, 100);
        assert_eq!(cache.start, 1000);
        cache.prefetch(&f, 4 * BLOCK as u64 - 10, 100);
        let mut buf = [0u8; 20];
        assert_eq!(
            cache.read_at(&f, &mut buf, 4 * BLOCK as u64 - 10).unwrap(),
            10
        );
        assert_eq!(buf[..10], bytes[4 * BLOCK - 10..]);
    }

    #[test]
    fn another_file_is_never_served_from_the_block() {
        let (a, _) = file(1000);
        let (b, bytes_b) = file(2000);
        let mut cache = BlockCache::default();
        let mut buf = [0u8; 16];
        cache.read_exact_at(&a, &mut buf, 0).unwrap();
        cache.read_exact_at(&b, &mut buf, 1500).unwrap();
        assert_eq!(buf, bytes_b[1500..1516]);
    }

    #[test]
    fn a_range_reads_only_its_bytes() {
        let (f, bytes) = file(5000);
        let mut cache = BlockCache::default();
        let mut out = Vec::new();
        cache.range(&f, 100, 300).read_to_end(&mut out).unwrap();
        assert_eq!(out, &bytes[100..400]);
    }
}
