//! How each tensor is copied, chosen in one place and without I/O: from
//! what each job offers ([`Job`]) and the conversion's [`CopyPolicy`] (the
//! routes allowed, none into a stream or an object, which are written
//! forward only; the way verbatim bytes are copied). The routes, best
//! first, are [`Route`]'s variants; how each is carried out is in its fields.

use std::ops::Range;
use std::sync::Arc;

use super::job::{Job, SpanJob};
use super::policy::CopyPolicy;
use super::policy::Way;
use super::verbatim::{KernelWay, TRIAL_MIN};
use crate::sink::elements::Elements;

/// How a job, or a run of jobs, is copied. Indices are the jobs'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// Verbatim tensors back to back in one file: one kernel copy
    /// (`copy::verbatim`), `way`.
    Kernel { run: Range<usize>, way: KernelWay },
    /// A checksummed member copied unchanged: by the kernel with the CRC
    /// computed on a thread `beside` it, or (`None`) in one pass through a
    /// buffer, the CRC over each chunk while it is in cache.
    Checked {
        job: usize,
        beside: Option<KernelWay>,
    },
    /// Small tensors gathered in batches, one after another or (`parallel`)
    /// several side by side.
    Gather {
        batches: Vec<Range<usize>>,
        parallel: bool,
    },
    /// One tensor read at offsets through the buffer (transformed, cast, checked).
    Buffered(usize),
    /// Tensors from blocking readers, read side by side, written at their offsets.
    Blocking(Range<usize>),
    /// One tensor through the async sink; the next opened `ahead` (its
    /// source then reads while this one is written) when nothing goes
    /// beside the sink.
    Stream { job: usize, ahead: bool },
}

impl Route {
    /// The jobs it copies.
    pub(crate) fn jobs(&self) -> Range<usize> {
        match self {
            Route::Kernel { run: r, .. } | Route::Blocking(r) => r.clone(),
            Route::Gather { batches: b, .. } => b[0].start..b[b.len() - 1].end,
            Route::Checked { job: k, .. } | Route::Buffered(k) | Route::Stream { job: k, .. } => {
                *k..*k + 1
            }
        }
    }

    /// Copies bytes that lie in files (on the blocking pool, in one trip
    /// with the spans around it).
    pub(crate) fn in_files(&self) -> bool {
        !matches!(self, Route::Blocking(_) | Route::Stream { .. })
    }

    /// Times both ways of copying verbatim bytes: the conversion chooses by it.
    fn trial(&self) -> bool {
        let trial = Some(KernelWay::Trial);
        match self {
            Route::Kernel { way, .. } => Some(*way) == trial,
            Route::Checked { beside, .. } => *beside == trial,
            _ => false,
        }
    }

    /// The same route for jobs counted from `start`.
    pub(crate) fn counted_from(&self, start: usize) -> Route {
        let shift = |r: &Range<usize>| r.start - start..r.end - start;
        let mut route = self.clone();
        match &mut route {
            Route::Kernel { run: r, .. } | Route::Blocking(r) => *r = shift(r),
            Route::Gather { batches, .. } => batches.iter_mut().for_each(|b| *b = shift(b)),
            Route::Checked { job: k, .. } | Route::Buffered(k) | Route::Stream { job: k, .. } => {
                *k -= start
            }
        }
        route
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

/// A checksummed member smaller than this is copied the way `cp` copies: a
/// read of a chunk, the CRC over it while it is in the core's cache, a
/// write of the same buffer. A larger one is copied like a verbatim one
/// while a second thread reads the same bytes for the CRC: two cores, and
/// the copy itself as fast as an unchecked one.
pub(super) const CHECK_BESIDE_MIN: u64 = 1 << 20;

/// The routes of `jobs`, in order, each job once, by `policy`. They end
/// after a route that times the ways of copying verbatim bytes (the first
/// long one while the conversion has not chosen): the jobs after it are
/// routed again, by what it chose; otherwise they cover every job.
pub(crate) fn routes(jobs: &[Job], policy: &CopyPolicy) -> Vec<Route> {
    let allowed = &policy.routes;
    let ahead = !policy.file_routes();
    let mut routes = Vec::new();
    let mut i = 0;
    while i < jobs.len() {
        let end = run_of(jobs, i);
        match &jobs[i] {
            Job::Span(_) => span_routes(jobs, i..end, policy, &mut routes),
            Job::Reader(_) if allowed.blocking => routes.push(Route::Blocking(i..end)),
            Job::Reader(_) | Job::Stream => {
                routes.extend((i..end).map(|job| Route::Stream { job, ahead }))
            }
        }
        if let Some(trial) = routes.iter().position(Route::trial) {
            routes.truncate(trial + 1);
            break;
        }
        i = end;
    }
    routes
}

/// How a kernel copy of `len` bytes goes: the conversion's way once it is
/// known (forced, or timed); until then, a copy long enough times both.
fn kernel_way(policy: &CopyPolicy, len: u64) -> KernelWay {
    match policy.way() {
        Some(way) => KernelWay::By(way),
        None if len >= TRIAL_MIN => KernelWay::Trial,
        None => KernelWay::By(Way::Mapped),
    }
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
fn span_routes(jobs: &[Job], run: Range<usize>, policy: &CopyPolicy, routes: &mut Vec<Route>) {
    let allowed = &policy.routes;
    let kernel = allowed.kernel.then(|| kernel_runs(jobs, run.clone()));
    let mut kernel = kernel.unwrap_or_default().into_iter().peekable();
    let checked = |k: usize| allowed.checked && checked_copy(jobs[k].span());
    let len = |r: &Range<usize>| jobs[r.clone()].iter().map(|j| j.span().span.len).sum();
    let mut i = run.start;
    while i < run.end {
        let next_kernel = kernel.peek().map_or(run.end, |r| r.start);
        let batches = match allowed.gather {
            true => batches(jobs, i..next_kernel, checked),
            false => Vec::new(),
        };
        let route = if next_kernel == i {
            let run = kernel.next().expect("peeked");
            let way = kernel_way(policy, len(&run));
            Route::Kernel { run, way }
        } else if checked(i) {
            let len = jobs[i].span().span.len;
            let beside = (len >= CHECK_BESIDE_MIN).then(|| kernel_way(policy, len));
            Route::Checked { job: i, beside }
        } else if !batches.is_empty() {
            let parallel = batches.len() > 1;
            Route::Gather { batches, parallel }
        } else if allowed.buffered {
            Route::Buffered(i)
        } else {
            let ahead = !policy.file_routes();
            Route::Stream { job: i, ahead }
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
    use crate::copy::policy::Routes;
    use crate::source::{BlockingRead, CrcCheck, FileSpan};
    use crate::transform::Transform;
    use crate::Dtype;

    /// Synthetic jobs, described by letters: `k` a verbatim span of 64 KiB,
    /// `L` one long enough for the trial, `s` a small verbatim one (100
    /// bytes), `c` a checksummed member of 1 MiB, `m` one of 64 KiB, `C` one
    /// long enough for the trial, `x` a small one cast, `r` a blocking
    /// reader, `a` an async one. Spans lie back to back in one file unless
    /// a `|` stands between them.
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
                'k' | 'm' => KERNEL_COPY_MIN,
                'c' => CHECK_BESIDE_MIN,
                'L' | 'C' => TRIAL_MIN,
                _ => 100,
            };
            let span = FileSpan {
                file: files[which].clone(),
                offset: at,
                len,
                transform: Transform::Identity,
                crc: "cmC".contains(c).then_some(CrcCheck {
                    expected: 0,
                    from: at,
                }),
            };
            at += len;
            let cast = (c == 'x').then(|| Cast::new(Dtype::F32, Dtype::F16).unwrap());
            out.push(match c {
                'r' => Job::Reader(ReaderJob::whole(
                    Box::new(|| -> crate::Result<(BlockingRead, Transform)> {
                        unreachable!("routes open nothing")
                    }),
                    4,
                    0,
                    None,
                )),
                'a' => Job::Stream,
                _ => Job::Span(SpanJob { span, cast }),
            });
        }
        out
    }

    use Route::*;

    /// Into a file, every route allowed, the way not chosen yet.
    fn into_file() -> CopyPolicy {
        CopyPolicy::new(Routes::default(), false)
    }

    fn routed(jobs: &[Job]) -> Vec<Route> {
        routes(jobs, &into_file())
    }

    /// A kernel copy by the way taken before one is chosen.
    fn kernel(run: Range<usize>) -> Route {
        let way = KernelWay::By(Way::Mapped);
        Kernel { run, way }
    }

    /// A member of 1 MiB, copied beside its CRC thread.
    fn checked(job: usize) -> Route {
        let beside = Some(KernelWay::By(Way::Mapped));
        Checked { job, beside }
    }

    /// A tensor through the sink, into a file.
    fn stream(job: usize) -> Route {
        Stream { job, ahead: false }
    }

    #[test]
    fn a_route_turned_off_leaves_its_tensors_to_the_next_one_down() {
        let all = Routes::default();
        let js = jobs("kkcxxrr");
        let off = |r: Routes| routes(&js, &CopyPolicy::new(r, false));
        assert_eq!(
            off(all),
            [kernel(0..2), checked(2), one_batch(3..5), Blocking(5..7)]
        );
        assert_eq!(
            off(all.kernel(false).gather(false)),
            [
                Buffered(0),
                Buffered(1),
                checked(2),
                Buffered(3),
                Buffered(4),
                Blocking(5..7)
            ]
        );
        assert_eq!(
            off(all.checked(false).blocking(false))[1..],
            [Buffered(2), one_batch(3..5), stream(5), stream(6)]
        );
        // With none on, nothing goes beside the sink: the next tensor is opened ahead.
        let ahead = |job| Stream { job, ahead: true };
        assert_eq!(off(Routes::NONE), (0..7).map(ahead).collect::<Vec<_>>());
        // So with a checksum, which must see every byte, and into a stream.
        let checksum = CopyPolicy::new(all, true);
        assert_eq!(routes(&js, &checksum), routes(&js, &CopyPolicy::SINK_ONLY));
        assert_eq!(routes(&js, &checksum), off(Routes::NONE));
    }

    /// A stretch of one batch.
    fn one_batch(jobs: Range<usize>) -> Route {
        Gather {
            batches: vec![jobs],
            parallel: false,
        }
    }

    #[test]
    fn each_run_of_one_kind_takes_its_route_into_a_file() {
        let routes = routed(&jobs("kkrrasa"));
        assert_eq!(
            routes,
            [
                kernel(0..2),
                Blocking(2..4),
                stream(4),
                Buffered(5),
                stream(6)
            ]
        );
    }

    #[test]
    fn small_tensors_gather_and_a_kernel_run_or_a_member_cuts_the_batch() {
        // Small ones merge into a kernel run when back to back and long enough
        // together; scattered (another file between), they are gathered.
        assert_eq!(routed(&jobs("sss|k")), [one_batch(0..3), kernel(3..4)]);
        assert_eq!(routed(&jobs("sk")), [kernel(0..2)]);
        assert_eq!(
            routed(&jobs("xxcxx")),
            [one_batch(0..2), checked(2), one_batch(3..5)]
        );
        // One small tensor alone is no batch.
        assert_eq!(routed(&jobs("x|k")), [Buffered(0), kernel(1..2)]);
    }

    #[test]
    fn a_kernel_run_stops_at_a_file_change_and_at_a_cast() {
        assert_eq!(routed(&jobs("kk|kk")), [kernel(0..2), kernel(2..4)]);
        assert_eq!(
            routed(&jobs("kxk")),
            [kernel(0..1), Buffered(1), kernel(2..3)]
        );
    }

    #[test]
    fn a_small_member_is_checked_in_one_pass_a_large_one_beside_the_copy() {
        let one_pass = |job| Checked { job, beside: None };
        assert_eq!(routed(&jobs("mc")), [one_pass(0), checked(1)]);
    }

    #[test]
    fn batches_are_cut_at_their_byte_budget_and_copied_side_by_side() {
        let many = "x".repeat((BATCH_BYTES / 50) as usize + 3);
        let routes = routed(&jobs(&many));
        let [Gather { batches, parallel }] = &routes[..] else {
            panic!("{routes:?}");
        };
        assert!(batches.len() >= 2 && *parallel, "{batches:?}");
        assert!(batches.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(batches.last().unwrap().end, many.len());
    }

    /// The first long copy of a conversion times both ways and ends the
    /// routes; the rest are routed by what it chose, in that conversion
    /// only: the choice is the policy's, a value each conversion makes.
    #[test]
    fn the_first_long_copy_of_each_conversion_chooses_its_way() {
        let js = jobs("k|Lk|L|C");
        let mut first = into_file();
        let trial = Kernel {
            run: 1..3,
            way: KernelWay::Trial,
        };
        assert_eq!(routes(&js, &first), [kernel(0..1), trial.clone()]);
        first.chose(Way::Read);
        let read = KernelWay::By(Way::Read);
        let rest = [
            Kernel {
                run: 0..1,
                way: read,
            },
            Checked {
                job: 1,
                beside: Some(read),
            },
        ];
        assert_eq!(routes(&js[3..], &first), rest);
        // Another conversion has not chosen: its first long copy times again.
        let second = into_file();
        assert_eq!(routes(&js, &second), [kernel(0..1), trial]);
        // A long checked member may be the one that times.
        let beside = Some(KernelWay::Trial);
        assert_eq!(routes(&js[4..], &second), [Checked { job: 0, beside }]);
        // A forced way is never timed.
        for way in [Way::Mapped, Way::Read] {
            let forced = CopyPolicy::new(Routes::default().way(Some(way)), false);
            let by = KernelWay::By(way);
            assert_eq!(
                routes(&js, &forced),
                [
                    Kernel { run: 0..1, way: by },
                    Kernel { run: 1..3, way: by },
                    Kernel { run: 3..4, way: by },
                    Checked {
                        job: 4,
                        beside: Some(by)
                    },
                ]
            );
        }
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
