//! One tensor whose bytes lie in a file, copied through one buffer with
//! positional reads: the element pipeline between (checksum, byte swap,
//! cast). Gathered batches and the spans' buffered route both copy each
//! tensor this way.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

use super::job::SpanJob;
use crate::block_cache::BlockCache;
use crate::sink::elements::{too_short, ChunkBuffer, Crc, Elements};
use crate::Result;

/// The read of the one-pass checked copy, and of the CRC thread.
pub(super) const CHECKED_CHUNK: usize = 128 * 1024;

/// Reads bytes `done..` of a tensor of `len` bytes, at `at` in `src`.
/// Small reads of tensors one after another go through `cache`; large
/// ones and one-off ones (`None`) straight to the file.
pub(super) fn read_exact_at(
    cache: Option<&mut BlockCache>,
    src: &File,
    buf: &mut [u8],
    at: u64,
    len: u64,
    done: u64,
) -> Result<()> {
    let read = match cache {
        Some(cache) => cache.read_exact_at(src, buf, at),
        None => src.read_exact_at(buf, at),
    };
    read.map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            // Say how many of the tensor's bytes there are, not where this
            // read of a chunk began.
            let there = src.metadata().map_or(0, |m| m.len().saturating_sub(at));
            too_short(len, done + there.min(buf.len() as u64))
        } else {
            crate::Error::io(e)
        }
    })
}

/// Copies `job` into `out`. Returns the bytes written and the cast's
/// overflows to infinity.
pub(super) fn copy_buffered(
    job: &SpanJob,
    out: &mut impl Write,
    buf: &mut ChunkBuffer,
    cache: &mut BlockCache,
    buffer_size: usize,
    progress: &mut impl FnMut(u64),
) -> Result<(u64, u64)> {
    let span = &job.span;
    let mut elements = Elements::new(job.out_len(), span.transform, job.cast);
    let (in_cap, out_cap) = elements.chunk_sizes(buffer_size);
    // A small member's npy header is read with its data, in one read.
    let prefix = span.crc.map_or(0, |c| span.offset - c.from);
    let joined = span.crc.is_some() && prefix <= 64 * 1024 && span.len as usize <= in_cap;
    let lead = if joined { prefix as usize } else { 0 };
    if let (true, Some(c)) = (joined, span.crc) {
        let both = buf.front(lead + span.len as usize);
        read_exact_at(Some(&mut *cache), &span.file, both, c.from, span.len, 0)?;
    }
    let (head, input, output) = buf.split(lead, in_cap, out_cap);
    if let Some(c) = span.crc {
        let hasher = match joined {
            true => {
                let mut h = crc32fast::Hasher::new();
                h.update(head);
                h
            }
            false => crc_until(&span.file, c.from, span.offset, &AtomicBool::new(false))?,
        };
        elements = elements.with_crc(Crc::new(hasher, c.expected));
    }
    let mut written = 0u64;
    while elements.left() > 0 {
        let n = elements.next_chunk(in_cap);
        let done = span.len - elements.left();
        // A joined member's one chunk is in already.
        if !joined {
            let at = span.offset + done;
            read_exact_at(
                Some(&mut *cache),
                &span.file,
                &mut input[..n],
                at,
                span.len,
                done,
            )?;
        }
        let bytes = elements.process(&mut input[..n], output)?;
        out.write_all(bytes)?;
        written += bytes.len() as u64;
        progress(bytes.len() as u64);
    }
    let overflowed = elements.finish()?;
    Ok((written, overflowed))
}

/// The checksum of the bytes from `from` to `to`: a member's whole range
/// beside its copy, or the part before the tensor (an npz member's npy
/// header) ahead of a one-pass copy; given up (with what it has) once
/// `stop` is set.
pub(super) fn crc_until(
    file: &File,
    from: u64,
    to: u64,
    stop: &AtomicBool,
) -> Result<crc32fast::Hasher> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; (to - from).min(CHECKED_CHUNK as u64) as usize];
    let mut at = from;
    while at < to && !stop.load(Ordering::Relaxed) {
        let n = ((to - at) as usize).min(buf.len());
        read_exact_at(None, file, &mut buf[..n], at, to - from, at - from)?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_check_reads_no_more() {
        // Reads from a file open for writing only fail: a check told to
        // stop before it starts never reads.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("member");
        std::fs::write(&path, [1u8; 4096]).unwrap();
        let unreadable = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(crc_until(&unreadable, 0, 4096, &AtomicBool::new(false)).is_err());
        let stopped = crc_until(&unreadable, 0, 4096, &AtomicBool::new(true));
        assert_eq!(stopped.unwrap().finalize(), crc32fast::hash(&[]));
    }
}
