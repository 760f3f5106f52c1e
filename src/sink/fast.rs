//! The file-to-file fast path: tensors whose bytes lie in files are copied
//! by the kernel (`copy_file_range`) where nothing must change, and
//! otherwise through one bounded buffer with positional reads. Synchronous:
//! the caller runs a batch of tensors on the blocking pool in one trip, so
//! a model of a million small tensors costs a million syscalls at most, not
//! a million task hand-offs. Adjacent ranges of one file merge into one copy.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::elements::{ChunkBuffer, Crc, Elements};
use crate::cast::Cast;
use crate::source::FileSpan;
use crate::{Error, ErrorKind, Result};

/// Below this a checksummed tensor is copied through the buffer instead.
const CONCURRENT_CRC_MIN: u64 = 1 << 20;

/// A run of verbatim bytes shorter than this goes through the buffer rather
/// than the kernel: a syscall per small tensor is its whole cost.
const KERNEL_COPY_MIN: u64 = 64 * 1024;

/// One tensor to copy: its bytes, and the cast to apply.
#[derive(Debug, Clone)]
pub(crate) struct SpanJob {
    pub(crate) span: FileSpan,
    pub(crate) cast: Option<Cast>,
}

impl SpanJob {
    /// Nothing changes on the way: the kernel may copy it. A checksummed
    /// member large enough is checked by a second thread reading the same
    /// (cached) bytes while the kernel copies; a small one goes through the
    /// buffer, where one read serves both.
    fn verbatim(&self) -> bool {
        let crc_ok = self.span.crc.is_none() || self.span.len >= CONCURRENT_CRC_MIN;
        let elements = Elements::new(self.out_len(), self.span.transform, self.cast);
        crc_ok && elements.verbatim()
    }

    fn out_len(&self) -> u64 {
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
    // Small tensors' bytes gather here into large writes.
    let mut w = io::BufWriter::with_capacity(buffer_size.clamp(64 * 1024, 1 << 20), out);
    let mut written = 0u64;
    let mut overflows = Vec::new();
    let mut i = 0;
    while i < jobs.len() {
        let run = verbatim_run(jobs, i);
        let len: u64 = jobs[i..run].iter().map(|j| j.span.len).sum();
        if run > i && len < KERNEL_COPY_MIN {
            // A small run (tensors scattered in canonical order) costs more
            // in syscalls than in bytes: gathered through the buffer.
            for (k, job) in jobs.iter().enumerate().take(run).skip(i) {
                // Verbatim: no cast, so nothing can overflow.
                let (n, _) = copy_buffered(job, &mut w, &mut buf, buffer_size, &mut progress)
                    .map_err(|e| (k, on_out(e)))?;
                written += n;
            }
            i = run;
        } else if run > i {
            // The kernel writes at the file's offset: our buffered bytes go first.
            w.flush().map_err(|e| (i, on_out(Error::io(e))))?;
            let (file, offset) = (&jobs[i].span.file, jobs[i].span.offset);
            let copy = |progress: &mut dyn FnMut(u64)| {
                copy_verbatim(file, offset, len, out, &mut |n| progress(n))
            };
            // A thread only where there is a CRC to check beside the copy:
            // one per tensor made a million tensors cost a million clones.
            let (copied, checked) = if jobs[i..run].iter().any(|j| j.span.crc.is_some()) {
                std::thread::scope(|scope| {
                    let checker = scope.spawn(|| check_crcs(&jobs[i..run]));
                    let copied = copy(&mut progress);
                    let checked = checker.join().unwrap_or_else(|_| {
                        Err((0, Error::io(io::Error::other("CRC thread panicked"))))
                    });
                    (copied, checked)
                })
            } else {
                (copy(&mut progress), Ok(()))
            };
            copied.map_err(|(e, done)| {
                let (k, before) = locate(jobs, i, done);
                (k, on_out(per_tensor(e, jobs[k].span.len, done - before)))
            })?;
            checked.map_err(|(k, e)| (i + k, e))?;
            written += len;
            i = run;
        } else {
            let (n, overflowed) =
                copy_buffered(&jobs[i], &mut w, &mut buf, buffer_size, &mut progress)
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

fn too_short(expected: u64, actual: u64) -> Error {
    Error::new(ErrorKind::TensorTooShort { expected, actual })
}

/// The kernel copies; if it cannot (another filesystem, an old kernel), we do.
/// On error also returns how many bytes were done, to find the tensor.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn copy_verbatim(
    src: &File,
    mut offset: u64,
    len: u64,
    out: &File,
    progress: &mut impl FnMut(u64),
) -> std::result::Result<(), (Error, u64)> {
    let mut left = len;
    while left > 0 {
        let chunk = left.min(1 << 30) as usize;
        match rustix::fs::copy_file_range(src, Some(&mut offset), out, None, chunk) {
            Ok(0) => return Err((too_short(len, len - left), len - left)),
            Ok(n) => {
                left -= n as u64;
                progress(n as u64);
            }
            Err(e) if fallback_errno(e) && left == len => {
                return copy_by_hand(src, offset, len, out, progress);
            }
            Err(e) => return Err((Error::io(e.into()), len - left)),
        }
    }
    Ok(())
}

/// Without `copy_file_range` (other Unixes), positional reads and writes.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn copy_verbatim(
    src: &File,
    offset: u64,
    len: u64,
    out: &File,
    progress: &mut impl FnMut(u64),
) -> std::result::Result<(), (Error, u64)> {
    copy_by_hand(src, offset, len, out, progress)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn fallback_errno(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [
        Errno::XDEV,
        Errno::NOSYS,
        Errno::INVAL,
        Errno::OPNOTSUPP,
        Errno::BADF,
    ]
    .contains(&e)
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
        read_exact_at(src, &mut buf[..n], offset + done, len, done).map_err(|e| (e, done))?;
        out.write_all(&buf[..n]).map_err(|e| (Error::io(e), done))?;
        done += n as u64;
        progress(n as u64);
    }
    Ok(())
}

fn read_exact_at(src: &File, buf: &mut [u8], at: u64, len: u64, done: u64) -> Result<()> {
    src.read_exact_at(buf, at).map_err(|e| {
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
fn copy_buffered(
    job: &SpanJob,
    out: &mut impl Write,
    buf: &mut ChunkBuffer,
    buffer_size: usize,
    progress: &mut impl FnMut(u64),
) -> Result<(u64, u64)> {
    let span = &job.span;
    let mut elements = Elements::new(job.out_len(), span.transform, job.cast);
    let (in_cap, out_cap) = elements.chunk_sizes(buffer_size);
    // A small member's npy header is read with its data, in one read.
    let prefix = span.crc.map_or(0, |c| span.offset - c.from);
    let joined = prefix <= 64 * 1024 && span.len as usize <= in_cap;
    let lead = if joined { prefix as usize } else { 0 };
    let (head, input, output) = buf.split(lead, in_cap, out_cap);
    if let Some(c) = span.crc {
        let hasher = match joined {
            true => {
                read_exact_at(&span.file, head, c.from, span.len, 0)?;
                let mut h = crc32fast::Hasher::new();
                h.update(head);
                h
            }
            false => crc_prefix(&span.file, c.from, span.offset)?,
        };
        elements = elements.with_crc(Crc::new(hasher, c.expected));
    }
    let mut written = 0u64;
    while elements.left() > 0 {
        let n = elements.next_chunk(in_cap);
        let done = span.len - elements.left();
        read_exact_at(
            &span.file,
            &mut input[..n],
            span.offset + done,
            span.len,
            done,
        )?;
        let bytes = elements.process(&mut input[..n], output)?;
        out.write_all(bytes)?;
        written += bytes.len() as u64;
        progress(bytes.len() as u64);
    }
    let overflowed = elements.finish()?;
    Ok((written, overflowed))
}

/// Checks the CRC of every checksummed job, reading the bytes again (from
/// the page cache, as the kernel copy is reading them too).
fn check_crcs(jobs: &[SpanJob]) -> std::result::Result<(), (usize, Error)> {
    for (k, j) in jobs.iter().enumerate() {
        let Some(c) = j.span.crc else { continue };
        let h = crc_prefix(&j.span.file, c.from, j.span.offset + j.span.len).map_err(|e| (k, e))?;
        Crc::new(h, c.expected).verify().map_err(|e| (k, e))?;
    }
    Ok(())
}

/// The checksum of the bytes before the tensor that the CRC also covers.
fn crc_prefix(file: &File, from: u64, to: u64) -> Result<crc32fast::Hasher> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; (to - from).min(1 << 20) as usize];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], at)?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(h)
}
