//! Protobuf's wire format, walked in place: each field's number and value,
//! a length-delimited value given as where its bytes are (never read), so
//! a caller steps over a graph's nodes or a tensor's data and descends only
//! into what it wants.

use std::borrow::Borrow;
use std::fs::File;

use super::super::cursor::FileCursor;
use crate::error::onnx::OnnxError;
use crate::error::text::TextError;
use crate::{Error, Result};

/// A field's value as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: `len` bytes at `start` (the cursor is past them).
    Bytes {
        /// The first byte's offset.
        start: u64,
        len: u64,
    },
    /// Wire type 5.
    Fixed32(u32),
}

impl Value {
    /// The wire type number, for messages.
    pub(crate) fn wire(&self) -> u8 {
        match self {
            Value::Varint(_) => 0,
            Value::Fixed64(_) => 1,
            Value::Bytes { .. } => 2,
            Value::Fixed32(_) => 5,
        }
    }
}

/// A field: its number, its value, and the offset of its tag.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    pub(crate) number: u32,
    pub(crate) value: Value,
    pub(crate) at: u64,
}

impl Field {
    /// The error for this field when its wire type is not the one `what` is declared with.
    pub(crate) fn wrong_type(&self, what: &'static str) -> Error {
        let e = OnnxError::FieldType {
            what,
            field: self.number,
            wire: self.value.wire(),
        };
        Error::new(e).at_offset(self.at)
    }
}

/// A bad-input error at `at`.
pub(crate) fn bad(e: OnnxError, at: u64) -> Error {
    Error::new(e).at_offset(at)
}

/// Reads a varint ending before `end`.
pub(crate) fn varint<F: Borrow<File>>(
    c: &mut FileCursor<F>,
    end: u64,
    what: &'static str,
) -> Result<u64> {
    let at = c.position();
    let mut v = 0u64;
    for i in 0..10 {
        if c.position() >= end {
            return Err(bad(OnnxError::Truncated(what), at));
        }
        let b = c
            .byte()?
            .ok_or_else(|| bad(OnnxError::Truncated(what), at))?;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(bad(OnnxError::Varint, at))
}

fn fixed<F: Borrow<File>, const N: usize>(c: &mut FileCursor<F>, end: u64) -> Result<[u8; N]> {
    let at = c.position();
    if end - at < N as u64 {
        return Err(bad(OnnxError::Truncated("a fixed-width field"), at));
    }
    let mut b = [0u8; N];
    std::io::Read::read_exact(c, &mut b)?;
    Ok(b)
}

/// The next field of the message that ends at `end`, or `None` at its end.
/// A length-delimited value is stepped over (checked to fit first).
pub(crate) fn next_field<F: Borrow<File>>(
    c: &mut FileCursor<F>,
    end: u64,
) -> Result<Option<Field>> {
    let at = c.position();
    if at >= end {
        return Ok(None);
    }
    let tag = varint(c, end, "a field tag")?;
    let (field, wire) = (tag >> 3, (tag & 7) as u8);
    let Ok(number) = u32::try_from(field) else {
        return Err(bad(OnnxError::WireType { field, wire }, at));
    };
    let value = match wire {
        0 => Value::Varint(varint(c, end, "a varint field")?),
        1 => Value::Fixed64(u64::from_le_bytes(fixed(c, end)?)),
        2 => {
            let len = varint(c, end, "a length")?;
            let start = c.position();
            let left = end - start;
            if len > left {
                let e = OnnxError::PastEnd {
                    what: "a length-delimited field",
                    len,
                    left,
                };
                return Err(bad(e, at));
            }
            c.seek(start + len);
            Value::Bytes { start, len }
        }
        5 => Value::Fixed32(u32::from_le_bytes(fixed(c, end)?)),
        _ => return Err(bad(OnnxError::WireType { field, wire }, at)),
    };
    if number == 0 {
        return Err(bad(OnnxError::WireType { field, wire }, at));
    }
    Ok(Some(Field { number, value, at }))
}

/// The bytes of a length-delimited value of at most `limit` bytes, read.
pub(crate) fn small_bytes<F: Borrow<File>>(
    c: &mut FileCursor<F>,
    start: u64,
    len: u64,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>> {
    if len > limit {
        return Err(bad(TextError::TooLong { what, len, limit }.into(), start));
    }
    let back = c.position();
    c.seek(start);
    let mut out = vec![0u8; len as usize];
    std::io::Read::read_exact(c, &mut out)?;
    c.seek(back);
    Ok(out)
}

/// [`small_bytes`] as UTF-8.
pub(crate) fn small_string<F: Borrow<File>>(
    c: &mut FileCursor<F>,
    start: u64,
    len: u64,
    limit: u64,
    what: &'static str,
) -> Result<String> {
    String::from_utf8(small_bytes(c, start, len, limit, what)?)
        .map_err(|_| bad(TextError::NotUtf8(what).into(), start))
}

/// The number of varints packed in `[start, start + len)`, each checked to
/// end inside it (one byte each has its top bit clear).
pub(crate) fn count_packed_varints<F: Borrow<File>>(
    c: &mut FileCursor<F>,
    start: u64,
    len: u64,
    what: &'static str,
) -> Result<u64> {
    let back = c.position();
    c.seek(start);
    let mut count = 0u64;
    let mut run = 0u32;
    let mut chunk = [0u8; 8192];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        std::io::Read::read_exact(c, &mut chunk[..n])?;
        for &b in &chunk[..n] {
            run += 1;
            if b & 0x80 == 0 {
                count += 1;
                run = 0;
            } else if run >= 10 {
                return Err(bad(OnnxError::Varint, c.position()));
            }
        }
        left -= n as u64;
    }
    if run != 0 {
        return Err(bad(OnnxError::PackedVarint(what), start + len));
    }
    c.seek(back);
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn cursor(bytes: &[u8]) -> (File, u64) {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        (f, bytes.len() as u64)
    }

    #[test]
    fn walks_each_wire_type_and_steps_over_bytes() {
        // field 1 varint 300, field 2 bytes "hi", field 3 fixed32, field 4 fixed64.
        let mut b = vec![
            0x08, 0xac, 0x02, 0x12, 2, b'h', b'i', 0x1d, 1, 0, 0, 0, 0x21,
        ];
        b.extend_from_slice(&7u64.to_le_bytes());
        let (f, len) = cursor(&b);
        let mut c = FileCursor::new(&f, 0, len);
        let got: Vec<(u32, Value)> = std::iter::from_fn(|| next_field(&mut c, len).unwrap())
            .map(|f| (f.number, f.value))
            .collect();
        assert_eq!(
            got,
            [
                (1, Value::Varint(300)),
                (2, Value::Bytes { start: 5, len: 2 }),
                (3, Value::Fixed32(1)),
                (4, Value::Fixed64(7)),
            ]
        );
    }

    fn error_of(bytes: &[u8]) -> Error {
        let (f, len) = cursor(bytes);
        let mut c = FileCursor::new(&f, 0, len);
        loop {
            match next_field(&mut c, len) {
                Ok(Some(_)) => {}
                Ok(None) => panic!("{bytes:?} parsed"),
                Err(e) => return e,
            }
        }
    }

    #[test]
    fn bad_wire_is_refused_with_its_offset() {
        let cases: [(&[u8], &str, u64); 6] = [
            (&[0x08], "truncated", 1),
            (&[0x12, 5, 1], "past_end", 0),
            (&[0x0b], "wire_type", 0),
            (&[0x00, 0], "wire_type", 0),
            (
                &[
                    0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1,
                ],
                "varint",
                1,
            ),
            (&[0x1d, 1, 2], "truncated", 1),
        ];
        for (bytes, name, at) in cases {
            let e = error_of(bytes);
            let crate::ErrorKind::Onnx(inner) = e.kind() else {
                panic!("{e:?}")
            };
            let got: &'static str = match inner {
                OnnxError::Truncated(_) => "truncated",
                OnnxError::PastEnd { .. } => "past_end",
                OnnxError::WireType { .. } => "wire_type",
                OnnxError::Varint => "varint",
                _ => "other",
            };
            assert_eq!((got, e.offset()), (name, Some(at)), "{bytes:?}: {e}");
        }
    }

    #[test]
    fn packed_varints_are_counted_and_a_cut_one_refused() {
        let (f, len) = cursor(&[1, 0x80, 1, 0xff, 0xff, 0x7f, 5]);
        let mut c = FileCursor::new(&f, 0, len);
        assert_eq!(count_packed_varints(&mut c, 0, 7, "x").unwrap(), 4);
        assert!(count_packed_varints(&mut c, 0, 5, "x").is_err());
    }
}
