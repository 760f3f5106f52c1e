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
