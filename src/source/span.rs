//! Positional reads of an input's bytes wherever they lie: a file's
//! `pread`, an object's ranged GET. Readers that pick bytes out of a
//! tensor (dequantization reads a piece's codes and the scales that cover
//! it) read through this, so that they work on objects as on files.

use std::fmt::Debug;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Bytes that can be read at any offset, from any thread outside the async
/// runtime (a thread of tokio's blocking pool, or one of its own).
pub trait ReadAt: Send + Sync + Debug {
    /// Fills `buf` with the bytes at `offset`; an error if fewer are there.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Whether a read waits for the async runtime to make progress (an
    /// object's GET): such bytes must not be read on the runtime's own
    /// thread, which would wait for itself.
    fn waits_on_runtime(&self) -> bool {
        false
    }
}

impl ReadAt for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

/// A tensor's bytes as they are (little-endian, nothing to undo): `len`
/// bytes at `offset` of `bytes`.
///
/// ```
/// use std::sync::Arc;
/// use safetensors_stream::source::{ByteSpan, ReadAt};
///
/// let path = std::env::temp_dir().join("byte-span-doc.bin");
/// std::fs::write(&path, b"headerTENSOR").unwrap();
/// let span = ByteSpan {
///     bytes: Arc::new(std::fs::File::open(&path).unwrap()),
///     offset: 6,
///     len: 6,
/// };
/// let mut buf = [0u8; 6];
/// span.bytes.read_exact_at(&mut buf, span.offset).unwrap();
/// assert_eq!(&buf, b"TENSOR");
/// ```
#[derive(Debug, Clone)]
pub struct ByteSpan {
    /// The file or object.
    pub bytes: Arc<dyn ReadAt>,
    /// Where the tensor's first byte is.
    pub offset: u64,
    /// The tensor's length in bytes.
    pub len: u64,
}

/// The first two spans that share bytes, in file order: `(a, b, at)` with
/// `a` and `b` the callers' indices (the fourth item of each span) and `at`
/// where `b` starts. Each span is `(file, start, end, index)`: spans of
/// different files never overlap, nor do empty ones. A small header whose
/// tensors all name the same bytes would otherwise write them again and
/// again, an output of any size from a small input.
pub(crate) fn first_overlap<F: Ord + Copy>(
    mut spans: Vec<(F, u64, u64, usize)>,
) -> Option<(usize, usize, u64)> {
    spans.retain(|&(_, start, end, _)| end > start);
    spans.sort_unstable();
    // Sorted by start, any overlap shows between neighbours.
    spans.windows(2).find_map(|w| {
        let ((file, _, end, a), (next_file, next, _, b)) = (w[0], w[1]);
        (file == next_file && next < end).then_some((a, b, next))
    })
}

#[cfg(test)]
mod overlap_tests {
    use super::first_overlap;

    #[test]
    fn neighbours_in_file_order_are_compared_and_empty_spans_skipped() {
        assert_eq!(first_overlap::<u8>(vec![(0, 0, 4, 0), (0, 4, 8, 1)]), None);
        assert_eq!(
            first_overlap(vec![(0, 4, 8, 7), (0, 0, 6, 3)]),
            Some((3, 7, 4))
        );
        // The same bytes of two files; a long span over a short one.
        assert_eq!(first_overlap(vec![(0, 0, 8, 0), (1, 0, 8, 1)]), None);
        assert_eq!(
            first_overlap(vec![(0, 0, 100, 0), (0, 10, 20, 1), (0, 30, 40, 2)]),
            Some((0, 1, 10))
        );
        assert_eq!(first_overlap(vec![(0, 5, 5, 0), (0, 0, 8, 1)]), None);
    }
}
