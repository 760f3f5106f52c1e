//! Byte-exact header encoding: the layout the reference writer produces.

use std::io::{self, Write};
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::names::{lay_out, NameProblem, Order};
use super::{Header, Metadata, TensorEntry, TensorMeta, MAX_HEADER_LEN};
use crate::{Error, HeaderError, Result};

/// Bytes of header JSON gathered per write in [`EncodedHeader::write_to`].
const PIECE: usize = 64 * 1024;

/// A header laid out and encoded: the model and its exact bytes.
///
/// Its length is known from the start; the bytes themselves are written
/// on first use of [`EncodedHeader::bytes`], and a sink streams them from
/// the entries in pieces instead: a million-tensor plan need not hold a
/// second, 80 MB form of its header.
///
/// The header is shared, not copied, with the sinks that write it: they
/// check each tensor against its entry (a million-tensor plan held a second
/// list of names and lengths for that).
#[derive(Debug, Clone)]
pub struct EncodedHeader {
    /// The laid-out header: what [`EncodedHeader::header`] returns, read
    /// in the crate without the getter. Never replaced: the bytes are its.
    pub(crate) header: Arc<Header>,
    bytes: OnceLock<Vec<u8>>,
}

impl EncodedHeader {
    /// The laid-out header (tensors in offset order).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The file's first `8 + N` bytes: the length prefix and the padded JSON.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.get_or_init(|| {
            let mut bytes = Vec::with_capacity(self.len_usize());
            let mut pieces = self.pieces();
            while pieces.next_piece(&mut bytes, usize::MAX) {}
            bytes
        })
    }

    /// `8 + N`: the length of [`EncodedHeader::bytes`].
    pub fn len(&self) -> u64 {
        self.header.data_start()
    }

    /// Never: a header has at least its 8-byte prefix and `{}`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Both parts, by value. (The header is cloned only if a sink that
    /// shares it is still alive.)
    pub fn into_parts(self) -> (Header, Vec<u8>) {
        self.bytes();
        let bytes = self.bytes.into_inner().expect("written just now");
        let header = Arc::try_unwrap(self.header).unwrap_or_else(|shared| (*shared).clone());
        (header, bytes)
    }

    /// Writes the bytes to `writer` and returns their length: those of
    /// [`EncodedHeader::bytes`] if written already, else pieces of about
    /// 64 KiB made from the entries as they go, never a second whole copy
    /// of a large header.
    pub(crate) async fn write_to<W: AsyncWrite + Unpin>(&self, writer: &mut W) -> io::Result<u64> {
        if let Some(bytes) = self.bytes.get() {
            writer.write_all(bytes).await?;
            return Ok(self.len());
        }
        let mut piece = Vec::with_capacity(PIECE + 4096);
        let mut pieces = self.pieces();
        loop {
            piece.clear();
            let more = pieces.next_piece(&mut piece, PIECE);
            writer.write_all(&piece).await?;
            if !more {
                return Ok(self.len());
            }
        }
    }

    /// Calls `f` on the bytes in order, pieces of about 64 KiB made from
    /// the entries as they go (or the bytes, if made already): a digest of
    /// a plan's headers ([`plan_id`](crate::plan::plan_id)) then holds no
    /// copy of them (a copy [`EncodedHeader::bytes`] would keep through the
    /// whole run, megabytes at DeepSeek-V3's tensor count).
    pub(crate) fn each_piece(&self, mut f: impl FnMut(&[u8])) {
        if let Some(bytes) = self.bytes.get() {
            return f(bytes);
        }
        let mut piece = Vec::with_capacity(PIECE + 4096);
        let mut pieces = self.pieces();
        loop {
            piece.clear();
            let more = pieces.next_piece(&mut piece, PIECE);
            f(&piece);
            if !more {
                return;
            }
        }
    }

    /// The bytes as pieces, for a writer that need not hold them all.
    fn pieces(&self) -> Pieces<'_> {
        Pieces {
            header: &self.header,
            stage: Stage::Start,
            emitted: 0,
        }
    }

    fn len_usize(&self) -> usize {
        // header_len <= MAX_HEADER_LEN, checked by encode.
        8 + self.header.header_len as usize
    }
}

/// The header's bytes in order, a piece at a time: the prefix, the
/// metadata (a long string in pieces too: a 90 MB `__metadata__` value is
/// never held a second time, escaped, beside the plan's), then entries,
/// then the closing brace and padding.
pub(crate) struct Pieces<'a> {
    header: &'a Header,
    stage: Stage<'a>,
    /// Bytes handed out so far.
    emitted: u64,
}

/// Where [`Pieces`] is.
enum Stage<'a> {
    /// Nothing written.
    Start,
    /// Inside `__metadata__`'s object.
    Metadata(MetadataCursor<'a>),
    /// The next tensor to write.
    Tensors(usize),
    /// The header is complete.
    Done,
}

/// How far the metadata's entries are written: the entries not yet begun,
/// the one being written, which of its strings, and how much of it.
struct MetadataCursor<'a> {
    rest: std::collections::btree_map::Iter<'a, String, String>,
    entry: Option<(&'a str, &'a str)>,
    begun: usize,
    in_value: bool,
    /// Bytes of the current string out; `None` before its opening quote.
    at: Option<usize>,
}

impl<'a> MetadataCursor<'a> {
    fn new(md: &'a Metadata) -> Self {
        MetadataCursor {
            rest: md.iter(),
            entry: None,
            begun: 0,
            in_value: false,
            at: None,
        }
    }

    /// Writes entries (`"k":"v"`, comma-separated) until `buf` holds at
    /// least `min` bytes or all are out; returns whether all are.
    fn write(&mut self, buf: &mut Vec<u8>, min: usize) -> bool {
        loop {
            if buf.len() >= min {
                return false;
            }
            let (key, value) = match self.entry {
                Some(entry) => entry,
                None => {
                    let Some((k, v)) = self.rest.next() else {
                        return true;
                    };
                    if self.begun > 0 {
                        buf.push(b',');
                    }
                    self.begun += 1;
                    self.in_value = false;
                    self.at = None;
                    *self.entry.insert((k.as_str(), v.as_str()))
                }
            };
            let s = if self.in_value { value } else { key };
            let at = self.at.unwrap_or_else(|| {
                buf.push(b'"');
                0
            });
            // At least one character, ending on a character's boundary:
            // escaping goes character by character, so the parts' escapes
            // are the whole string's.
            let mut end = at.saturating_add(min.saturating_sub(buf.len()).max(1));
            end = end.min(s.len());
            while !s.is_char_boundary(end) {
                end += 1;
            }
            push_json_str_contents(buf, &s[at..end]);
            if end < s.len() {
                self.at = Some(end);
                continue;
            }
            buf.push(b'"');
            if self.in_value {
                self.entry = None;
            } else {
                buf.push(b':');
                self.in_value = true;
                self.at = None;
            }
        }
    }
}

impl Pieces<'_> {
    /// Appends to `buf` until it holds at least `min` bytes or the header
    /// is complete; returns whether more is to come.
    fn next_piece(&mut self, buf: &mut Vec<u8>, min: usize) -> bool {
        let tensors = &self.header.tensors;
        let before = buf.len();
        if let Stage::Start = self.stage {
            buf.extend_from_slice(&self.header.header_len.to_le_bytes());
            buf.push(b'{');
            self.stage = match &self.header.metadata {
                Some(md) => {
                    buf.extend_from_slice(br#""__metadata__":{"#);
                    Stage::Metadata(MetadataCursor::new(md))
                }
                None => Stage::Tensors(0),
            };
        }
        if let Stage::Metadata(cursor) = &mut self.stage {
            if cursor.write(buf, min) {
                buf.push(b'}');
                self.stage = Stage::Tensors(0);
            }
        }
        if let Stage::Tensors(mut k) = self.stage {
            let comma_first = self.header.metadata.is_some();
            while k < tensors.len() && buf.len() < min {
                if k > 0 || comma_first {
                    buf.push(b',');
                }
                push_entry(buf, &tensors[k]);
                k += 1;
            }
            self.stage = Stage::Tensors(k);
            if k == tensors.len() {
                buf.push(b'}');
                // Spaces up to N, which encode counted from these same bytes.
                let so_far = self.emitted + (buf.len() - before) as u64;
                let pad = (8 + self.header.header_len).saturating_sub(so_far);
                debug_assert!(pad < 8, "the JSON is as long as counted");
                buf.resize(buf.len() + pad as usize, b' ');
                self.stage = Stage::Done;
            }
        }
        self.emitted += (buf.len() - before) as u64;
        !matches!(self.stage, Stage::Done)
    }
}

/// Lays out `tensors` and encodes the header, byte for byte as the reference does.
///
/// Refuses a tensor named `__metadata__`, a name given twice, a shape whose
/// byte length overflows or is not whole bytes, a buffer over `u64::MAX`, and
/// a header over [`MAX_HEADER_LEN`]. Metadata keys are written sorted.
///
/// ```
/// use safetensors_stream::{Dtype, header::{encode, Order, TensorMeta}};
///
/// let enc = encode(vec![TensorMeta::new("a", Dtype::F32, [3])], None, Order::Canonical).unwrap();
/// let json = br#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}} "#;
/// assert_eq!(&enc.bytes()[..8], &56u64.to_le_bytes());
/// assert_eq!(&enc.bytes()[8..], json);
/// assert_eq!(enc.header().file_len(), 76);
/// ```
pub fn encode(
    tensors: Vec<TensorMeta>,
    metadata: Option<Metadata>,
    layout: Order,
) -> Result<EncodedHeader> {
    let mut entries: Vec<TensorEntry> = tensors
        .into_iter()
        .map(|meta| TensorEntry {
            meta,
            begin: 0,
            end: 0,
        })
        .collect();
    lay_out::<()>(&mut entries, layout, &mut []).map_err(|p| name_error(&entries, p))?;
    encode_entries(entries, metadata)
}

/// Lays out `entries` in their order (their offsets are overwritten) and
/// encodes the header. The names must be unique and none `__metadata__`:
/// the planner checks that once for all shards, [`encode`] for its callers.
pub(crate) fn encode_entries(
    mut entries: Vec<TensorEntry>,
    metadata: Option<Metadata>,
) -> Result<EncodedHeader> {
    place(&mut entries)?;
    // Only the length is computed here, so the limit is checked before
    // anything is allocated; the bytes are written when first needed, or
    // streamed (see [`EncodedHeader`]).
    let mut counter = Counter(0);
    write_open(&mut counter, metadata.as_ref());
    for (k, e) in entries.iter().enumerate() {
        if k > 0 || metadata.is_some() {
            put(&mut counter, b",");
        }
        push_entry(&mut counter, e);
    }
    let header_len = (counter.0 + 1).next_multiple_of(8);
    if header_len > MAX_HEADER_LEN {
        return Err(HeaderError::HeaderTooLarge {
            len: header_len,
            limit: MAX_HEADER_LEN,
        }
        .into());
    }
    let header = Header {
        metadata,
        tensors: entries,
        header_len,
    };
    Ok(EncodedHeader {
        header: Arc::new(header),
        bytes: OnceLock::new(),
    })
}

fn name_error(entries: &[TensorEntry], problem: NameProblem) -> Error {
    let (kind, at) = match problem {
        NameProblem::Reserved(at) => (HeaderError::ReservedName, at),
        NameProblem::Repeat(_, at) => {
            let name = entries[at].meta.name.clone();
            let inputs = None;
            (HeaderError::DuplicateTensor { name, inputs }, at)
        }
    };
    Error::new(kind).with_tensor(entries[at].meta.name.clone())
}

/// Packs the tensors from offset 0, in their order, with no gaps.
fn place(entries: &mut [TensorEntry]) -> Result<()> {
    let mut offset = 0u64;
    for e in entries {
        let len = e.meta.byte_len()?;
        let end = offset.checked_add(len).ok_or_else(|| {
            Error::new(HeaderError::ShapeOverflow {
                tensor: e.meta.name.clone(),
                dtype: e.meta.dtype,
                shape: e.meta.shape.clone(),
            })
        })?;
        e.begin = offset;
        e.end = end;
        offset = end;
    }
    Ok(())
}

/// Counts the bytes written to it, and keeps none.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Compact JSON, `__metadata__` first, then (by the caller) the entries
/// with keys `dtype`, `shape`, `data_offsets`, then `}` and the padding.
/// Strings go through serde_json so that escaping is exactly the
/// reference's. `out` is a `Vec` or a [`Counter`]: neither fails.
///
/// This writes the opening brace and the metadata.
fn write_open<W: Write>(out: &mut W, metadata: Option<&Metadata>) {
    put(out, b"{");
    if let Some(md) = metadata {
        put(out, br#""__metadata__":{"#);
        for (i, (k, v)) in md.iter().enumerate() {
            if i > 0 {
                put(out, b",");
            }
            push_json_str(out, k);
            put(out, b":");
            push_json_str(out, v);
        }
        put(out, b"}");
    }
}

fn push_entry<W: Write>(out: &mut W, e: &TensorEntry) {
    push_json_str(out, &e.meta.name);
    put(out, br#":{"dtype":""#);
    put(out, e.meta.dtype.as_str().as_bytes());
    put(out, br#"","shape":["#);
    for (i, d) in e.meta.shape.iter().enumerate() {
        if i > 0 {
            put(out, b",");
        }
        push_u64(out, *d);
    }
    put(out, br#"],"data_offsets":["#);
    push_u64(out, e.begin);
    put(out, b",");
    push_u64(out, e.end);
    put(out, b"]}");
}

fn put<W: Write>(out: &mut W, bytes: &[u8]) {
    out.write_all(bytes)
        .expect("a Vec or a Counter never fails");
}

fn push_json_str<W: Write>(out: &mut W, s: &str) {
    // Neither sink fails, and a &str always serialises.
    serde_json::to_writer(&mut *out, s).expect("serialising a str");
}

/// [`push_json_str`] without the quotes: a part of a string, escaped.
fn push_json_str_contents(buf: &mut Vec<u8>, s: &str) {
    let start = buf.len();
    push_json_str(buf, s);
    let end = buf.len() - 1;
    buf.copy_within(start + 1..end, start);
    buf.truncate(end - 1);
}

/// A number's digits, as serde_json writes them (itoa, which serde_json
/// uses too): `write!` goes through the formatting machinery, a few
/// percent of encoding a million-entry header, done twice (count, write).
fn push_u64<W: Write>(out: &mut W, n: u64) {
    put(out, itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;
    use crate::ErrorKind;

    fn json_of(enc: &EncodedHeader) -> &str {
        std::str::from_utf8(&enc.bytes()[8..]).unwrap()
    }

    #[test]
    fn empty_header_is_braces_and_six_spaces() {
        let enc = encode(vec![], None, Order::Canonical).unwrap();
        assert_eq!(enc.bytes().len(), 16);
        assert_eq!(json_of(&enc), "{}      ");
    }

    #[test]
    fn empty_metadata_is_written() {
        let enc = encode(vec![], Some(Metadata::new()), Order::Canonical).unwrap();
        assert_eq!(json_of(&enc).trim_end(), r#"{"__metadata__":{}}"#);
    }

    #[test]
    fn spec_example_with_metadata() {
        let tensors = vec![
            TensorMeta::new("w", Dtype::F16, [2]),
            TensorMeta::new("b", Dtype::I64, [1]),
            TensorMeta::new("m", Dtype::U8, [3]),
            TensorMeta::new("s", Dtype::F32, []),
        ];
        let md = Metadata::from([("format".to_string(), "np".to_string())]);
        let enc = encode(tensors, Some(md), Order::Canonical).unwrap();
        let want = r#"{"__metadata__":{"format":"np"},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"s":{"dtype":"F32","shape":[],"data_offsets":[8,12]},"w":{"dtype":"F16","shape":[2],"data_offsets":[12,16]},"m":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}} "#;
        assert_eq!(json_of(&enc), want);
        assert_eq!(enc.header().header_len, 248);
        assert_eq!(enc.header().file_len(), 275);
    }

    /// The header written in one go, as the counter counts it.
    fn written_whole(h: &Header) -> Vec<u8> {
        let mut v = h.header_len.to_le_bytes().to_vec();
        write_open(&mut v, h.metadata.as_ref());
        for (k, e) in h.tensors.iter().enumerate() {
            if k > 0 || h.metadata.is_some() {
                v.push(b',');
            }
            push_entry(&mut v, e);
        }
        v.push(b'}');
        v.resize(8 + h.header_len as usize, b' ');
        v
    }

    #[test]
    fn pieces_are_the_bytes() {
        let tensors = vec![
            TensorMeta::new("w", Dtype::F16, [2]),
            TensorMeta::new("b\"q", Dtype::I64, [1]),
            TensorMeta::new("s", Dtype::F32, []),
        ];
        let long = Metadata::from([
            ("a\"\u{e9}".into(), "x\"\u{e9}\n\u{1}\\".repeat(50)),
            ("b".into(), String::new()),
            (
                "\u{65e5}\u{672c}".into(),
                "\u{65e5}\u{672c}\u{8a9e}".repeat(40),
            ),
        ]);
        let metadata = [
            None,
            Some(Metadata::from([("k".into(), "v".into())])),
            Some(Metadata::new()),
            Some(long),
        ];
        for md in metadata {
            let enc = encode(tensors.clone(), md, Order::Canonical).unwrap();
            let whole = written_whole(enc.header());
            // Made as they go, without keeping the bytes.
            let mut each = Vec::new();
            enc.each_piece(|piece| each.extend_from_slice(piece));
            assert_eq!(each, whole);
            assert!(enc.bytes.get().is_none(), "each_piece keeps no copy");
            // Parts of strings and single entries per piece, then all at once.
            for min in [1, 3, 7, 64, usize::MAX] {
                let (mut all, mut piece) = (Vec::new(), Vec::new());
                let mut pieces = enc.pieces();
                loop {
                    piece.clear();
                    let more = pieces.next_piece(&mut piece, min);
                    all.extend_from_slice(&piece);
                    if !more {
                        break;
                    }
                }
                piece.clear();
                assert!(!pieces.next_piece(&mut piece, min), "nothing after the end");
                assert!(piece.is_empty());
                assert_eq!(all, whole, "pieces of at least {min} bytes");
                assert_eq!(all, enc.bytes());
                assert_eq!(all.len() as u64, enc.len());
            }
        }
    }

    #[test]
    fn as_given_keeps_order() {
        let tensors = vec![
            TensorMeta::new("z", Dtype::U8, [1]),
            TensorMeta::new("a", Dtype::F64, [1]),
        ];
        let enc = encode(tensors, None, Order::AsGiven).unwrap();
        let names: Vec<_> = enc.header().tensors.iter().map(|t| &t.meta.name).collect();
        assert_eq!(names, ["z", "a"]);
        assert_eq!(enc.header().tensors[1].begin, 1);
    }

    #[test]
    fn refusals() {
        let dup = vec![
            TensorMeta::new("a", Dtype::U8, [1]),
            TensorMeta::new("a", Dtype::U8, [2]),
        ];
        let e = encode(dup, None, Order::Canonical).unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::DuplicateTensor { .. })
        ));
        let reserved = vec![TensorMeta::new("__metadata__", Dtype::U8, [1])];
        let e = encode(reserved, None, Order::Canonical).unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::ReservedName)
        ));
        let huge = vec![
            TensorMeta::new("a", Dtype::U64, [1 << 60]),
            TensorMeta::new("b", Dtype::U64, [1 << 60]),
        ];
        let e = encode(huge, None, Order::Canonical).unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::ShapeOverflow { .. })
        ));
        let odd = vec![TensorMeta::new("f", Dtype::F4, [3])];
        let e = encode(odd, None, Order::Canonical).unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::NotWholeBytes { bits: 12, .. })
        ));
    }

    #[test]
    fn header_over_limit_is_refused() {
        let md = Metadata::from([("k".to_string(), "x".repeat(100_000_001))]);
        let e = encode(vec![], Some(md), Order::Canonical).unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::HeaderTooLarge { .. })
        ));
    }
}
