//! How each tensor is copied, chosen in one place and without I/O: from
//! what each job offers ([`Job`]) and the routes allowed ([`Routes`]: none
//! into a stream or an object, which are written forward only). The
//! routes, best first, are [`Route`]'s variants.

use std::ops::Range;
use std::sync::Arc;

use super::job::{Job, SpanJob};
use crate::sink::elements::Elements;

/// Which routes a conversion may take into a file: all, by default. With
/// one off, its tensors take the next route down (a kernel copy, a checked
/// copy or a gathered batch: one tensor through the buffer; the buffer or
/// blocking readers: the async sink), so the output is the same bytes
/// whichever are on, as the conformance suite checks. All off is
/// [`ConvertOptions::fast_path`](crate::ConvertOptions::fast_path) off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Routes {
    /// Verbatim runs copied by the kernel, from a mapping of the source or
    /// through one small buffer, whichever this machine copies faster.
    pub kernel: bool,
    /// Checksummed members copied by the kernel, the CRC computed beside.
    pub checked: bool,
    /// Small tensors gathered into batches, several batches side by side.
    pub gather: bool,
    /// One tensor read at offsets through one buffer.
    pub buffered: bool,
    /// Tensors only blocking readers produce, read side by side.
    pub blocking: bool,
}

impl Default for Routes {
    fn default() -> Self {
        Routes::all(true)
    }
}

impl Routes {
    /// Every route off: everything through the async sink, as into
    /// anything written forward only (a stream, an object, a checksummed
    /// file).
    pub(crate) const NONE: Routes = Routes::all(false);

    /// Every route on, or every route off.
    const fn all(on: bool) -> Routes {
        Routes {
            kernel: on,
            checked: on,
            gather: on,
            buffered: on,
            blocking: on,
        }
    }
}

crate::setters::setters!(Routes {
    kernel: bool,
    checked: bool,
    gather: bool,
    buffered: bool,
    blocking: bool,
});

/// How a job, or a run of jobs, is copied. Indices are the jobs'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Verbatim tensors back to back in one file: one kernel copy
    /// (`copy::verbatim`).
    Kernel(Range<usize>),
    /// A checksummed member copied unchanged, its CRC computed beside the copy.
    Checked(usize),
    /// Small tensors gathered in batches; several batches side by side.
    Gather(Vec<Range<usize>>),
    /// One tensor read at offsets through the buffer (transformed, cast, checked).
    Buffered(usize),
    /// Tensors from blocking readers, read side by side, written at their offsets.
    Blocking(Range<usize>),
    /// One tensor through the async sink.
    Stream(usize),
}

impl Route {
    /// The jobs it copies.
    pub(crate) fn jobs(&self) -> Range<usize> {
        match self {
            Route::Kernel(r) | Route::Blocking(r) => r.clone(),
            Route::Gather(b) => b[0].start..b[b.len() - 1].end,
            Route::Checked(k) | Route::Buffered(k) | Route::Stream(k) => *k..*k + 1,
        }
    }

    /// Copies bytes that lie in files (on the blocking pool, in one trip
    /// with the spans around it).
    pub(crate) fn in_files(&self) -> bool {
        !matches!(self, Route::Blocking(_) | Route::Stream(_))
    }

    /// The same route for jobs counted from `start`.
    pub(crate) fn counted_from(&self, start: usize) -> Route {
        let shift = |r: &Range<usize>| r.start - start..r.end - start;
        match self {
            Route::Kernel(r) => Route::Kernel(shift(r)),
            Route::Checked(k) => Route::Checked(k - start),
            Route::Gather(b) => Route::Gather(b.iter().map(shift).collect()),
            Route::Buffered(k) => Route::Buffered(k - start),
            Route::Blocking(r) => Route::Blocking(shift(r)),
            Route::Stream(k) => Route::Stream(k - start),
        }
    }
}

/// A run of verbatim bytes shorter than this goes through the buffer rather
/// than the mapped copy: a mapping and a syscall per small tensor is its
/// whole cost. A checksummed member this long is copied by the kernel with
/// its CRC beside.
pub(crate) const KERNEL_COPY_MIN: u64 = 64 * 1024;

/// Output bytes gathered at most in one batch: the buffer's size. Each
/// batch passes once over the stretch of the archive its members lie in,
/// and two batches are copied side by side (benches/README.md, "Many small
/// tensors").
const BATCH_BYTES: u64 = 1 << 20;

/// A tensor of at most this many bytes may join a batch.
const SMALL_TENSOR: u64 = 64 * 1024;

/// The routes of `jobs`, in order, covering each job once, taking only
/// the routes `allowed`.
pub(crate) fn routes(jobs: &[Job], allowed: Routes) -> Vec<Route> {
    let mut routes = Vec::new();
    let mut i = 0;
    while i < jobs.len() {
        let end = run_of(jobs, i);
        match &jobs[i] {
            Job::Span(_) => span_routes(jobs, i..end, allowed, &mut routes),
            Job::Reader(_) if allowed.blocking => routes.push(Route::Blocking(i..end)),
            Job::Reader(_) | Job::Stream => routes.extend((i..end).map(Route::Stream)),
        }
        i = end;
    }
    routes
}

/// The end of the run of jobs of one kind from `start` (a stream job is a
/// run of its own).
fn run_of(jobs: &[Job], start: usize) -> usize {
    let kind = std::mem::discriminant(&jobs[start]);
    match jobs[start] {
        Job::Stream => start + 1,
        _ => jobs[start..]
            .iter()
            .position(|j| std::mem::discriminant(j) != kind)
            .map_or(jobs.len(), |n| start + n),
    }
}

/// The routes of a run of span jobs.
fn span_routes(jobs: &[Job], run: Range<usize>, allowed: Routes, routes: &mut Vec<Route>) {
    let kernel = allowed.kernel.then(|| kernel_runs(jobs, run.clone()));
    let mut kernel = kernel.unwrap_or_default().into_iter().peekable();
    let checked = |k: usize| allowed.checked && checked_copy(jobs[k].span());
    let mut i = run.start;
    while i < run.end {
        let next_kernel = kernel.peek().map_or(run.end, |r| r.start);
        let stretch = match allowed.gather {
            true => batches(jobs, i..next_kernel, checked),
            false => Vec::new(),
        };
        let route = if next_kernel == i {
            Route::Kernel(kernel.next().expect("peeked"))
        } else if checked(i) {
            Route::Checked(i)
        } else if !stretch.is_empty() {
            Route::Gather(stretch)
        } else if allowed.buffered {
            Route::Buffered(i)
        } else {
            Route::Stream(i)
        };
        i = route.jobs().end;
        routes.push(route);
    }
}

/// Nothing changes on the way (a checksummed member may still be copied
/// by the kernel, its CRC computed beside): the element pipeline's one
/// rule, asked directly.
fn unchanged(job: &SpanJob) -> bool {
    Elements::unchanged(job.span.transform, job.cast)
}

/// Checksummed, otherwise unchanged, and long enough to be worth a
/// kernel copy with the CRC computed beside it.
fn checked_copy(job: &SpanJob) -> bool {
    job.span.crc.is_some() && unchanged(job) && job.span.len >= KERNEL_COPY_MIN
}

/// The runs of jobs the kernel copies: verbatim tensors back to back in one
/// file, of [`KERNEL_COPY_MIN`] bytes or more together. A shorter run
/// (tensors scattered in canonical order) costs more in syscalls than in
/// bytes: it goes through the buffer.
fn kernel_runs(jobs: &[Job], run: Range<usize>) -> Vec<Range<usize>> {
    let mut runs = Vec::new();
    let mut i = run.start;
    while i < run.end {
        let end = verbatim_run(jobs, i, run.end);
        let len: u64 = (i..end).map(|k| jobs[k].span().span.len).sum();
        if end > i && len >= KERNEL_COPY_MIN {
            runs.push(i..end);
        }
        i = end.max(i + 1);
    }
    runs
}

/// The end of the run of verbatim jobs from `start` (before `stop`) that
/// lie back to back in one file.
fn verbatim_run(jobs: &[Job], start: usize, stop: usize) -> usize {
    // Nothing changes on the way and nothing must be checked: the kernel
    // may copy it from a mapping.
    let verbatim = |job: &SpanJob| job.span.crc.is_none() && unchanged(job);
    if !verbatim(jobs[start].span()) {
        return start;
    }
    let mut end = start + 1;
    while end < stop {
        let (prev, next) = (&jobs[end - 1].span().span, jobs[end].span());
        let adjacent =
            Arc::ptr_eq(&prev.file, &next.span.file) && prev.offset + prev.len == next.span.offset;
        if !(adjacent && verbatim(next)) {
            break;
        }
        end += 1;
    }
    end
}

/// The batches that follow one another in `within`, each of two jobs or
/// more, as [`batch_len`] cuts them. A member copied `checked` never joins one.
fn batches(
    jobs: &[Job],
    within: Range<usize>,
    checked: impl Fn(usize) -> bool,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = within.start;
    while i < within.end {
        match batch_len(jobs, i..within.end, &checked) {
            n @ 2.. => out.push(i..i + n),
            _ => break,
        }
        i = out[out.len() - 1].end;
    }
    out
}

/// How many jobs from the start of `within` form a batch: small ones, back
/// to back in plan order, up to [`BATCH_BYTES`] of output.
fn batch_len(jobs: &[Job], within: Range<usize>, checked: impl Fn(usize) -> bool) -> usize {
    let mut total = 0;
    let mut n = 0;
    for k in within {
        let job = jobs[k].span();
        let len = job.out_len();
        if checked(k)
            || job.span.len > SMALL_TENSOR
            || len > SMALL_TENSOR
            || total + len > BATCH_BYTES
        {
            break;
        }
        total += len;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cast::Cast;
    use crate::copy::job::ReaderJob;
    use crate::source::{BlockingRead, CrcCheck, FileSpan};
    use crate::transform::Transform;
    use crate::Dtype;

    /// Synthetic jobs, described by letters: `k` a verbatim span of 64 KiB,
    /// `s` a small verbatim one (100 bytes), `c` a checksummed member of
    /// 1 MiB, `x` a small one cast, `r` a blocking reader, `a` an async one.
    /// Spans lie back to back in one file unless a `|` stands between them.
    fn jobs(spec: &str) -> Vec<Job> {
        let files = [tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap()];
        let files = files.map(Arc::new);
        let (mut at, mut which) = (0u64, 0);
        let mut out = Vec::new();
        for c in spec.chars() {
            let len = match c {
                '|' => {
                    which = 1 - which;
                    continue;
                }
                'k' => KERNEL_COPY_MIN,
                'c' => 1 << 20,
                _ => 100,
            };
            let span = FileSpan {
                file: files[which].clone(),
                offset: at,
                len,
                transform: Transform::Identity,
                crc: (c == 'c').then_some(CrcCheck {
                    expected: 0,
                    from: at,
                }),
            };
            at += len;
            let cast = (c == 'x').then(|| Cast::new(Dtype::F32, Dtype::F16).unwrap());
            out.push(match c {
                'r' => Job::Reader(ReaderJob {
                    open: Box::new(|| -> crate::Result<(BlockingRead, Transform)> {
                        unreachable!("routes open nothing")
                    }),
                    out_len: 4,
                    at: 0,
                    cast: None,
                }),
                'a' => Job::Stream,
                _ => Job::Span(SpanJob { span, cast }),
            });
        }
        out
    }

    use Route::*;

    fn routed(jobs: &[Job]) -> Vec<Route> {
        routes(jobs, super::Routes::default())
    }

    #[test]
    fn a_route_turned_off_leaves_its_tensors_to_the_next_one_down() {
        let all = super::Routes::default();
        let js = jobs("kkcxxrr");
        let off = |r: super::Routes| routes(&js, r);
        assert_eq!(
            off(all),
            [Kernel(0..2), Checked(2), one_batch(3..5), Blocking(5..7)]
        );
        assert_eq!(
            off(all.kernel(false).gather(false)),
            [
                Buffered(0),
                Buffered(1),
                Checked(2),
                Buffered(3),
                Buffered(4),
                Blocking(5..7)
            ]
        );
        assert_eq!(
            off(all.checked(false).blocking(false))[1..],
            [Buffered(2), one_batch(3..5), Stream(5), Stream(6)]
        );
        assert_eq!(off(Routes::NONE), (0..7).map(Stream).collect::<Vec<_>>());
    }

    /// A stretch of one batch.
    fn one_batch(jobs: Range<usize>) -> Route {
        Gather(vec![jobs])
    }

    #[test]
    fn each_run_of_one_kind_takes_its_route_into_a_file() {
        let routes = routed(&jobs("kkrrasa"));
        assert_eq!(
            routes,
            [
                Kernel(0..2),
                Blocking(2..4),
                Stream(4),
                Buffered(5),
                Stream(6)
            ]
        );
    }

    #[test]
    fn small_tensors_gather_and_a_kernel_run_or_a_member_cuts_the_batch() {
        // Small ones merge into a kernel run when back to back and long enough
        // together; scattered (another file between), they are gathered.
        assert_eq!(routed(&jobs("sss|k")), [one_batch(0..3), Kernel(3..4)]);
        assert_eq!(routed(&jobs("sk")), [Kernel(0..2)]);
        assert_eq!(
            routed(&jobs("xxcxx")),
            [one_batch(0..2), Checked(2), one_batch(3..5)]
        );
        // One small tensor alone is no batch.
        assert_eq!(routed(&jobs("x|k")), [Buffered(0), Kernel(1..2)]);
    }

    #[test]
    fn a_kernel_run_stops_at_a_file_change_and_at_a_cast() {
        assert_eq!(routed(&jobs("kk|kk")), [Kernel(0..2), Kernel(2..4)]);
        assert_eq!(
            routed(&jobs("kxk")),
            [Kernel(0..1), Buffered(1), Kernel(2..3)]
        );
    }

    #[test]
    fn batches_are_cut_at_their_byte_budget() {
        let many = "x".repeat((BATCH_BYTES / 50) as usize + 3);
        let routes = routed(&jobs(&many));
        let [Gather(batches)] = &routes[..] else {
            panic!("{routes:?}");
        };
        assert!(batches.len() >= 2, "{batches:?}");
        assert!(batches.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(batches.last().unwrap().end, many.len());
    }

    #[test]
    fn every_job_is_routed_once_in_order() {
        for spec in ["", "a", "kxsrcak|ssr", "ccc", "rrr|xx|kk"] {
            let js = jobs(spec);
            let routes = routed(&js);
            let covered: Vec<usize> = routes.iter().flat_map(Route::jobs).collect();
            assert_eq!(covered, (0..js.len()).collect::<Vec<_>>(), "{spec}");
        }
    }
}
