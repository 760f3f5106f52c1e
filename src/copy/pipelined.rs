//! One large tensor whose bytes lie in a file and change on the way (a
//! cast, a byte swap), copied on both cores: a thread reads pieces with
//! positional reads and runs them through the element pipeline, while the
//! calling thread writes the pieces it has finished, in order.
//!
//! Why: the serial copy ([`super::positional::copy_buffered`]) runs
//! `pread`, the cast and `write` one after another, each bound by the
//! kernel or memory (benches/results-cast-pipeline.md). Here the writing
//! thread only writes; the other core reads and casts straight into the
//! buffer that is written.
//!
//! Why not cast from a mapping of the input (one memory copy fewer, as
//! [`super::mapped`] copies verbatim bytes): our code would then read the
//! mapping itself, and a file truncated under us would raise `SIGBUS`
//! instead of failing a call; with the read on its own core, the `pread`'s
//! copy is hidden behind the write anyway.
//!
//! Pieces are sized for the cache: a piece's input and output fit in a
//! core's L2 while it is cast, and are
//! written while still in the shared L3. A few pieces are in flight at
//! once ([`IN_FLIGHT`]), so a short stall of either thread does not stop
//! the other; memory is that many pieces and one input piece, within the
//! sink's buffer size. Output pieces end on multiples of
//! [`super::mapped::WRITE_PIECE`] in the output, as the kernel copy's do.

use std::fs::File;
use std::io::{Seek, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use super::job::SpanJob;
use super::mapped::WRITE_PIECE;
use super::positional::read_exact_at;
use crate::sink::elements::Elements;
use crate::{Error, Result};

/// A tensor at least this long is copied on two threads: below it, starting
/// a thread costs more than the overlap saves.
pub(super) const PIPELINE_MIN: u64 = 4 << 20;

/// Output bytes of a piece, at most: with its input (at most twice as
/// many, an F32 -> BF16 cast) it stays well within a 1 MiB L2.
const PIECE: usize = 256 * 1024;

/// Pieces handed to the writer and not yet given back, at most.
const IN_FLIGHT: usize = 4;

/// A finished piece: a buffer and how many of its bytes are output.
struct Piece {
    buf: Vec<u8>,
    len: usize,
}

/// Copies `job` to `out` at its offset, reading and casting on a second
/// thread while this one writes. Returns the bytes written and the cast's
/// overflows to infinity, or `None` when no thread could be started (the
/// caller then copies it serially; nothing was read or written).
/// `buffer_size` bounds the bytes held: pieces shrink to fit it.
pub(super) fn copy_pipelined(
    job: &SpanJob,
    out: &File,
    buffer_size: usize,
    progress: &mut impl FnMut(u64),
) -> Option<Result<(u64, u64)>> {
    let span = &job.span;
    let elements = Elements::new(job.out_len(), span.transform, job.cast);
    let shape = Shape::of(job, buffer_size, out);
    // Full pieces one way, empty buffers back the other.
    let (to_writer, filled) = sync_channel::<Piece>(IN_FLIGHT);
    let (to_reader, empty) = sync_channel::<Vec<u8>>(IN_FLIGHT);
    let shape = &shape;
    std::thread::scope(|s| {
        let reader = std::thread::Builder::new()
            .name("cast".into())
            .spawn_scoped(s, move || produce(job, elements, shape, &to_writer, &empty))
            .ok()?;
        let written = consume(out, &filled, &to_reader, progress);
        // The reader stops at its next piece once we stop taking them.
        drop(filled);
        drop(to_reader);
        // Joined here, not left to the scope: no thread outlives the call.
        let produced = reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // Pieces are written in order, so whichever side failed first in
        // the tensor's order is the error; a write's failure stops the
        // reader, whose "stopped" then says nothing.
        Some(match (written, produced) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(Stop::Failed(e))) => Err(e),
            (Ok(_), Err(Stop::WriterGone)) => unreachable!("the writer took every piece"),
            (Ok(n), Ok(overflowed)) => Ok((n, overflowed)),
        })
    })
}

/// How the tensor is cut: input bytes per piece (whole units of the
/// pipeline), the first piece's (shorter, so that later ones end on
/// multiples of [`WRITE_PIECE`] in the output), and output bytes per piece.
struct Shape {
    in_piece: usize,
    first_in: usize,
    out_piece: usize,
}

impl Shape {
    fn of(job: &SpanJob, buffer_size: usize, out: &File) -> Shape {
        let (iw, ow) = job.cast.map_or((1, 1), |c| (c.in_width(), c.out_width()));
        let unit = job.span.transform.unit().max(iw);
        // Held at once: IN_FLIGHT output pieces and, with a cast, the
        // input's room (without one, pieces are made in place).
        let held = IN_FLIGHT + usize::from(job.cast.is_some());
        let budget = (buffer_size / held).clamp(4096, PIECE);
        let in_piece = (budget / ow.max(iw) * iw / unit).max(1) * unit;
        let out_piece = in_piece / iw * ow;
        // The first piece ends on a multiple of WRITE_PIECE in the output
        // when whole units allow it.
        let at = (&*out).stream_position().unwrap_or(0);
        let past = (at % WRITE_PIECE as u64) as usize;
        let first_out = (WRITE_PIECE - past) % WRITE_PIECE % out_piece;
        let first_in = first_out / ow * iw;
        let aligned = first_in > 0 && first_out % ow == 0 && first_in % unit == 0;
        Shape {
            in_piece,
            first_in: if aligned { first_in } else { in_piece },
            out_piece,
        }
    }
}

/// Why the reading side stopped early.
enum Stop {
    /// Reading, or the pipeline, failed: the copy's error.
    Failed(Error),
    /// The writer stopped taking pieces (its own error is the answer).
    WriterGone,
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Failed(e)
    }
}

/// The reading side: each piece read, run through `elements` into an
/// empty buffer (or in place, without a cast), and sent to the writer.
/// Returns the cast's overflows to infinity.
fn produce(
    job: &SpanJob,
    mut elements: Elements,
    shape: &Shape,
    to_writer: &SyncSender<Piece>,
    empty: &Receiver<Vec<u8>>,
) -> std::result::Result<u64, Stop> {
    let span = &job.span;
    let cast = job.cast.is_some();
    // The input's room, with a cast; without, each piece's own buffer.
    let mut input = vec![0u8; if cast { shape.in_piece } else { 0 }];
    let buf_len = if cast {
        shape.out_piece
    } else {
        shape.in_piece
    };
    let mut made = 0;
    let mut want = shape.first_in;
    while elements.left() > 0 {
        // A buffer the writer gave back, or a new one while fewer than
        // IN_FLIGHT exist.
        let mut buf = match made < IN_FLIGHT {
            true => {
                made += 1;
                vec![0u8; buf_len]
            }
            false => empty.recv().map_err(|_| Stop::WriterGone)?,
        };
        let n = elements.next_chunk(want);
        want = shape.in_piece;
        let done = span.len - elements.left();
        let at = span.offset + done;
        let len = match cast {
            true => {
                let input = &mut input[..n];
                read_exact_at(None, &span.file, input, at, span.len, done)?;
                elements.process(input, &mut buf)?.len()
            }
            false => {
                let input = &mut buf[..n];
                read_exact_at(None, &span.file, input, at, span.len, done)?;
                elements.process(input, &mut [])?.len()
            }
        };
        to_writer
            .send(Piece { buf, len })
            .map_err(|_| Stop::WriterGone)?;
    }
    Ok(elements.finish()?)
}

/// The writing side: every piece, in order, at the file's offset; each
/// buffer back to the reader. Returns the bytes written.
fn consume(
    mut out: &File,
    filled: &Receiver<Piece>,
    to_reader: &SyncSender<Vec<u8>>,
    progress: &mut impl FnMut(u64),
) -> Result<u64> {
    let mut written = 0u64;
    // Ends when the reader is done (or failed: its error is then the answer).
    while let Ok(piece) = filled.recv() {
        out.write_all(&piece.buf[..piece.len])?;
        written += piece.len as u64;
        progress(piece.len as u64);
        // The reader may be done and gone: the buffer is then just freed.
        let _ = to_reader.try_send(piece.buf);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_cache::BlockCache;
    use crate::cast::Cast;
    use crate::copy::job::testing::contents;
    use crate::copy::positional::copy_buffered;
    use crate::sink::elements::ChunkBuffer;
    use crate::source::FileSpan;
    use crate::transform::Transform;
    use crate::{Dtype, ErrorKind};
    use std::sync::Arc;

    /// F32s of every kind a cast meets (normals, subnormals, NaNs, values
    /// that overflow F16), `count` of them after `lead` bytes of file.
    fn floats(lead: usize, count: usize) -> Arc<File> {
        let mut next = crate::dequant::xorshift(40);
        let mut bytes = vec![7u8; lead];
        for i in 0..count {
            let bits = match i % 5 {
                0 => 0x4780_0000 + (next() as u32 & 0xffff), // past F16's range
                1 => next() as u32 & 0x807f_ffff,            // subnormal
                _ => next() as u32,
            };
            bytes.extend_from_slice(&bits.to_le_bytes());
        }
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&bytes).unwrap();
        Arc::new(f)
    }

    fn job(file: &Arc<File>, offset: u64, len: u64, swap: bool, cast: Option<Cast>) -> SpanJob {
        let transform = match swap {
            true => Transform::SwapBytes { width: 4 },
            false => Transform::Identity,
        };
        let span = FileSpan {
            file: file.clone(),
            offset,
            len,
            transform,
            crc: None,
        };
        SpanJob { span, cast }
    }

    /// An output file with `head` bytes written, at its end.
    fn output(head: usize) -> File {
        let mut out = tempfile::tempfile().unwrap();
        out.write_all(&vec![1u8; head]).unwrap();
        out
    }

    /// The serial copy's answer: the output's bytes and the result.
    fn serial(job: &SpanJob, head: usize, size: usize) -> (Vec<u8>, Result<(u64, u64)>) {
        let mut out = output(head);
        let (mut buf, mut cache) = (ChunkBuffer::default(), BlockCache::default());
        let r = copy_buffered(job, &mut out, &mut buf, &mut cache, size, &mut |_| {});
        (contents(&out), r)
    }

    fn pipelined(job: &SpanJob, head: usize, size: usize) -> (Vec<u8>, Result<(u64, u64)>, u64) {
        let out = output(head);
        let mut seen = 0;
        let r = copy_pipelined(job, &out, size, &mut |n| seen += n).expect("a thread");
        (contents(&out), r, seen)
    }

    /// Whatever the cast, byte swap, piece size and where the output
    /// starts, the two threads write the bytes the serial copy writes and
    /// count the same overflows.
    #[test]
    fn pieces_land_as_the_serial_copy_writes_them() {
        let count = 300_001;
        let file = floats(12, count);
        let len = 4 * count as u64;
        let casts = [
            None,
            Some((Dtype::F32, Dtype::BF16)),
            Some((Dtype::F32, Dtype::F16)),
            Some((Dtype::F32, Dtype::F64)),
            Some((Dtype::BF16, Dtype::F32)),
        ];
        for cast in casts {
            let cast = cast.map(|(a, b)| Cast::new(a, b).unwrap());
            for swap in [false, true] {
                for size in [20_000, 1 << 20, 4 << 20] {
                    for head in [0, 88, WRITE_PIECE - 6, WRITE_PIECE + 2] {
                        let job = job(&file, 12, len, swap, cast);
                        let (want, w) = serial(&job, head, size);
                        let (got, g, seen) = pipelined(&job, head, size);
                        let what = format!("{cast:?} swap {swap} size {size} head {head}");
                        assert!(got == want, "{what}");
                        assert_eq!(g.unwrap(), w.unwrap(), "{what}");
                        assert_eq!(seen, (want.len() - head) as u64, "{what}");
                    }
                }
            }
        }
    }

    /// A file shorter than its tensor: the error says how many of the
    /// tensor's bytes there were, as the serial copy's does, after the
    /// bytes before the missing piece were written.
    #[test]
    fn a_short_file_is_the_tensors_error() {
        let file = floats(0, 200_000);
        let cast = Some(Cast::new(Dtype::F32, Dtype::BF16).unwrap());
        let job = job(&file, 0, 4 * 250_000, false, cast);
        let (_, want) = serial(&job, 0, 1 << 20);
        let (got, e, _) = pipelined(&job, 0, 1 << 20);
        let (want, e) = (want.unwrap_err(), e.unwrap_err());
        assert!(
            matches!(
                e.kind(),
                ErrorKind::TensorTooShort {
                    expected: 1_000_000,
                    actual: 800_000
                }
            ),
            "{e}"
        );
        assert_eq!(e.to_string(), want.to_string());
        assert!(!got.is_empty() && got.len() <= 400_000, "{}", got.len());
    }

    /// A write that fails is the error, and the reading thread stops.
    #[test]
    fn a_failed_write_is_the_error_and_stops_the_reader() {
        let file = floats(0, 1_000_000);
        let job = job(&file, 0, 4_000_000, false, None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, b"").unwrap();
        let read_only = File::open(&path).unwrap();
        let e = copy_pipelined(&job, &read_only, 1 << 20, &mut |_| {})
            .expect("a thread")
            .unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Io(_)), "{e}");
    }
}
