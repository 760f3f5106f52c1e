//! Tensors whose bytes lie in files, copied straight into the output
//! file by the routes [`super::route`] chose for them. Synchronous: the caller runs a window of tensors on the blocking pool in
//! one trip, so a model of a million small tensors costs a million
//! syscalls at most, not a million task hand-offs.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use super::gather::{copy_batches_parallel, copy_gathered, Scratch};
use super::job::{Copied, JobError, Overflow, SpanJob};
use super::pipelined::{copy_pipelined, PIPELINE_MIN};
use super::policy::Way;
use super::positional::{copy_buffered, crc_until, CHECKED_CHUNK};
use super::route::Route;
use super::verbatim::{copy_verbatim, KernelWay};
use crate::sink::elements::{too_short, Crc};
use crate::source::FileSpan;
use crate::{Error, ErrorKind, Result};

/// Copies `jobs` to `out` at its current offset, by `routes` (which
/// cover them in order). On error, says which job failed. What it copied
/// includes the way a trial among the routes found faster.
pub(crate) fn copy_spans(
    out: &File,
    out_name: &str,
    jobs: &[SpanJob],
    routes: &[Route],
    buffer_size: usize,
    mut progress: impl FnMut(u64),
) -> std::result::Result<Copied, JobError> {
    let on_out = |e: Error| match e.kind() {
        ErrorKind::Io(io) if output_side(io) => e.with_output(out_name),
        _ => e,
    };
    // Small tensors are read a block at a time through `s.cache`, gathered
    // in file order into `s.batch`, laid out in plan order.
    let mut s = Scratch::default();
    // Small tensors' bytes gather here into large writes.
    let mut w = io::BufWriter::with_capacity(buffer_size.clamp(64 * 1024, 1 << 20), out);
    let mut written = 0u64;
    let mut overflows = Vec::new();
    let mut chose = None;
    for route in routes {
        let i = route.jobs().start;
        let flushed = |w: &mut io::BufWriter<&File>| {
            w.flush()
                .map_err(|e| JobError::new(i, on_out(Error::io(e))))
        };
        match route {
            Route::Kernel { run, way } => {
                // The kernel writes at the file's offset: our buffered bytes go first.
                flushed(&mut w)?;
                let len: u64 = jobs[run.clone()].iter().map(|j| j.span.len).sum();
                let (file, offset) = (&jobs[i].span.file, jobs[i].span.offset);
                let copied = copy_verbatim(file, offset, len, out, *way, &mut progress);
                chose = chose.or(copied.map_err(|(e, done)| {
                    let (k, before) = locate(jobs, i, done);
                    JobError::new(k, on_out(per_tensor(e, jobs[k].span.len, done - before)))
                })?);
                written += len;
            }
            Route::Checked { job: k, beside } => {
                // Straight to the file, not through `w`.
                flushed(&mut w)?;
                let copied = copy_checked(&jobs[*k], *beside, out, &mut s, &mut progress);
                chose = chose.or(copied.map_err(|e| JobError::new(*k, on_out(e)))?);
                written += jobs[*k].span.len;
            }
            Route::Gather { batches, parallel } => {
                let gathered = match parallel {
                    true => copy_parallel(jobs, batches, out, &mut w, buffer_size),
                    false => copy_serial(jobs, batches, &mut w, &mut s, buffer_size),
                };
                let copied = gathered.map_err(|f| JobError::new(f.job, on_out(f.error)))?;
                overflows.extend(copied.overflows);
                written += copied.bytes;
                progress(copied.bytes);
            }
            Route::Buffered(k) => {
                let job = &jobs[*k];
                // A large one on two threads, straight to the file.
                let pipelined = if pipelines(job) {
                    flushed(&mut w)?;
                    copy_pipelined(job, out, buffer_size, &mut progress)
                } else {
                    None
                };
                let (buf, cache) = (&mut s.buf, &mut s.cache);
                let copied = pipelined.unwrap_or_else(|| {
                    copy_buffered(job, &mut w, buf, cache, buffer_size, &mut progress)
                });
                let (n, count) = copied.map_err(|e| JobError::new(*k, on_out(e)))?;
                if count > 0 {
                    overflows.push(Overflow { job: *k, count });
                }
                written += n;
            }
            Route::Blocking(_) | Route::Stream { .. } => {
                unreachable!("only routes of bytes in files come here")
            }
        }
    }
    w.flush()
        .map_err(|e| JobError::new(jobs.len() - 1, on_out(Error::io(e))))?;
    Ok(Copied {
        bytes: written,
        overflows,
        chose,
    })
}

/// A tensor read through the buffer is large enough to be read and cast
/// on one core while the other writes ([`super::pipelined`]); a checksummed
/// member's CRC must see its header first, and goes through the buffer.
fn pipelines(job: &SpanJob) -> bool {
    job.span.crc.is_none() && job.span.len >= PIPELINE_MIN
}

/// Copies batches of small tensors one after another through `w`.
fn copy_serial(
    jobs: &[SpanJob],
    batches: &[Range<usize>],
    w: &mut io::BufWriter<&File>,
    scratch: &mut Scratch,
    buffer_size: usize,
) -> std::result::Result<Copied, JobError> {
    let mut all = Copied::default();
    for b in batches {
        let to = |batch: &[u8]| w.write_all(batch);
        let copied = copy_gathered(jobs, b.clone(), to, scratch, buffer_size)?;
        all.bytes += copied.bytes;
        all.overflows.extend(copied.overflows);
    }
    Ok(all)
}

/// Copies batches of small tensors side by side at their offsets in `out`
/// (after what `w` holds, and leaving `out`'s offset past them, as writing
/// through `w` would).
fn copy_parallel(
    jobs: &[SpanJob],
    stretch: &[Range<usize>],
    mut out: &File,
    w: &mut io::BufWriter<&File>,
    buffer_size: usize,
) -> std::result::Result<Copied, JobError> {
    let (first, last) = (stretch[0].start, stretch[stretch.len() - 1].end);
    let io_at = |e: io::Error| JobError::new(first, Error::io(e));
    w.flush().map_err(io_at)?;
    let at = out.stream_position().map_err(io_at)?;
    let copied = copy_batches_parallel(jobs, stretch, out, at, buffer_size)?;
    out.seek(io::SeekFrom::Start(at + copied.bytes))
        .map_err(|e| JobError::new(last - 1, Error::io(e)))?;
    Ok(copied)
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

/// A checksummed member copied unchanged, by the kernel `beside` its CRC
/// thread or in one pass. Returns the way a trial found faster.
fn copy_checked(
    job: &SpanJob,
    beside: Option<KernelWay>,
    out: &File,
    s: &mut Scratch,
    progress: &mut impl FnMut(u64),
) -> Result<Option<Way>> {
    if let Some(result) = beside.and_then(|way| copy_with_crc_beside(&job.span, way, out, progress))
    {
        return result;
    }
    let mut direct = out;
    // Verbatim: no cast, so nothing can overflow.
    let (buf, cache) = (&mut s.buf, &mut s.cache);
    copy_buffered(job, &mut direct, buf, cache, CHECKED_CHUNK, progress).map(|_| None)
}

/// The kernel copy of a member, `way`, while a second thread computes its
/// CRC; `None` when no thread can be had.
fn copy_with_crc_beside(
    span: &FileSpan,
    way: KernelWay,
    out: &File,
    progress: &mut impl FnMut(u64),
) -> Option<Result<Option<Way>>> {
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
        let copied = copy_verbatim(&span.file, span.offset, span.len, out, way, progress);
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
            .and_then(|chose| Crc::new(hasher?, crc.expected).verify().map(|()| chose));
        Some(checked)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::job::{testing, Job};
    use crate::copy::policy::{CopyPolicy, Routes};
    use crate::copy::route::{routes, CHECK_BESIDE_MIN};
    use crate::ZipError;

    /// Member sizes: one copied in one pass, one copied beside its CRC thread.
    const SIZES: [usize; 2] = [2 * CHECKED_CHUNK + 4096, CHECK_BESIDE_MIN as usize + 4096];

    /// Three checksummed members of `size` bytes; `bad` ones get a wrong
    /// CRC; the file is cut to `cut` bytes.
    fn archive(size: usize, bad: &[usize], cut: Option<u64>) -> (Vec<SpanJob>, Vec<u8>) {
        let (jobs, data) = testing::archive(&[size; 3], bad, cut);
        (jobs, data.concat())
    }

    /// The routes of `jobs` into a file.
    fn routed(jobs: &[SpanJob]) -> Vec<Route> {
        let jobs: Vec<Job> = jobs.iter().cloned().map(Job::Span).collect();
        routes(&jobs, &CopyPolicy::new(Routes::default(), false))
    }

    fn copy(jobs: &[SpanJob]) -> (std::result::Result<u64, JobError>, Vec<u8>) {
        let out = tempfile::tempfile().unwrap();
        let routes = routed(jobs);
        let result = copy_spans(&out, "out", jobs, &routes, 1 << 20, |_| {}).map(|c| c.bytes);
        (result, testing::contents(&out))
    }

    #[test]
    fn checked_members_are_copied_whole_and_not_merged() {
        for size in SIZES {
            let (jobs, data) = archive(size, &[], None);
            let beside = (size as u64 >= CHECK_BESIDE_MIN).then_some(KernelWay::By(Way::Mapped));
            let each = [0, 1, 2].map(|job| Route::Checked { job, beside });
            assert_eq!(routed(&jobs), each);
            let (result, bytes) = copy(&jobs);
            assert_eq!(result.unwrap(), data.len() as u64);
            assert_eq!(bytes, data);
        }
    }

    #[test]
    fn the_first_bad_checksum_is_the_error() {
        for size in SIZES {
            for bad in [vec![0], vec![1], vec![2], vec![1, 2]] {
                let (jobs, _) = archive(size, &bad, None);
                let JobError { job: i, error: e } = copy(&jobs).0.unwrap_err();
                assert_eq!(i, bad[0], "{bad:?}");
                assert!(
                    matches!(e.kind(), ErrorKind::Zip(ZipError::CrcMismatch { .. })),
                    "{e}"
                );
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
            let JobError { job: i, error: e } = copy(&jobs).0.unwrap_err();
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
            let JobError { job: i, error: e } = copy(&jobs).0.unwrap_err();
            assert_eq!(i, 0);
            assert!(
                matches!(e.kind(), ErrorKind::Zip(ZipError::CrcMismatch { .. })),
                "{e}"
            );
        }
    }

    /// A large cast between small ones: the small ones' bytes, gathered in
    /// the buffered writer, land before the large one's, which the two
    /// threads write straight to the file, and the one after lands after.
    #[test]
    fn a_pipelined_cast_lands_between_the_buffered_ones() {
        use crate::cast::Cast;
        use crate::transform::Transform;
        use std::io::Write;
        let counts = [100usize, PIPELINE_MIN as usize / 4 + 1000, 100];
        let bytes: Vec<u8> = (0..counts.iter().sum::<usize>() as u32)
            .flat_map(|i| (i.wrapping_mul(2_654_435_761) >> 1).to_le_bytes())
            .collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&bytes).unwrap();
        let file = std::sync::Arc::new(f);
        let cast = Cast::new(crate::Dtype::F32, crate::Dtype::BF16).unwrap();
        let (mut jobs, mut want, mut at) = (Vec::new(), Vec::new(), 0);
        for n in counts {
            let input = &bytes[at..at + 4 * n];
            let mut out = vec![0u8; 2 * n];
            cast.apply(input, &mut out);
            want.extend_from_slice(&out);
            let span = FileSpan {
                file: file.clone(),
                offset: at as u64,
                len: 4 * n as u64,
                transform: Transform::Identity,
                crc: None,
            };
            jobs.push(SpanJob {
                span,
                cast: Some(cast),
            });
            at += 4 * n;
        }
        assert_eq!(routed(&jobs), [0, 1, 2].map(Route::Buffered));
        assert!(pipelines(&jobs[1]) && !pipelines(&jobs[0]));
        let (result, got) = copy(&jobs);
        assert_eq!(result.unwrap(), want.len() as u64);
        assert!(got == want);
    }
}
