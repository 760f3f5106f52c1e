//! Tensors that only a blocking reader can produce (deflated npz members,
//! where the inflation is the work; dequantized blocks; PyTorch views that
//! are part of a storage or strided) read [`READERS`] at once, each on a
//! thread of its own, and written at their planned offsets in the output
//! file, so that every core works. Each tensor goes through the one element
//! pipeline ([`Pump`]) exactly as the async sink drives it, in a
//! bounded buffer of its own: memory is [`READERS`] x (buffer + reader).
//! Errors are those of the sequential path ([`in_order`]).
//!
//! The readers write one file, and ext4 takes its inode lock for each
//! `pwrite`: a reader whose chunk is ready while the other writes spins on
//! that lock. A reader may spend that wait on work it has to do anyway
//! (GPTQ reads its next strip of words then): [`Writing`] counts the
//! writes, and `another_writes` tells the reader.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::job::{Failed, JobError, Overflow, ReaderJob};
use crate::cast::Cast;
use crate::io_util::{fill, Writing};
use crate::sink::elements::{ChunkBuffer, Pump};
use crate::source::OpenBlocking;
use crate::Error;

/// Tensors read at once: one a core on the machines this is tuned for.
pub(crate) const READERS: usize = 2;

/// The most each reader holds of a tensor at a time: small enough to stay
/// in the core's cache between the inflation and the write.
const CHUNK: usize = 1 << 20;

/// Writes every job at its offset in `out`, [`READERS`] parts at once: a
/// large tensor's parts side by side, each at its own offset, so that one
/// tensor uses every core; the bytes are those of one reader per tensor,
/// whatever the count of threads. Calls `started(i)` as job `i` begins and
/// `progress(n)` as bytes land. Returns the casts' overflows to infinity
/// (a tensor's parts' summed), or the error of the first job in order that
/// failed.
pub(crate) fn write_parallel(
    out: &File,
    out_name: &str,
    jobs: Vec<ReaderJob>,
    buffer_size: usize,
    started: &(dyn Fn(usize) + Sync),
    progress: &(dyn Fn(u64) + Sync),
) -> std::result::Result<Vec<Overflow>, JobError> {
    let budget = buffer_size.clamp(1, CHUNK);
    let tasks = tasks(jobs);
    let writing = Writing::default();
    // Each part on the chunk loop the sink drives too (`Pump`), each chunk
    // written where it belongs. A part that stops because an earlier one
    // failed has no overflows (`None`).
    let done = in_order(
        tasks.len(),
        "inflate",
        || (ChunkBuffer::default(), writing.watch()),
        |(buf, _), i, earlier_failed| {
            let task = &tasks[i];
            let open = lock(&task.open).take().expect("each part is opened once");
            if task.first {
                started(task.job);
            }
            let (mut reader, transform) = open()?;
            let mut pump = Pump::new(task.len, transform, task.cast, buf, budget);
            let mut at = task.at;
            while let Some(input) = pump.next()? {
                if earlier_failed() {
                    return Ok(None);
                }
                let got = fill(&mut reader, input)?;
                let bytes = pump.process(got)?;
                writing
                    .during(|| out.write_all_at(bytes, at))
                    .map_err(|e| Error::io(e).with_output(out_name))?;
                at += bytes.len() as u64;
                progress(bytes.len() as u64);
            }
            let more = reader.read(&mut [0u8; 1])? != 0;
            Ok(Some(pump.finish(more)?))
        },
    )
    .map_err(|f| Failed::new(tasks[f.job].job, f.error))?;
    let mut overflows: Vec<Overflow> = Vec::new();
    for (i, over) in done {
        let (job, count) = (tasks[i].job, over.unwrap_or(0));
        match overflows.last_mut() {
            Some(o) if o.job == job => o.count += count,
            _ if count > 0 => overflows.push(Overflow { job, count }),
            _ => {}
        }
    }
    Ok(overflows)
}

/// One part of a job, as a worker takes it.
struct Task {
    /// The job (tensor) it is part of, and whether it is its first part.
    job: usize,
    first: bool,
    open: Mutex<Option<OpenBlocking>>,
    /// Its output bytes, and where they go.
    len: u64,
    at: u64,
    cast: Option<Cast>,
}

/// The jobs' parts, in order: a job's parts one after another, each at the
/// offset where the ones before it end.
fn tasks(jobs: Vec<ReaderJob>) -> Vec<Task> {
    let mut tasks = Vec::new();
    for (job, j) in jobs.into_iter().enumerate() {
        let mut at = j.at;
        for (p, part) in j.parts.into_iter().enumerate() {
            tasks.push(Task {
                job,
                first: p == 0,
                open: Mutex::new(Some(part.open)),
                len: part.len,
                at,
                cast: j.cast,
            });
            at += part.len;
        }
    }
    tasks
}

/// Runs `task(state, i, earlier_failed)` for every `i` in `0..count`,
/// [`READERS`] at once, each worker with a `state` of its own, taking the
/// tasks in order. The answer is the sequential one: every task's outcome
/// by index, or the failure of the first task in order that failed. A task
/// is not started once one before it is known to have failed, and
/// `earlier_failed` tells a running one that it may stop.
pub(crate) fn in_order<S, T: Send, E: Send>(
    count: usize,
    name: &str,
    state: impl Fn() -> S + Sync,
    task: impl Fn(&mut S, usize, &dyn Fn() -> bool) -> std::result::Result<T, E> + Sync,
) -> std::result::Result<Vec<(usize, T)>, Failed<E>> {
    let next = AtomicUsize::new(0);
    // The first task known to have failed (`usize::MAX`: none).
    let failed = AtomicUsize::new(usize::MAX);
    let outcomes = Mutex::new(Vec::with_capacity(count));
    let work = || {
        let mut own = state();
        loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            if i >= count || failed.load(Ordering::SeqCst) < i {
                return;
            }
            let earlier_failed = || failed.load(Ordering::SeqCst) < i;
            let outcome = task(&mut own, i, &earlier_failed);
            if outcome.is_err() {
                failed.fetch_min(i, Ordering::SeqCst);
            }
            lock(&outcomes).push((i, outcome));
        }
    };
    std::thread::scope(|s| {
        // A thread that cannot be started leaves its share to the others.
        let helpers: Vec<_> = (1..READERS.min(count))
            .filter_map(|_| {
                let named = std::thread::Builder::new().name(name.into());
                named.spawn_scoped(s, work).ok()
            })
            .collect();
        work();
        // Joined one by one, not left to the scope: the scope returns once
        // the closures are done, while their threads may still be exiting,
        // and no thread may outlive the call (a fork right after it, as
        // multiprocessing does, must find this one thread alone).
        for helper in helpers {
            if let Err(panic) = helper.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap_or_else(|e| e.into_inner());
    outcomes.sort_unstable_by_key(|(i, _)| *i);
    outcomes
        .into_iter()
        .map(|(i, outcome)| outcome.map(|t| (i, t)).map_err(|e| Failed::new(i, e)))
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io_util::{another_writes, while_another_writes};
    use crate::source::{BlockingPart, BlockingRead};
    use crate::transform::Transform;
    use crate::ErrorKind;
    use std::io::{self, Cursor};
    use std::sync::{Arc, Condvar};
    use std::time::Duration;

    /// A flag one job raises and another waits for (with a generous
    /// timeout, so that a wrong implementation fails instead of hanging).
    #[derive(Default)]
    struct Signal(Mutex<bool>, Condvar);

    impl Signal {
        fn raise(&self) {
            *self.0.lock().unwrap() = true;
            self.1.notify_all();
        }
        fn wait(&self) -> bool {
            let g = self.0.lock().unwrap();
            let (g, _) = self
                .1
                .wait_timeout_while(g, Duration::from_secs(60), |up| !*up)
                .unwrap();
            *g
        }
    }

    /// Yields `data`, then fails at its end with `fail` if given, after
    /// `before` (if any) has run.
    struct Scripted {
        data: Cursor<Vec<u8>>,
        fail: Option<&'static str>,
        before: Option<Box<dyn FnMut() + Send>>,
    }

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.data.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if let Some(mut f) = self.before.take() {
                f();
            }
            match self.fail {
                Some(msg) => Err(io::Error::other(msg)),
                None => Ok(0),
            }
        }
    }

    fn job(at: u64, reader: Scripted) -> ReaderJob {
        let len = reader.data.get_ref().len() as u64;
        let open = Box::new(move || Ok((Box::new(reader) as BlockingRead, Transform::Identity)));
        ReaderJob::whole(open, len, at, None)
    }

    fn scripted(data: Vec<u8>, fail: Option<&'static str>) -> Scripted {
        Scripted {
            data: Cursor::new(data),
            fail,
            before: None,
        }
    }

    #[test]
    fn the_first_failure_in_order_is_the_error_whichever_fails_first() {
        // Tensor 1 fails only after tensor 2 has failed; tensor 3 is fine.
        // The error is tensor 1's, as it would be one tensor at a time.
        let signal = Arc::new(Signal::default());
        let (s1, s2) = (signal.clone(), signal.clone());
        let mut one = scripted(vec![1; 500], Some("one"));
        one.before = Some(Box::new(move || assert!(s1.wait(), "tensor 2 never ran")));
        let mut two = scripted(vec![2; 500], Some("two"));
        two.before = Some(Box::new(move || s2.raise()));
        let jobs = vec![
            job(0, scripted(vec![0; 500], None)),
            job(500, one),
            job(1000, two),
            job(1500, scripted(vec![3; 500], None)),
        ];
        let out = tempfile::tempfile().unwrap();
        let JobError { job: i, error: e } =
            write_parallel(&out, "out", jobs, 1 << 20, &|_| {}, &|_| {}).unwrap_err();
        assert_eq!(i, 1, "{e}");
        assert!(e.to_string().contains("one"), "{e}");
    }

    /// A reader that counts itself among the live ones while it exists.
    struct Counted {
        data: Cursor<Vec<u8>>,
        live: Arc<(AtomicUsize, AtomicUsize)>,
    }

    impl Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.data.read(buf)
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.live.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// One tensor in parts, read side by side, lands as one reader of it
    /// would write it, whatever the parts; and never more than [`READERS`]
    /// parts are open at once, each through a buffer of at most the
    /// buffer size: the bytes held are bounded by READERS x (buffer +
    /// reader), not by the tensor.
    #[test]
    fn a_tensor_in_parts_lands_as_one_reader_writes_it() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let whole = || {
            let d = data.clone();
            let open: OpenBlocking = Box::new(move || {
                Ok((
                    Box::new(Cursor::new(d)) as BlockingRead,
                    Transform::Identity,
                ))
            });
            ReaderJob::whole(open, data.len() as u64, 3, None)
        };
        let head = vec![9u8; 3];
        let out = tempfile::tempfile().unwrap();
        out.write_all_at(&head, 0).unwrap();
        write_parallel(&out, "out", vec![whole()], 4096, &|_| {}, &|_| {}).unwrap();
        let want = crate::copy::job::testing::contents(&out);
        assert_eq!(want[3..], data[..]);
        for part_len in [1usize, 999, 4096, 12_345] {
            let live = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
            let parts = data
                .chunks(part_len)
                .map(|chunk| {
                    let (chunk, live) = (chunk.to_vec(), live.clone());
                    BlockingPart {
                        len: chunk.len() as u64,
                        open: Box::new(move || {
                            let now = live.0.fetch_add(1, Ordering::SeqCst) + 1;
                            live.1.fetch_max(now, Ordering::SeqCst);
                            let r = Counted {
                                data: Cursor::new(chunk),
                                live,
                            };
                            Ok((Box::new(r) as BlockingRead, Transform::Identity))
                        }),
                    }
                })
                .collect();
            let job = ReaderJob {
                parts,
                at: 3,
                cast: None,
            };
            let out = tempfile::tempfile().unwrap();
            out.write_all_at(&head, 0).unwrap();
            let started = AtomicUsize::new(0);
            let count = |_| {
                started.fetch_add(1, Ordering::SeqCst);
            };
            write_parallel(&out, "out", vec![job], 4096, &count, &|_| {}).unwrap();
            let got = crate::copy::job::testing::contents(&out);
            assert!(got == want, "parts of {part_len} bytes");
            assert_eq!(started.load(Ordering::SeqCst), 1, "the tensor begins once");
            let most = live.1.load(Ordering::SeqCst);
            assert!((1..=READERS).contains(&most), "{most} parts open at once");
            assert_eq!(live.0.load(Ordering::SeqCst), 0, "every part closed");
        }
    }

    /// A failing part names its tensor, not the part.
    #[test]
    fn a_failing_part_is_its_tensors_failure() {
        let part = |data: Vec<u8>, fail| BlockingPart {
            len: data.len() as u64,
            open: Box::new(move || {
                let r = scripted(data, fail);
                Ok((Box::new(r) as BlockingRead, Transform::Identity))
            }),
        };
        let first = job(0, scripted(vec![1; 10], None));
        let split = ReaderJob {
            parts: vec![part(vec![2; 10], None), part(vec![3; 10], Some("bad part"))],
            at: 10,
            cast: None,
        };
        let out = tempfile::tempfile().unwrap();
        let JobError { job: i, error: e } =
            write_parallel(&out, "out", vec![first, split], 4, &|_| {}, &|_| {}).unwrap_err();
        assert_eq!(i, 1, "{e}");
        assert!(e.to_string().contains("bad part"), "{e}");
    }

    /// Another thread's write is seen only by the threads of the call that
    /// makes it, and only while they run it.
    #[test]
    fn another_write_is_seen_only_while_the_readers_run() {
        assert!(!another_writes(), "no writer before");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let mut one = scripted(vec![1; 10], None);
        one.before = Some(Box::new(move || log.lock().unwrap().push(another_writes())));
        let out = tempfile::tempfile().unwrap();
        write_parallel(&out, "out", vec![job(0, one)], 4, &|_| {}, &|_| {}).unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [false],
            "a lone reader writes after its reads"
        );
        assert!(while_another_writes(another_writes));
        assert!(!another_writes(), "no writer after");
    }

    #[test]
    fn short_and_long_readers_fail_as_the_sink_says() {
        let mut short = job(0, scripted(vec![0; 10], None));
        short.parts[0].len = 12;
        let out = tempfile::tempfile().unwrap();
        let JobError { error: e, .. } =
            write_parallel(&out, "out", vec![short], 4, &|_| {}, &|_| {}).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                ErrorKind::TensorTooShort {
                    expected: 12,
                    actual: 10
                }
            ),
            "{e}"
        );
        let mut long = job(0, scripted(vec![0; 10], None));
        long.parts[0].len = 8;
        let JobError { error: e, .. } =
            write_parallel(&out, "out", vec![long], 4, &|_| {}, &|_| {}).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::TensorTooLong { expected: 8 }),
            "{e}"
        );
    }
}
