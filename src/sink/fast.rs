//! The file-to-file fast path: tensors whose bytes lie in files are copied
//! with one memory copy (a mapped window of the source handed to `write`,
//! see [`super::mapped`]) where nothing must change, and otherwise through
//! one bounded buffer with positional reads. Synchronous: the caller runs a
//! batch of tensors on the blocking pool in one trip, so a model of a
//! million small tensors costs a million syscalls at most, not a million
//! task hand-offs. Adjacent ranges of one file merge into one copy.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::iter::Peekable;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::elements::{too_short, ChunkBuffer, Crc, Elements};
use super::gather::{batches, copy_batches_parallel, copy_gathered, Gathered};
use super::mapped::copy_mapped;
use crate::block_cache::BlockCache;
use crate::cast::Cast;
use crate::source::FileSpan;
use crate::{Error, ErrorKind, Result};

/// A checksummed tensor smaller than this is copied the way `cp` copies: a
/// read of [`CHECKED_CHUNK`] bytes, the CRC over them while they are in the
/// core's cache, a write of the same buffer. A larger one is copied like a
/// verbatim one while a second thread reads the same bytes for the CRC: two
/// cores, and the copy itself as fast as an unchecked one.
const CHECK_BESIDE_MIN: u64 = 1 << 20;

/// The read of the one-pass checked copy, and of the CRC thread.
const CHECKED_CHUNK: usize = 128 * 1024;

/// A run of verbatim bytes shorter than this goes through the buffer rather
/// than the mapped copy: a mapping and a syscall per small tensor is its
/// whole cost.
const KERNEL_COPY_MIN: u64 = 64 * 1024;

/// One tensor to copy: its bytes, and the cast to apply.
#[derive(Debug, Clone)]
pub(crate) struct SpanJob {
    pub(crate) span: FileSpan,
    pub(crate) cast: Option<Cast>,
}

impl SpanJob {
    /// Nothing changes on the way and nothing must be checked: the kernel
    /// may copy it from a mapping.
    fn verbatim(&self) -> bool {
        let elements = Elements::new(self.out_len(), self.span.transform, self.cast);
        self.span.crc.is_none() && elements.verbatim()
    }

    /// Checksummed, and otherwise copied unchanged, straight to the file.
    fn checked_copy(&self) -> bool {
        let elements = Elements::new(self.out_len(), self.span.transform, self.cast);
        self.span.crc.is_some() && elements.verbatim() && self.span.len >= KERNEL_COPY_MIN
    }

    pub(super) fn out_len(&self) -> u64 {
        match self.cast {
            Some(c) => self.span.len / c.in_width() as u64 * c.out_width() as u64,
            None => self.span.len,
        }
    }
}

/// Bytes copied by [`copy_spans`], and the casts' overflows to infinity as
/// (job index, elements).
pub(crate) type Copied = (u64, Vec<(usize, u64)>);

/// Copies `jobs` in order to `out` at its current offset. On error, returns
/// the index of the job that failed with the error.
pub(crate) fn copy_spans(
    out: &File,
    out_name: &str,
    jobs: &[SpanJob],
    buffer_size: usize,
    mut progress: impl FnMut(u64),
) -> std::result::Result<Copied, (usize, Error)> {
    let on_out = |e: Error| match e.kind() {
        ErrorKind::Io(io) if output_side(io) => e.with_output(out_name),
        _ => e,
    };
    let mut buf = ChunkBuffer::default();
    // Small tensors are read a block at a time, gathered in file order into
    // `batch`, laid out in plan order.
    let mut cache = BlockCache::default();
    let mut batch = Vec::new();
    // Small tensors' bytes gather here into large writes.
    let mut w = io::BufWriter::with_capacity(buffer_size.clamp(64 * 1024, 1 << 20), out);
    let mut written = 0u64;
    let mut overflows = Vec::new();
    let mut runs = kernel_runs(jobs).into_iter().peekable();
    let mut i = 0;
    while i < jobs.len() {
        if runs.peek().is_some_and(|run| run.start == i) {
            let run = runs.next().expect("peeked");
            // The kernel writes at the file's offset: our buffered bytes go first.
            w.flush().map_err(|e| (i, on_out(Error::io(e))))?;
            let len: u64 = jobs[run.clone()].iter().map(|j| j.span.len).sum();
            let (file, offset) = (&jobs[i].span.file, jobs[i].span.offset);
            copy_verbatim(file, offset, len, out, &mut progress).map_err(|(e, done)| {
                let (k, before) = locate(jobs, i, done);
                (k, on_out(per_tensor(e, jobs[k].span.len, done - before)))
            })?;
            written += len;
            i = run.end;
        } else if jobs[i].checked_copy() {
            // Straight to the file, not through `w`.
            w.flush().map_err(|e| (i, on_out(Error::io(e))))?;
            written += copy_checked(&jobs[i], out, &mut buf, &mut cache, &mut progress)
                .map_err(|e| (i, on_out(e)))?;
            i += 1;
        } else if let stretch @ [_, ..] =
            &batches(jobs, i, stop_at(&mut runs), |j| !j.checked_copy())[..]
        {
            let gathered = copy_stretch(
                jobs,
                stretch,
                out,
                &mut w,
                &mut batch,
                &mut buf,
                &mut cache,
                buffer_size,
            );
            let (bytes, over) = gathered.map_err(|(k, e)| (k, on_out(e)))?;
            overflows.extend(over);
            written += bytes;
            progress(bytes);
            i = stretch[stretch.len() - 1].end;
        } else {
            let (n, overflowed) = copy_buffered(
                &jobs[i],
                &mut w,
                &mut buf,
                &mut cache,
                buffer_size,
                &mut progress,
            )
            .map_err(|e| (i, on_out(e)))?;
            if overflowed > 0 {
                overflows.push((i, overflowed));
            }
            written += n;
            i += 1;
        }
    }
    w.flush()
        .map_err(|e| (jobs.len() - 1, on_out(Error::io(e))))?;
    Ok((written, overflows))
}

/// Where the next kernel run begins: batches stop there.
fn stop_at(runs: &mut Peekable<std::vec::IntoIter<Range<usize>>>) -> usize {
    runs.peek().map_or(usize::MAX, |r| r.start)
}

/// Copies a stretch of batches of small tensors: one through `w`, several
/// side by side at their offsets in `out` (after what `w` holds, and
/// leaving `out`'s offset past them, as writing through `w` would).
#[allow(clippy::too_many_arguments)]
fn copy_stretch(
    jobs: &[SpanJob],
    stretch: &[Range<usize>],
    mut out: &File,
    w: &mut io::BufWriter<&File>,
    batch: &mut Vec<u8>,
    buf: &mut ChunkBuffer,
    cache: &mut BlockCache,
    buffer_size: usize,
) -> Gathered {
    let (first, last) = (stretch[0].start, stretch[stretch.len() - 1].end);
    if let [only] = stretch {
        return copy_gathered(jobs, only.clone(), w, batch, buf, cache, buffer_size);
    }
    let io_at = |e: io::Error| (first, Error::io(e));
    w.flush().map_err(io_at)?;
    let at = out.stream_position().map_err(io_at)?;
    let (bytes, overflows) = copy_batches_parallel(jobs, stretch, out, at, buffer_size)?;
    out.seek(io::SeekFrom::Start(at + bytes))
        .map_err(|e| (last - 1, Error::io(e)))?;
    Ok((bytes, overflows))
}

/// The runs of jobs the kernel copies: verbatim tensors back to back in one
/// file, of [`KERNEL_COPY_MIN`] bytes or more together. A shorter run
/// (tensors scattered in canonical order) costs more in syscalls than in
/// bytes: it goes through the buffer.
fn kernel_runs(jobs: &[SpanJob]) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < jobs.len() {
        let end = verbatim_run(jobs, i);
        let len: u64 = jobs[i..end].iter().map(|j| j.span.len).sum();
        if end > i && len >= KERNEL_COPY_MIN {
            runs.push(i..end);
        }
        i = end.max(i + 1);
    }
    runs
}

/// The end of the run of verbatim jobs from `start` that lie back to back in one file.
fn verbatim_run(jobs: &[SpanJob], start: usize) -> usize {
    if !jobs[start].verbatim() {
        return start;
    }
    let mut end = start + 1;
    while end < jobs.len() {
        let (prev, next) = (&jobs[end - 1].span, &jobs[end]);
        let adjacent =
            Arc::ptr_eq(&prev.file, &next.span.file) && prev.offset + prev.len == next.span.offset;
        if !(adjacent && next.verbatim()) {
            break;
        }
        end += 1;
    }
    end
}

/// Which job of the run starting at `start` holds byte `done` of the run,
/// and how many bytes of the run come before that job.
fn locate(jobs: &[SpanJob], start: usize, done: u64) -> (usize, u64) {
    let mut before = 0;
    for (k, j) in jobs[start..].iter().enumerate() {
        if done < before + j.span.len {
            return (start + k, before);
        }
        before += j.span.len;
    }
    let last = jobs.len() - 1;
    (last, before - jobs[last].span.len)
}

/// A merged run's shortfall, restated for the one tensor it fell in.
fn per_tensor(e: Error, len: u64, done_in_tensor: u64) -> Error {
    match e.kind() {
        ErrorKind::TensorTooShort { .. } => too_short(len, done_in_tensor),
        _ => e,
    }
}

/// Errors that a write causes, not a read: they belong to the output.
fn output_side(e: &io::Error) -> bool {
    use rustix::io::Errno;
    let raw = e.raw_os_error();
    [Errno::FBIG, Errno::NOSPC, Errno::DQUOT, Errno::ROFS]
        .iter()
        .any(|n| raw == Some(n.raw_os_error()))
}

/// A checksummed member copied unchanged. Returns the bytes written.
fn copy_checked(
    job: &SpanJob,
    out: &File,
    buf: &mut ChunkBuffer,
    cache: &mut BlockCache,
    progress: &mut impl FnMut(u64),
) -> Result<u64> {
    if job.span.len >= CHECK_BESIDE_MIN {
        if let Some(result) = copy_with_crc_beside(&job.span, out, progress) {
            return result;
        }
    }
    let mut direct = out;
    // Verbatim: no cast, so nothing can overflow.
    copy_buffered(job, &mut direct, buf, cache, CHECKED_CHUNK, progress).map(|(n, _)| n)
}

/// The mapped copy of a member while a second thread computes its CRC;
/// `None` when no thread can be had.
fn copy_with_crc_beside(
    span: &FileSpan,
    out: &File,
    progress: &mut impl FnMut(u64),
) -> Option<Result<u64>> {
    let crc = span.crc?;
    let end = span.offset + span.len;
    // Set when the copy fails: its error is the answer, so the check stops
    // instead of reading the rest of a member of gigabytes.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let checker = std::thread::Builder::new()
            .name("crc".into())
            .spawn_scoped(s, || crc_until(&span.file, crc.from, end, &stop))
            .ok()?;
        let copied = copy_verbatim(&span.file, span.offset, span.len, out, progress);
        if copied.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        // Joined here, not left to the scope: the thread is gone when we return.
        let hasher = checker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // The copy's error comes first: it says where the bytes ran out.
        let checked = copied
            .map_err(|(e, _)| e)
            .and_then(|()| Crc::new(hasher?, crc.expected).verify());
        Some(checked.map(|()| span.len))
    })
}

/// A mapped copy; a file that cannot be mapped is read and written.
/// On error also returns how many bytes were done, to find the tensor.
fn copy_verbatim(
    src: &File,
    offset: u64,
    len: u64,
    out: &File,
    progress: &mut impl FnMut(u64),
) -> std::result::Result<(), (Error, u64)> {
    match copy_mapped(src, offset, len, out, progress)? {
        true => Ok(()),
        false => copy_by_hand(src, offset, len, out, progress),
    }
}

fn copy_by_hand(
    src: &File,
    offset: u64,
    len: u64,
    mut out: &File,
    progress: &mut impl FnMut(u64),
) -> std::result::Result<(), (Error, u64)> {
    let mut buf = vec![0u8; (len.min(4 << 20)) as usize];
    let mut done = 0u64;
    while done < len {
        let n = ((len - done) as usize).min(buf.len());
        read_exact_at(None, src, &mut buf[..n], offset + done, len, done).map_err(|e| (e, done))?;
        out.write_all(&buf[..n]).map_err(|e| (Error::io(e), done))?;
        done += n as u64;
        progress(n as u64);
    }
    Ok(())
}

/// Reads bytes `done..` of a tensor of `len` bytes, at `at` in `src`.
/// Small reads of tensors one after another go through `cache`; large
/// ones and one-off ones (`None`) straight to the file.
fn read_exact_at(
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
            Error::io(e)
        }
    })
}

/// Positional reads into one buffer, then the element pipeline (checksum,
/// byte swap, cast), then a write. Returns the bytes written and the cast's
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
            false => crc_of(&span.file, c.from, span.offset)?,
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
/// header) ahead of a one-pass copy.
fn crc_of(file: &File, from: u64, to: u64) -> Result<crc32fast::Hasher> {
    crc_until(file, from, to, &AtomicBool::new(false))
}

/// [`crc_of`], giving up (with what it has) once `stop` is set.
fn crc_until(file: &File, from: u64, to: u64, stop: &AtomicBool) -> Result<crc32fast::Hasher> {
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
    use crate::source::CrcCheck;
    use crate::transform::Transform;

    /// Member sizes: one copied in one pass, one copied beside its CRC thread.
    const SIZES: [usize; 2] = [2 * CHECKED_CHUNK + 4096, CHECK_BESIDE_MIN as usize + 4096];

    /// Three checksummed members of `size` bytes, a gap between each (so
    /// each is a kernel run of its own); `bad` ones get a wrong CRC; the
    /// file is cut to `cut` bytes.
    fn archive(size: usize, bad: &[usize], cut: Option<u64>) -> (Vec<SpanJob>, Vec<u8>) {
        let mut file = tempfile::tempfile().unwrap();
        let (mut bytes, mut jobs, mut data) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..3 {
            bytes.extend_from_slice(b"local header");
            let member: Vec<u8> = (0..size).map(|i| (i * 7 + k * 13) as u8).collect();
            let offset = bytes.len() as u64;
            let crc = crc32fast::hash(&member) ^ if bad.contains(&k) { 1 } else { 0 };
            bytes.extend_from_slice(&member);
            data.extend_from_slice(&member);
            jobs.push((offset, crc));
        }
        bytes.truncate(cut.unwrap_or(bytes.len() as u64) as usize);
        file.write_all(&bytes).unwrap();
        let file = Arc::new(file);
        let jobs = jobs
            .into_iter()
            .map(|(offset, expected)| SpanJob {
                span: FileSpan {
                    file: file.clone(),
                    offset,
                    len: size as u64,
                    transform: Transform::Identity,
                    crc: Some(CrcCheck {
                        expected,
                        from: offset,
                    }),
                },
                cast: None,
            })
            .collect();
        (jobs, data)
    }

    fn copy(jobs: &[SpanJob]) -> (std::result::Result<u64, (usize, Error)>, Vec<u8>) {
        use std::io::{Read, Seek};
        let mut out = tempfile::tempfile().unwrap();
        let result = copy_spans(&out, "out", jobs, 1 << 20, |_| {}).map(|(n, _)| n);
        let mut bytes = Vec::new();
        out.rewind().unwrap();
        out.read_to_end(&mut bytes).unwrap();
        (result, bytes)
    }

    #[test]
    fn checked_members_are_copied_whole_and_not_merged() {
        for size in SIZES {
            let (jobs, data) = archive(size, &[], None);
            assert!(kernel_runs(&jobs).is_empty());
            assert!(jobs.iter().all(SpanJob::checked_copy));
            let (result, bytes) = copy(&jobs);
            assert_eq!(result.unwrap(), data.len() as u64);
            assert_eq!(bytes, data);
        }
    }

    #[test]
    fn a_stopped_check_reads_no_more() {
        // Reads from a file open for writing only fail: a check told to
        // stop before it starts never reads.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("member");
        std::fs::write(&path, [1u8; 4096]).unwrap();
        let unreadable = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(crc_of(&unreadable, 0, 4096).is_err());
        let stopped = crc_until(&unreadable, 0, 4096, &AtomicBool::new(true));
        assert_eq!(stopped.unwrap().finalize(), crc32fast::hash(&[]));
    }

    #[test]
    fn the_first_bad_checksum_is_the_error() {
        for size in SIZES {
            for bad in [vec![0], vec![1], vec![2], vec![1, 2]] {
                let (jobs, _) = archive(size, &bad, None);
                let (i, e) = copy(&jobs).0.unwrap_err();
                assert_eq!(i, bad[0], "{bad:?}");
                assert!(matches!(e.kind(), ErrorKind::CrcMismatch { .. }), "{e}");
            }
        }
    }

    #[test]
    fn a_short_copy_before_a_bad_checksum_is_the_error() {
        // Member 0 is cut short in the file; member 1's CRC is wrong too.
        for size in SIZES {
            let (jobs, _) = archive(size, &[], None);
            let cut = jobs[0].span.offset + 10;
            let (jobs, _) = archive(size, &[1], Some(cut));
            let (i, e) = copy(&jobs).0.unwrap_err();
            assert_eq!(i, 0);
            let expected = size as u64;
            assert!(
                matches!(e.kind(), ErrorKind::TensorTooShort { expected: x, actual: 10 } if *x == expected),
                "{e}"
            );
        }
    }

    #[test]
    fn a_bad_checksum_before_a_short_copy_is_the_error() {
        // Member 0's CRC is wrong; member 2 is cut short.
        for size in SIZES {
            let (jobs, _) = archive(size, &[], None);
            let cut = jobs[2].span.offset + 10;
            let (jobs, _) = archive(size, &[0], Some(cut));
            let (i, e) = copy(&jobs).0.unwrap_err();
            assert_eq!(i, 0);
            assert!(matches!(e.kind(), ErrorKind::CrcMismatch { .. }), "{e}");
        }
    }
}
