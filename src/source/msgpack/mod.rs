//! Flax MessagePack files (`flax_model.msgpack`, anything written by
//! `flax.serialization.msgpack_serialize` or `to_bytes`) as a source: each
//! array leaf is a tensor named by its nested keys joined with `.`
//! (`params.Dense_0.kernel`); leaves that are not arrays (a step count, a
//! learning rate, a string) are skipped and counted.
//!
//! Flax writes an array as MessagePack ext type 1 (type 3 for a numpy
//! scalar, a 0-d array) holding `[shape, dtype name, row-major bytes]`
//! (`ndarray`), and an array over 2^30 bytes as a map
//! `{"__msgpack_chunked_array__": true, "shape": {...}, "chunks": {...}}`
//! of 1-d pieces, read here as one tensor whose bytes are its chunks' in
//! order. The bytes are little-endian: `tobytes` on the machines Flax runs on.
//!
//! The reader: `rmp`'s low-level decoder (the MessagePack crate the
//! `rmp-serde` and `rmpv` crates are built on) decodes each marker; the
//! walk (`walk`) reads lengths itself and steps over payloads without
//! reading them, through a cursor over the file, so a file of any size is
//! listed in the memory of its listing. A value decoder (`rmpv`,
//! `rmp-serde`) would hold every array's bytes.
//!
//! Recognised by content ([`looks_like_msgpack`]): a map of at least one
//! entry whose first key is a printable string.

mod ndarray;
mod read;
mod walk;

use std::fs::File;
use std::io::Read;
use std::sync::Arc;

use self::walk::{walk, Data};
use super::backed::{FileBacked, Places};
use super::cursor::FileCursor;
use super::format::{FileInput, FormatRow, Stream};
use super::{BlockingRead, Source, Stamp};
use crate::error::note::Note;
use crate::Result;

/// The Flax MessagePack row of the format table: a map whose first key is
/// printable; spooled from a stream.
pub(crate) const ROW: FormatRow = FormatRow {
    magic: Some(looks_like_msgpack),
    ..FormatRow::new(
        "msgpack",
        "a Flax MessagePack file",
        open_file,
        Stream::Spool("a Flax MessagePack file needs random access"),
    )
};

/// Opens the file, says how many leaves were skipped, and names its
/// tensors as PyTorch does when `--names hf` asks.
fn open_file(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    let mut src = MsgpackSource::open(o.file, o.len, o.input)?;
    src.origin = o.origin;
    if src.places.skipped > 0 {
        let more = if src.places.skipped as usize > src.places.skipped_paths.len() {
            ", ..."
        } else {
            ""
        };
        (o.notice)(&Note::Info(crate::printable_line(&format!(
            "{}: skipped {} values that are not arrays: {}{more}",
            o.input,
            src.places.skipped,
            src.places.skipped_paths.join(", ")
        ))));
    }
    super::hf::named(Box::new(src), o.options, super::hf::Convention::Flax)
}

/// The MessagePack reader's errors (they live in the error layer).
pub use crate::error::msgpack as error;

/// A Flax MessagePack file as a source.
pub type MsgpackSource = FileBacked<MsgpackPlaces>;

/// Where a Flax file's arrays are, and the leaves that were not arrays.
#[derive(Debug)]
pub struct MsgpackPlaces {
    data: Vec<Data>,
    skipped: u64,
    skipped_paths: Vec<String>,
}

impl MsgpackSource {
    /// Lists the arrays of the file `file`, `len` bytes long.
    pub fn open(file: File, len: u64, input: &str) -> Result<Self> {
        let walked = walk(&file, len).map_err(|e| e.with_input(input))?;
        let (tensors, data) = walked.tensors.into_iter().map(|t| (t.meta, t.data)).unzip();
        let places = MsgpackPlaces {
            data,
            skipped: walked.skipped,
            skipped_paths: walked.skipped_paths,
        };
        let stamp = Stamp::of(&file, len);
        Ok(FileBacked::new(
            input,
            vec![(Arc::new(file), stamp)],
            tensors,
            places,
        ))
    }

    /// How many leaves were not arrays, and the first few of their paths.
    pub fn skipped(&self) -> (u64, &[String]) {
        (self.places.skipped, &self.places.skipped_paths)
    }
}

impl Places for MsgpackPlaces {
    fn span(&self, k: usize) -> Option<(usize, u64, u64)> {
        let Data::One { offset, len } = self.data[k] else {
            return None;
        };
        Some((0, offset, len))
    }

    /// A reader of a chunked tensor's bytes, chunk after chunk.
    fn reader(source: &MsgpackSource, k: usize) -> Option<BlockingRead> {
        let Data::Chunks(places) = &source.places.data[k] else {
            return None;
        };
        Some(Box::new(Chunks {
            file: source.files()[0].clone(),
            places: places.clone(),
            next: 0,
            current: None,
        }))
    }
}

/// The chunks of a chunked array read in order, each from its place.
struct Chunks {
    file: Arc<File>,
    places: Vec<(u64, u64)>,
    next: usize,
    current: Option<FileCursor<Arc<File>>>,
}

impl Read for Chunks {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(c) = &mut self.current {
                let n = c.read(out)?;
                if n > 0 || out.is_empty() {
                    return Ok(n);
                }
            }
            let Some(&(offset, len)) = self.places.get(self.next) else {
                return Ok(0);
            };
            self.next += 1;
            self.current = Some(FileCursor::new(self.file.clone(), offset, offset + len));
        }
    }
}

/// Whether `first` (an input's first bytes) begins like a Flax file: a
/// map of at least one entry whose first key is a string of printable
/// UTF-8 (as far as the bytes go).
///
/// ```
/// use safetensors_stream::source::msgpack::looks_like_msgpack;
///
/// assert!(looks_like_msgpack(b"\x81\xa6params\x81\xa7Dense_0"));
/// assert!(!looks_like_msgpack(b"\x80"));
/// assert!(!looks_like_msgpack(b"\x81\x01\x02"));
/// assert!(!looks_like_msgpack(b"\x81\xa3a\x00b"));
/// ```
pub fn looks_like_msgpack(first: &[u8]) -> bool {
    let (entries, rest) = match first {
        [m @ 0x81..=0x8f, rest @ ..] => (u32::from(m & 0x0f), rest),
        [0xde, a, b, rest @ ..] => (u32::from(u16::from_be_bytes([*a, *b])), rest),
        [0xdf, a, b, c, d, rest @ ..] => (u32::from_be_bytes([*a, *b, *c, *d]), rest),
        _ => return false,
    };
    let (len, key) = match rest {
        [m @ 0xa0..=0xbf, key @ ..] => (usize::from(m & 0x1f), key),
        [0xd9, n, key @ ..] => (usize::from(*n), key),
        [0xda, a, b, key @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), key),
        _ => return false,
    };
    let key = &key[..len.min(key.len())];
    let printable = match std::str::from_utf8(key) {
        Ok(s) => s,
        // Cut inside a character by the end of what was read: the part before it.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&key[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return false,
    };
    entries > 0 && !printable.chars().any(char::is_control)
}
