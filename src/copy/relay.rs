//! Tensors that only blocking readers produce (dequantized weights,
//! inflated members), into the async sink: an object, a stream, a
//! checksummed output, where nothing can be written beside the sink. A run
//! of them is read on one thread of the blocking pool, each tensor through
//! the one element pipeline ([`Pump`]) as the sink drives it, its output
//! gathered into pieces of [`PIECE`] bytes, many small tensors a piece,
//! which the sink writes as they come.
//!
//! Why not a bridge per tensor (a trip to the blocking pool per chunk, a
//! fresh buffer zeroed per tensor): for many small tensors, its futex
//! calls, `madvise`s and page faults cost more CPU than the bytes
//! (benches/README.md, "Figures behind the comments"). Here a run costs
//! one trip to the pool, and a message per piece; the
//! pieces go round between the thread and the sink, allocated once.
//!
//! Memory: [`PIECES`] pieces and the pipeline's chunk buffer (at most
//! [`CHUNK`]), whatever the run's length.

use std::sync::mpsc as std_mpsc;

use tokio::sync::mpsc;

use super::job::{JobError, Overflow, ReaderJob};
use crate::io_util::fill;
use crate::sink::elements::{ChunkBuffer, Pump};
use crate::Error;

/// Bytes of output a piece holds: large enough that a message carries many
/// small tensors, small enough to stay in cache between its copies.
pub(super) const PIECE: usize = 1 << 20;

/// Pieces going round: one being filled, one being written, one waiting.
const PIECES: usize = 3;

/// The most the pipeline reads of a tensor at a time.
const CHUNK: usize = 1 << 20;

/// What the reading thread tells the sink's side.
pub(super) enum Relayed {
    /// Output bytes, in plan order; `job` is the run's tensor its last byte
    /// belongs to (a write that fails is that tensor's failure).
    Piece { bytes: Vec<u8>, job: usize },
    /// The run ended: the casts' overflows to infinity, or the failure.
    Done(std::result::Result<Vec<Overflow>, JobError>),
}

/// The sink's end of a run being read.
pub(super) struct Relay {
    from: mpsc::Receiver<Relayed>,
    /// Pieces written, given back to be filled again.
    back: std_mpsc::Sender<Vec<u8>>,
}

impl Relay {
    /// Starts reading `jobs` (tensors back to back in plan order) on the
    /// blocking pool, each through the pipeline within `buffer_size`
    /// bytes; `started(i)` is called as job `i` begins. Needs a runtime.
    pub(super) fn start(
        jobs: Vec<ReaderJob>,
        buffer_size: usize,
        started: impl Fn(usize) + Send + 'static,
    ) -> Relay {
        let (to, from) = mpsc::channel(PIECES);
        let (back, pieces) = std_mpsc::channel();
        let budget = buffer_size.clamp(1, CHUNK);
        tokio::task::spawn_blocking(move || {
            let mut out = Pieces {
                to,
                pieces,
                made: 0,
                filling: Vec::new(),
            };
            let done = read_all(jobs, budget, &started, &mut out);
            // A sink gone (the copy dropped) has nothing to hear.
            if let Some(done) = done {
                let _ = out.to.blocking_send(Relayed::Done(done));
            }
        });
        Relay { from, back }
    }

    /// The next message; `None` if the thread ended without its last (a panic).
    pub(super) async fn next(&mut self) -> Option<Relayed> {
        self.from.recv().await
    }

    /// Gives a piece written back, to be filled again.
    pub(super) fn give_back(&self, mut piece: Vec<u8>) {
        piece.clear();
        // The thread may be done: the piece is then dropped.
        let _ = self.back.send(piece);
    }
}

/// The reading thread's end: pieces filled and sent, taken back when written.
struct Pieces {
    to: mpsc::Sender<Relayed>,
    pieces: std_mpsc::Receiver<Vec<u8>>,
    /// Pieces allocated so far (at most [`PIECES`]).
    made: usize,
    filling: Vec<u8>,
}

/// The sink's side went away: stop reading.
struct Gone;

impl Pieces {
    /// Appends `bytes` of job `job`, sending each piece filled.
    fn push(&mut self, mut bytes: &[u8], job: usize) -> Result<(), Gone> {
        while !bytes.is_empty() {
            if self.filling.capacity() == 0 {
                self.filling = self.empty()?;
            }
            let room = PIECE - self.filling.len();
            let n = room.min(bytes.len());
            self.filling.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.filling.len() == PIECE {
                self.send(job)?;
            }
        }
        Ok(())
    }

    /// Sends the piece being filled, if it holds anything.
    fn send(&mut self, job: usize) -> Result<(), Gone> {
        if self.filling.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.filling);
        let sent = self.to.blocking_send(Relayed::Piece { bytes, job });
        sent.map_err(|_| Gone)
    }

    /// An empty piece: a new one while fewer than [`PIECES`] exist, else
    /// one the sink gave back (waiting for it).
    fn empty(&mut self) -> Result<Vec<u8>, Gone> {
        if let Ok(piece) = self.pieces.try_recv() {
            return Ok(piece);
        }
        if self.made < PIECES {
            self.made += 1;
            return Ok(Vec::with_capacity(PIECE));
        }
        self.pieces.recv().map_err(|_| Gone)
    }
}

/// Reads every job in order into `out`: the overflows, or the first
/// failure; `None` if the sink's side went away.
fn read_all(
    jobs: Vec<ReaderJob>,
    budget: usize,
    started: &dyn Fn(usize),
    out: &mut Pieces,
) -> Option<std::result::Result<Vec<Overflow>, JobError>> {
    let mut buf = ChunkBuffer::default();
    let mut overflows: Vec<Overflow> = Vec::new();
    let mut last = 0;
    for (job, j) in jobs.into_iter().enumerate() {
        started(job);
        last = job;
        let mut count = 0;
        for part in j.parts {
            match read_part(part.open, part.len, j.cast, budget, &mut buf, out, job) {
                Ok(Ok(n)) => count += n,
                Ok(Err(e)) => return Some(Err(JobError::new(job, e))),
                Err(Gone) => return None,
            }
        }
        if count > 0 {
            overflows.push(Overflow { job, count });
        }
    }
    out.send(last).ok()?;
    Some(Ok(overflows))
}

/// Reads one part of job `job` through the pipeline into `out`: its
/// overflows, or its failure.
fn read_part(
    open: crate::source::OpenBlocking,
    len: u64,
    cast: Option<crate::cast::Cast>,
    budget: usize,
    buf: &mut ChunkBuffer,
    out: &mut Pieces,
    job: usize,
) -> Result<crate::Result<u64>, Gone> {
    let (mut reader, transform) = match open() {
        Ok(opened) => opened,
        Err(e) => return Ok(Err(e)),
    };
    let mut pump = Pump::new(len, transform, cast, buf, budget);
    loop {
        let input = match pump.next() {
            Ok(Some(input)) => input,
            Ok(None) => break,
            Err(e) => return Ok(Err(e)),
        };
        let got = match fill(&mut reader, input) {
            Ok(got) => got,
            Err(e) => return Ok(Err(Error::io(e))),
        };
        match pump.process(got) {
            Ok(bytes) => out.push(bytes, job)?,
            Err(e) => return Ok(Err(e)),
        }
    }
    let more = match std::io::Read::read(&mut reader, &mut [0u8; 1]) {
        Ok(n) => n != 0,
        Err(e) => return Ok(Err(Error::io(e))),
    };
    Ok(pump.finish(more))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{BlockingRead, OpenBlocking};
    use crate::transform::Transform;
    use std::io::Cursor;

    fn reader(data: Vec<u8>, fail: bool) -> ReaderJob {
        let len = data.len() as u64;
        let open: OpenBlocking = Box::new(move || {
            if fail {
                return Err(Error::io(std::io::Error::other("bad tensor")));
            }
            Ok((
                Box::new(Cursor::new(data)) as BlockingRead,
                Transform::Identity,
            ))
        });
        ReaderJob::whole(open, len, 0, None)
    }

    /// Every message of a run, and the bytes of its pieces in order.
    async fn relay(jobs: Vec<ReaderJob>) -> (Vec<u8>, usize, Relayed) {
        let mut relay = Relay::start(jobs, 1 << 20, |_| {});
        let (mut bytes, mut pieces) = (Vec::new(), 0);
        loop {
            match relay.next().await.expect("an end") {
                Relayed::Piece { bytes: piece, .. } => {
                    bytes.extend_from_slice(&piece);
                    pieces += 1;
                    relay.give_back(piece);
                }
                done => return (bytes, pieces, done),
            }
        }
    }

    /// 3,000 small tensors come in a few pieces, not a message each, their
    /// bytes in plan order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_tensors_come_many_a_piece_in_order() {
        let tensors: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| (0..700 + i % 300).map(|b| (b ^ i) as u8).collect())
            .collect();
        let want = tensors.concat();
        let jobs = tensors.into_iter().map(|t| reader(t, false)).collect();
        let (got, pieces, done) = relay(jobs).await;
        assert!(got == want, "the bytes in plan order");
        assert!(matches!(done, Relayed::Done(Ok(ref o)) if o.is_empty()));
        assert_eq!(pieces, want.len().div_ceil(PIECE), "pieces, not tensors");
    }

    /// The first tensor that fails is the run's failure, by its place.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_tensor_is_named_by_its_place() {
        let jobs = (0..10)
            .map(|i| reader(vec![i as u8; 100], i == 6 || i == 8))
            .collect();
        let (got, _, done) = relay(jobs).await;
        let Relayed::Done(Err(JobError { job, error })) = done else {
            panic!("a failure");
        };
        assert_eq!(job, 6, "{error}");
        assert!(error.to_string().contains("bad tensor"), "{error}");
        assert!(got.len() <= 600);
    }

    /// A reader with fewer bytes than planned fails as the sink says.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_tensor_fails() {
        let mut short = reader(vec![1; 10], false);
        short.parts[0].len = 12;
        let (_, _, done) = relay(vec![reader(vec![0; 5], false), short]).await;
        let Relayed::Done(Err(JobError { job: 1, error })) = done else {
            panic!("tensor 1 fails");
        };
        assert!(
            matches!(error.kind(), crate::ErrorKind::TensorTooShort { .. }),
            "{error}"
        );
    }
}
