//! Small tensors copied in the order their bytes lie in the file, each into
//! its place in a buffer laid out in plan order, which is then written at
//! once. Plan order (dtype, then name) seldom follows an archive's order:
//! copied one by one, 20,000 small npz members cost 20,000 reads at
//! scattered offsets; gathered, a batch costs one read for each run of
//! members that lie close together, going forward through the file.
//!
//! The runs are read exactly ([`BlockCache::prefetch`]), not guessed by
//! read-ahead: a batch's members are scattered over the whole archive, and
//! read-ahead, growing while the reader goes forward, read four times the
//! bytes it copied (benches/README.md, "Copy path").
//!
//! Batches that follow one another are copied side by side, each written
//! at its offset ([`copy_batches_parallel`]): reading, checking and
//! placing small members is the work, and both cores share it.
//!
//! Errors are as one by one: the failure of the job first in plan order is
//! the one reported, whichever failed first in file order.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::job::{Copied, JobError, Overflow, SpanJob};
use super::pool::in_order;
use super::positional::copy_buffered;
use crate::block_cache::{BlockCache, BLOCK};
use crate::sink::elements::ChunkBuffer;
use crate::Error;

/// Members this close are read together: copying a gap of a few KiB costs
/// less than one more `pread`.
const RUN_GAP: u64 = crate::block_cache::SMALL as u64;

/// A batch's outcome: what it wrote, or the first failure in plan order.
type Gathered = std::result::Result<Copied, JobError>;

/// What a batch is gathered through, kept from batch to batch: the batch
/// itself, the chunk buffer, and the cache its members are read through.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) batch: Vec<u8>,
    pub(super) buf: ChunkBuffer,
    pub(super) cache: BlockCache,
}

/// Copies `batches` (back to back in plan order) into `out` from offset
/// `at`, as many at once as [`in_order`] runs, each worker with
/// buffers of its own, each batch written where it belongs with `pwrite`:
/// both cores read, check and place. The answer is the sequential one: the
/// bytes and overflows of all, or the failure first in plan order.
pub(super) fn copy_batches_parallel(
    jobs: &[SpanJob],
    batches: &[Range<usize>],
    out: &File,
    at: u64,
    buffer_size: usize,
) -> Gathered {
    let mut offsets = Vec::with_capacity(batches.len());
    let mut end = at;
    for b in batches {
        offsets.push(end);
        end += jobs[b.clone()].iter().map(SpanJob::out_len).sum::<u64>();
    }
    let copied = in_order(batches.len(), "gather", Scratch::default, |own, b, _| {
        let to = |batch: &[u8]| out.write_all_at(batch, offsets[b]);
        copy_gathered(jobs, batches[b].clone(), to, own, buffer_size)
    });
    // A failing batch names the job that failed, first in plan order.
    let mut all = Copied::default();
    for (_, batch) in copied.map_err(|failed| failed.error)? {
        all.bytes += batch.bytes;
        all.overflows.extend(batch.overflows);
    }
    Ok(all)
}

/// Copies `jobs[range]` through `scratch`, then hands the batch to `out`
/// to write.
pub(super) fn copy_gathered(
    jobs: &[SpanJob],
    range: Range<usize>,
    out: impl FnOnce(&[u8]) -> std::io::Result<()>,
    scratch: &mut Scratch,
    buffer_size: usize,
) -> Gathered {
    let Scratch { batch, buf, cache } = scratch;
    let start = range.start;
    let mut slots = Vec::with_capacity(range.len() + 1);
    slots.push(0usize);
    for job in &jobs[range.clone()] {
        slots.push(slots[slots.len() - 1] + job.out_len() as usize);
    }
    let total = slots[slots.len() - 1];
    batch.resize(total, 0);
    let mut order: Vec<usize> = range.collect();
    order.sort_unstable_by_key(|&k| file_position(&jobs[k]));
    let mut failed: Option<JobError> = None;
    let mut overflows = Vec::new();
    let mut run_ends_at = 0;
    for (i, &k) in order.iter().enumerate() {
        // A failure earlier in plan order is the answer: skip the rest.
        if failed.as_ref().is_some_and(|first| first.job < k) {
            continue;
        }
        if i >= run_ends_at {
            let (members, end) = run(jobs, &order[i..]);
            let first = file_position(&jobs[k]).1;
            cache.prefetch(&jobs[k].span.file, first, (end - first) as usize);
            run_ends_at = i + members;
        }
        let mut slot = &mut batch[slots[k - start]..slots[k - start + 1]];
        match copy_buffered(&jobs[k], &mut slot, buf, cache, buffer_size, &mut |_| {}) {
            Ok((_, 0)) => {}
            Ok((_, count)) => overflows.push(Overflow { job: k, count }),
            Err(e) => failed = Some(JobError::new(k, e)),
        }
    }
    if let Some(failure) = failed {
        return Err(failure);
    }
    overflows.sort_unstable();
    out(batch).map_err(|e| JobError::new(start, Error::io(e)))?;
    Ok(Copied {
        bytes: total as u64,
        overflows,
        chose: None,
    })
}

/// The run of members that starts with `sorted[0]`, as (how many, where
/// it ends): members of one file, each beginning at most [`RUN_GAP`] after
/// the one before ends, in at most one block. `sorted` is in file order.
fn run(jobs: &[SpanJob], sorted: &[usize]) -> (usize, u64) {
    let (file, start) = file_position(&jobs[sorted[0]]);
    let mut end = span_end(&jobs[sorted[0]]);
    let mut members = 1;
    for &k in &sorted[1..] {
        let (f, first) = file_position(&jobs[k]);
        let next_end = span_end(&jobs[k]).max(end);
        if f != file || first > end.saturating_add(RUN_GAP) || next_end - start > BLOCK as u64 {
            break;
        }
        (members, end) = (members + 1, next_end);
    }
    (members, end)
}

/// Where a job's bytes end in its file.
fn span_end(job: &SpanJob) -> u64 {
    job.span.offset.saturating_add(job.span.len)
}

/// Where a job's bytes begin: its file (by address, as the cache tells
/// files apart) and its first byte, checksummed prefix included.
fn file_position(job: &SpanJob) -> (usize, u64) {
    let span = &job.span;
    let first = span.crc.map_or(span.offset, |c| c.from);
    (Arc::as_ptr(&span.file) as usize, first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::job::testing;
    use crate::{ErrorKind, ZipError};
    use std::io::Write;

    /// Members `0..n` of a checksummed archive; `bad` ones get a wrong
    /// CRC. Returns the jobs in `plan` order and each member's bytes.
    fn archive(n: usize, bad: &[usize], plan: &[usize]) -> (Vec<SpanJob>, Vec<Vec<u8>>) {
        let sizes: Vec<usize> = (0..n).map(|k| 100 + k * 37).collect();
        let (jobs, data) = testing::archive(&sizes, bad, None);
        plan.iter()
            .map(|&k| (jobs[k].clone(), data[k].clone()))
            .unzip()
    }

    fn gather(jobs: &[SpanJob]) -> (Gathered, Vec<u8>) {
        let mut out = Vec::new();
        let to = |batch: &[u8]| out.write_all(batch);
        let result = copy_gathered(jobs, 0..jobs.len(), to, &mut Scratch::default(), 1 << 20);
        (result, out)
    }

    #[test]
    fn tensors_land_in_plan_order_whatever_the_file_order() {
        let plan = [5, 0, 3, 1, 4, 2];
        let (jobs, data) = archive(6, &[], &plan);
        let (result, out) = gather(&jobs);
        assert_eq!(result.unwrap().bytes, out.len() as u64);
        assert_eq!(out, data.concat());
    }

    #[test]
    fn the_failure_first_in_plan_order_is_the_error() {
        // Member 0 comes first in the file, member 4 first in the plan.
        let plan = [2, 4, 1, 0, 3];
        let (jobs, _) = archive(5, &[0, 4], &plan);
        let (result, out) = gather(&jobs);
        let JobError { job: k, error: e } = result.unwrap_err();
        assert_eq!(k, 1, "member 4, second in the plan");
        assert!(
            matches!(e.kind(), ErrorKind::Zip(ZipError::CrcMismatch { .. })),
            "{e}"
        );
        assert!(out.is_empty(), "nothing of a failed batch is written");
    }

    /// Six batches of five, side by side, into a file after `at` bytes.
    fn in_parallel(jobs: &[SpanJob], at: u64) -> (Gathered, Vec<u8>) {
        let stretch: Vec<Range<usize>> = (0..jobs.len()).step_by(5).map(|i| i..i + 5).collect();
        let mut out = tempfile::tempfile().unwrap();
        out.write_all(&vec![7u8; at as usize]).unwrap();
        let result = copy_batches_parallel(jobs, &stretch, &out, at, 1 << 20);
        (result, testing::contents(&out))
    }

    #[test]
    fn batches_side_by_side_land_where_one_after_another_would() {
        let plan: Vec<usize> = (0..30).map(|i| (i * 7) % 30).collect();
        let (jobs, data) = archive(30, &[], &plan);
        let (result, bytes) = in_parallel(&jobs, 100);
        let copied = result.unwrap();
        assert_eq!(copied.bytes, data.concat().len() as u64);
        assert!(copied.overflows.is_empty());
        assert_eq!(&bytes[..100], &[7u8; 100][..], "what was before is kept");
        assert_eq!(&bytes[100..], &data.concat()[..]);
    }

    #[test]
    fn side_by_side_the_failure_first_in_plan_order_is_the_error() {
        // Members 3 and 27 are bad: 27 is planned 9th (second batch), 3 is
        // planned 21st (fifth batch), whichever thread meets its own first.
        let plan: Vec<usize> = (0..30).map(|i| (i * 7) % 30).collect();
        assert_eq!((plan[9], plan[21]), (3, 27));
        for _ in 0..20 {
            let (jobs, _) = archive(30, &[3, 27], &plan);
            let JobError { job: k, error: e } = in_parallel(&jobs, 0).0.unwrap_err();
            assert_eq!(k, 9);
            assert!(
                matches!(e.kind(), ErrorKind::Zip(ZipError::CrcMismatch { .. })),
                "{e}"
            );
        }
    }
}
