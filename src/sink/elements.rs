//! The one element pipeline, free of I/O: what happens to a tensor's bytes
//! between reading and writing, whoever reads and writes them.
//!
//! Every driver (the async [`Sink`](super::Sink), the file-to-file fast
//! path, the [`Writer`](crate::Writer)) cuts a tensor into chunks of whole
//! elements sized by [`Elements::chunk_sizes`], hands each chunk to
//! [`Elements::process`] (CRC update, byte swap, cast, length accounting),
//! writes what it returns, and ends with [`Elements::finish`], which checks
//! the count and the checksum and returns how many cast elements overflowed
//! to infinity, so every driver reports overflows the same way. The
//! drivers differ only in how bytes arrive (an `AsyncRead`, positional
//! reads, a caller's slices) and leave.

use crate::cast::Cast;
use crate::transform::Transform;
use crate::{Error, ErrorKind, Result};

/// One tensor's way through: its transform, its cast, an optional CRC-32
/// over its input bytes, and the count of input bytes seen so far.
#[derive(Debug, Clone)]
pub(crate) struct Elements {
    transform: Transform,
    /// The transform's unit: chunks are cut at multiples of it.
    unit: usize,
    cast: Option<Cast>,
    crc: Option<Crc>,
    /// Input bytes the tensor has (the plan counts output bytes).
    in_len: u64,
    /// Input bytes processed so far.
    done: u64,
    /// Cast elements so far that were finite and became infinite.
    overflowed: u64,
}

/// A CRC-32 being computed, and the value it must end at.
#[derive(Debug, Clone)]
pub(crate) struct Crc {
    hasher: crc32fast::Hasher,
    expected: u32,
}

impl Crc {
    /// A check that starts from `hasher` (which may already cover bytes
    /// before the tensor, like an npz member's npy header).
    pub(crate) fn new(hasher: crc32fast::Hasher, expected: u32) -> Self {
        Crc { hasher, expected }
    }

    /// The bytes hashed must have the expected CRC-32.
    pub(crate) fn verify(self) -> Result<()> {
        let actual = self.hasher.finalize();
        match actual == self.expected {
            true => Ok(()),
            false => Err(crc_mismatch(actual, self.expected)),
        }
    }
}

// The errors every reader and driver of tensor bytes shares live with the
// errors, so that sources (below this layer) raise them too.
pub(crate) use crate::error::{crc_mismatch, too_short};

impl Elements {
    /// The pipeline for a tensor planned at `out_len` output bytes.
    pub(crate) fn new(out_len: u64, transform: Transform, cast: Option<Cast>) -> Self {
        let in_len = match cast {
            Some(c) => out_len / c.out_width() as u64 * c.in_width() as u64,
            None => out_len,
        };
        Elements {
            transform,
            unit: transform.unit(),
            cast,
            crc: None,
            in_len,
            done: 0,
            overflowed: 0,
        }
    }

    /// Also checks a CRC-32 over the input bytes as they pass.
    pub(crate) fn with_crc(mut self, crc: Crc) -> Self {
        self.crc = Some(crc);
        self
    }

    /// The input bytes the tensor has.
    pub(crate) fn in_len(&self) -> u64 {
        self.in_len
    }

    /// Input bytes still to come.
    pub(crate) fn left(&self) -> u64 {
        self.in_len - self.done
    }

    /// Whether bytes under `transform` and `cast` pass unchanged.
    pub(crate) fn unchanged(transform: Transform, cast: Option<Cast>) -> bool {
        cast.is_none() && transform.unit() == 1
    }

    /// How a budget of `buffer_size` bytes splits into an input chunk and
    /// a cast's output chunk: the input chunk is whole elements (a multiple
    /// of the transform's and the cast's unit), no larger than the tensor.
    pub(crate) fn chunk_sizes(&self, buffer_size: usize) -> (usize, usize) {
        let (iw, ow) = self.cast.map_or((1, 1), |c| (c.in_width(), c.out_width()));
        let unit = self.unit.max(iw);
        // Input and cast output share the budget.
        let share = match self.cast {
            Some(_) => buffer_size / (iw + ow),
            None => buffer_size,
        };
        let per_chunk = (share / unit).max(1) * unit;
        let in_cap = per_chunk.min(usize::try_from(self.in_len).unwrap_or(usize::MAX));
        let out_cap = match self.cast {
            Some(_) => in_cap / iw * ow,
            None => 0,
        };
        (in_cap, out_cap)
    }

    /// The size of the next input chunk, given an input buffer of `in_cap` bytes.
    pub(crate) fn next_chunk(&self, in_cap: usize) -> usize {
        in_cap.min(usize::try_from(self.left()).unwrap_or(usize::MAX))
    }

    /// Runs one chunk of input through: CRC, transform (in place), cast
    /// into `output`. Returns the bytes to write. A chunk is whole elements
    /// except possibly the tensor's last, which [`Elements::finish`] refuses.
    pub(crate) fn process<'a>(
        &mut self,
        input: &'a mut [u8],
        output: &'a mut [u8],
    ) -> Result<&'a [u8]> {
        self.count(input.len())?;
        if let Some(crc) = &mut self.crc {
            crc.hasher.update(input);
        }
        let whole = input.len() / self.unit * self.unit;
        self.transform.apply(&mut input[..whole]);
        Ok(match self.cast {
            Some(c) => {
                let n = input.len() / c.in_width();
                let out = &mut output[..n * c.out_width()];
                self.overflowed += c.apply(&input[..n * c.in_width()], out);
                out
            }
            None => input,
        })
    }

    /// Counts bytes that pass unchanged, without touching them (a kernel
    /// copy, or a caller's slice written as it is). Only for a verbatim
    /// pipeline without a CRC.
    pub(crate) fn pass(&mut self, n: usize) -> Result<()> {
        debug_assert!(Self::unchanged(self.transform, self.cast) && self.crc.is_none());
        self.count(n)
    }

    fn count(&mut self, n: usize) -> Result<()> {
        let done = self.done.checked_add(n as u64);
        self.done = done
            .filter(|&d| d <= self.in_len)
            .ok_or_else(|| self.too_long())?;
        Ok(())
    }

    /// The error for a tensor whose bytes go on past its length.
    pub(crate) fn too_long(&self) -> Error {
        Error::new(ErrorKind::TensorTooLong {
            expected: self.in_len,
        })
    }

    /// The error for a tensor whose bytes stopped early.
    pub(crate) fn too_short(&self) -> Error {
        too_short(self.in_len, self.done)
    }

    /// Checks that every byte came and the checksum holds. Returns how
    /// many elements the cast turned from finite to infinite (0 without a
    /// cast), for the run's warnings.
    pub(crate) fn finish(self) -> Result<u64> {
        if self.done != self.in_len {
            return Err(self.too_short());
        }
        if let Some(crc) = self.crc {
            crc.verify()?;
        }
        Ok(self.overflowed)
    }
}

/// A tensor's chunk buffers: input and cast output, carved from one
/// allocation that grows to the budget once and is reused for every tensor.
#[derive(Debug, Default)]
pub(crate) struct ChunkBuffer {
    buf: Vec<u8>,
}

impl ChunkBuffer {
    /// No buffer yet (the first tensor's split allocates it).
    pub(crate) const EMPTY: ChunkBuffer = ChunkBuffer { buf: Vec::new() };

    /// An input buffer of `in_cap` bytes after `lead` bytes of room, and an
    /// output buffer of `out_cap`.
    pub(crate) fn split(
        &mut self,
        lead: usize,
        in_cap: usize,
        out_cap: usize,
    ) -> (&mut [u8], &mut [u8], &mut [u8]) {
        let total = lead + in_cap + out_cap;
        if self.buf.len() < total {
            self.buf.resize(total, 0);
        }
        let (head, rest) = self.buf.split_at_mut(lead);
        let (input, rest) = rest.split_at_mut(in_cap);
        (head, input, &mut rest[..out_cap])
    }

    /// The first `n` bytes: where [`split`](Self::split)'s room and input
    /// lie back to back, to fill both with one read.
    pub(crate) fn front(&mut self, n: usize) -> &mut [u8] {
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        &mut self.buf[..n]
    }
}

/// One tensor's chunk loop, without I/O: the async sink and the blocking
/// readers drive it alike, and so agree on chunk sizes, on when a tensor is
/// too short or too long, and on the final checks:
///
/// ```text
/// let mut pump = Pump::new(len, transform, cast, buf, budget);
/// while let Some(input) = pump.next()? {     // the last chunk was whole? room for the next
///     let got = read(input)?;                // fill it (fewer at the end)
///     let bytes = pump.process(got)?;        // through the pipeline
///     write(bytes)?;
/// }
/// let overflowed = pump.finish(more_bytes)?; // past its end? checks
/// ```
///
/// The step between chunks ([`Pump::next`]) and the pipeline's set-up are
/// here, not in each driver: only the reads and writes are the drivers' own.
pub(crate) struct Pump<'b> {
    elements: Elements,
    input: &'b mut [u8],
    output: &'b mut [u8],
    in_cap: usize,
    /// The chunk asked for, and what came.
    want: usize,
    got: usize,
}

impl<'b> Pump<'b> {
    /// The loop of a tensor planned at `out_len` output bytes under
    /// `transform` and `cast`, in `buf`, within a budget of `buffer_size` bytes.
    pub(crate) fn new(
        out_len: u64,
        transform: Transform,
        cast: Option<Cast>,
        buf: &'b mut ChunkBuffer,
        buffer_size: usize,
    ) -> Self {
        let elements = Elements::new(out_len, transform, cast);
        let (in_cap, out_cap) = elements.chunk_sizes(buffer_size);
        let (_, input, output) = buf.split(0, in_cap, out_cap);
        Pump {
            elements,
            input,
            output,
            in_cap,
            want: 0,
            got: 0,
        }
    }

    /// After the last chunk's bytes are written (if any): a chunk that
    /// came short means the tensor's bytes ended early; else room for the
    /// next chunk, to fill, or `None` once every byte came.
    pub(crate) fn next(&mut self) -> Result<Option<&mut [u8]>> {
        self.check_full()?;
        Ok(self.input())
    }

    /// Room for the next chunk; `None` once every byte came.
    fn input(&mut self) -> Option<&mut [u8]> {
        if self.elements.left() == 0 {
            return None;
        }
        self.want = self.elements.next_chunk(self.in_cap);
        Some(&mut self.input[..self.want])
    }

    /// The `got` bytes read into the chunk, through the pipeline: the bytes to write.
    pub(crate) fn process(&mut self, got: usize) -> Result<&[u8]> {
        self.got = got;
        self.elements
            .process(&mut self.input[..got], &mut *self.output)
    }

    /// A chunk that came short means the tensor's bytes ended early.
    fn check_full(&self) -> Result<()> {
        match self.got < self.want {
            true => Err(self.elements.too_short()),
            false => Ok(()),
        }
    }

    /// Ends the tensor: `more` says whether its reader had bytes past the
    /// end. Returns the cast's overflows to infinity.
    pub(crate) fn finish(self, more: bool) -> Result<u64> {
        if more {
            return Err(self.elements.too_long());
        }
        self.elements.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;

    #[test]
    fn chunks_are_whole_elements_of_the_transform_and_the_cast() {
        let swap = Transform::SwapBytes { width: 8 };
        let e = Elements::new(1 << 30, swap, None);
        assert_eq!(e.chunk_sizes(1000), (1000 / 8 * 8, 0));
        let cast = Cast::new(Dtype::F32, Dtype::BF16).unwrap();
        let e = Elements::new(1 << 30, Transform::Identity, Some(cast));
        let (i, o) = e.chunk_sizes(1 << 20);
        assert_eq!((i % 4, o), (0, i / 2));
        assert!(i + o <= 1 << 20);
        // Never larger than the tensor, never zero for a budget below one element.
        let e = Elements::new(6, swap, None);
        assert_eq!(e.chunk_sizes(1 << 20).0, 6);
        let e = Elements::new(64, swap, None);
        assert_eq!(e.chunk_sizes(3).0, 8);
    }

    #[test]
    fn counts_input_bytes_of_a_cast() {
        let cast = Cast::new(Dtype::F16, Dtype::F32).unwrap();
        let mut e = Elements::new(16, Transform::Identity, Some(cast));
        assert_eq!(e.in_len(), 8);
        let mut input = [0u8; 8];
        let mut output = [0u8; 16];
        assert_eq!(e.process(&mut input, &mut output).unwrap().len(), 16);
        e.finish().unwrap();
    }

    #[test]
    fn refuses_too_many_and_too_few_bytes() {
        let mut e = Elements::new(4, Transform::Identity, None);
        e.pass(3).unwrap();
        assert!(matches!(
            e.clone().pass(2).unwrap_err().kind(),
            ErrorKind::TensorTooLong { expected: 4 }
        ));
        assert!(matches!(
            e.finish().unwrap_err().kind(),
            ErrorKind::TensorTooShort {
                expected: 4,
                actual: 3
            }
        ));
    }

    #[test]
    fn checks_the_crc_of_what_passed() {
        let data = b"tensor bytes".to_vec();
        let ok = crc32fast::hash(&data);
        for (expected, good) in [(ok, true), (ok ^ 1, false)] {
            let crc = Crc::new(crc32fast::Hasher::new(), expected);
            let mut e = Elements::new(data.len() as u64, Transform::Identity, None).with_crc(crc);
            let mut input = data.clone();
            e.process(&mut input, &mut []).unwrap();
            assert_eq!(e.finish().is_ok(), good);
        }
    }
}
