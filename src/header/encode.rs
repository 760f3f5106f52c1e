//! Byte-exact header encoding: the layout the reference writer produces.

use std::collections::HashSet;

use super::{Header, Metadata, TensorEntry, TensorMeta, MAX_HEADER_LEN};
use crate::{Error, ErrorKind, Result};

/// Which order tensors take in the data buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// The reference writer's order: dtype descending, then name by UTF-8 bytes.
    /// Output is byte-identical to `safetensors.save_file`.
    #[default]
    Canonical,
    /// The caller's order, as given. A valid file, but not the reference's bytes.
    AsGiven,
}

/// A header laid out and encoded: the model and its exact bytes.
#[derive(Debug, Clone)]
pub struct EncodedHeader {
    header: Header,
    bytes: Vec<u8>,
}

impl EncodedHeader {
    /// The laid-out header (tensors in offset order).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The file's first `8 + N` bytes: the length prefix and the padded JSON.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Both parts, by value.
    pub fn into_parts(self) -> (Header, Vec<u8>) {
        (self.header, self.bytes)
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
    mut tensors: Vec<TensorMeta>,
    metadata: Option<Metadata>,
    order: Order,
) -> Result<EncodedHeader> {
    check_names(&tensors)?;
    if order == Order::Canonical {
        sort_canonical_by(&mut tensors, |t| t);
    }
    let entries = place(tensors)?;
    // The JSON is written after room for its length: one buffer, not a
    // JSON buffer copied into a second one (a 90 MB header cost both).
    let mut bytes = write_json(metadata.as_ref(), &entries);
    let header_len = (bytes.len() - 8) as u64;
    if header_len > MAX_HEADER_LEN {
        return Err(ErrorKind::HeaderTooLarge {
            len: header_len,
            limit: MAX_HEADER_LEN,
        }
        .into());
    }
    bytes[..8].copy_from_slice(&header_len.to_le_bytes());
    let header = Header {
        metadata,
        tensors: entries,
        header_len,
    };
    Ok(EncodedHeader { header, bytes })
}

/// Sorts as the reference's `prepare()`: dtype descending, then name
/// ascending by UTF-8 bytes (so `a.10` < `a.2`).
pub(crate) fn sort_canonical_by<T>(items: &mut Vec<T>, meta: impl Fn(&T) -> &TensorMeta) {
    // Sort indices, then move each (large) item once; ties (equal names,
    // refused later) keep their order.
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_unstable_by(|&i, &j| {
        let (a, b) = (meta(&items[i]), meta(&items[j]));
        b.dtype
            .cmp(&a.dtype)
            .then_with(|| a.name.cmp(&b.name))
            .then(i.cmp(&j))
    });
    let mut slots: Vec<Option<T>> = items.drain(..).map(Some).collect();
    items.extend(
        order
            .into_iter()
            .map(|i| slots[i].take().expect("each index once")),
    );
}

fn check_names(tensors: &[TensorMeta]) -> Result<()> {
    let mut seen =
        HashSet::with_capacity_and_hasher(tensors.len(), foldhash::fast::RandomState::default());
    for t in tensors {
        if t.name == "__metadata__" {
            return Err(Error::new(ErrorKind::ReservedName).with_tensor(t.name.clone()));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(ErrorKind::DuplicateTensor {
                name: t.name.clone(),
                inputs: None,
            }
            .into());
        }
    }
    Ok(())
}

/// Packs the tensors from offset 0, in the given order, with no gaps.
fn place(tensors: Vec<TensorMeta>) -> Result<Vec<TensorEntry>> {
    let mut offset = 0u64;
    let mut entries = Vec::with_capacity(tensors.len());
    for meta in tensors {
        let len = meta.byte_len()?;
        let end = offset.checked_add(len).ok_or_else(|| {
            Error::new(ErrorKind::ShapeOverflow {
                tensor: meta.name.clone(),
                dtype: meta.dtype,
                shape: meta.shape.clone(),
            })
        })?;
        entries.push(TensorEntry {
            meta,
            begin: offset,
            end,
        });
        offset = end;
    }
    Ok(entries)
}

/// Compact JSON, `__metadata__` first, keys `dtype`, `shape`, `data_offsets`,
/// padded with spaces to a multiple of 8. Strings go through serde_json so
/// that escaping is exactly the reference's.
/// Eight bytes for the length prefix (left zero), then the padded JSON.
fn write_json(metadata: Option<&Metadata>, entries: &[TensorEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(72 + entries.len() * 96);
    out.extend_from_slice(&[0; 8]);
    out.push(b'{');
    let mut first = true;
    if let Some(md) = metadata {
        out.extend_from_slice(br#""__metadata__":{"#);
        for (i, (k, v)) in md.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_json_str(&mut out, k);
            out.push(b':');
            push_json_str(&mut out, v);
        }
        out.push(b'}');
        first = false;
    }
    for e in entries {
        if !first {
            out.push(b',');
        }
        first = false;
        push_entry(&mut out, e);
    }
    out.push(b'}');
    // 8 + a multiple of 8 is one too.
    let padded = out.len().next_multiple_of(8);
    out.resize(padded, b' ');
    out
}

fn push_entry(out: &mut Vec<u8>, e: &TensorEntry) {
    push_json_str(out, &e.meta.name);
    out.extend_from_slice(br#":{"dtype":""#);
    out.extend_from_slice(e.meta.dtype.as_str().as_bytes());
    out.extend_from_slice(br#"","shape":["#);
    for (i, d) in e.meta.shape.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_u64(out, *d);
    }
    out.extend_from_slice(br#"],"data_offsets":["#);
    push_u64(out, e.begin);
    out.push(b',');
    push_u64(out, e.end);
    out.extend_from_slice(b"]}");
}

fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail, and a &str always serialises.
    serde_json::to_writer(&mut *out, s).expect("serialising a str into a Vec");
}

fn push_u64(out: &mut Vec<u8>, n: u64) {
    use std::io::Write;
    write!(out, "{n}").expect("writing into a Vec");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;

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
        assert!(matches!(e.kind(), ErrorKind::DuplicateTensor { .. }));
        let reserved = vec![TensorMeta::new("__metadata__", Dtype::U8, [1])];
        let e = encode(reserved, None, Order::Canonical).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::ReservedName));
        let huge = vec![
            TensorMeta::new("a", Dtype::U64, [1 << 60]),
            TensorMeta::new("b", Dtype::U64, [1 << 60]),
        ];
        let e = encode(huge, None, Order::Canonical).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::ShapeOverflow { .. }));
        let odd = vec![TensorMeta::new("f", Dtype::F4, [3])];
        let e = encode(odd, None, Order::Canonical).unwrap_err();
        assert!(matches!(
            e.kind(),
            ErrorKind::NotWholeBytes { bits: 12, .. }
        ));
    }

    #[test]
    fn header_over_limit_is_refused() {
        let md = Metadata::from([("k".to_string(), "x".repeat(100_000_001))]);
        let e = encode(vec![], Some(md), Order::Canonical).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::HeaderTooLarge { .. }));
    }
}
