//! The GGUF header: magic, version, metadata key-values, tensor infos.
//!
//! Layout (ggml's `gguf.cpp`, gguf-py's `GGUFReader`): `GGUF`, a u32
//! version, u64 tensor and key-value counts, the key-values (a string key,
//! a u32 type, a value; arrays hold a type, a u64 count and the elements),
//! the tensor infos (name, u32 dimension count, u64 dimensions innermost
//! first, u32 type, u64 offset from the data section), then padding to
//! `general.alignment` (32 by default) and the data. Every number is in
//! the file's byte order, which the version tells: a little-endian read
//! whose low 16 bits are zero is a big-endian file.
//!
//! Every count and length is checked against the bytes left in the file
//! before anything is allocated on it, and nothing is allocated ahead of
//! what has been read: a short file claiming 2^60 tensors fails at once.

use std::io::Read;

use super::error::GgufError;
use crate::dequant::ggml::{GgmlType, Kind};
use crate::error::text::TextError;
use crate::limits::{Limit, Limits};
use crate::source::span::first_overlap;
use crate::{Error, ErrorKind, Result};

/// Longest key or tensor name read (ggml's names are at most 64 bytes).
const MAX_NAME: u64 = 64 * 1024;
/// Deepest nesting of arrays.
const MAX_DEPTH: u32 = 8;
/// Alignment when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// What a key-value costs held, beyond its key (kept twice: in the list
/// and in the set that finds a second one) and its string: the entry, the
/// set's slot and the allocator's share, and its copy in the output's
/// `__metadata__` with `--gguf-metadata` (what was measured:
/// benches/README.md, "Costs charged per entry").
const KV_COST: u64 = 384;
/// What a tensor costs held, beyond its name (kept three times: the info,
/// the set of names, the listing) and its dimensions (twice): the info,
/// the listing's entry, the set's slot.
const TENSOR_COST: u64 = 320;

/// A metadata value. Arrays are summarised, never held: a vocabulary of
/// 150,000 strings is read through, not kept.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// u8.
    U8(u8),
    /// i8.
    I8(i8),
    /// u16.
    U16(u16),
    /// i16.
    I16(i16),
    /// u32.
    U32(u32),
    /// i32.
    I32(i32),
    /// f32.
    F32(f32),
    /// bool.
    Bool(bool),
    /// A UTF-8 string.
    Str(String),
    /// u64.
    U64(u64),
    /// i64.
    I64(i64),
    /// f64.
    F64(f64),
    /// An array: its element type's name, its length and its first items.
    Array {
        /// The element type (`u32`, `string`, `array`).
        of: &'static str,
        /// How many elements.
        len: u64,
        /// The first [`ARRAY_ITEMS_KEPT`] items as `inspect` shows them
        /// (strings quoted and cut to [`ARRAY_CHARS_KEPT`] bytes).
        first: Vec<String>,
    },
}

/// Items of an array kept to show it: the rest are read through.
pub const ARRAY_ITEMS_KEPT: u64 = 3;
/// Bytes kept of each string item shown.
pub const ARRAY_CHARS_KEPT: u64 = 40;

impl Value {
    /// The value as a `__metadata__` string; `None` for arrays.
    pub fn to_metadata(&self) -> Option<String> {
        Some(match self {
            Value::U8(v) => v.to_string(),
            Value::I8(v) => v.to_string(),
            Value::U16(v) => v.to_string(),
            Value::I16(v) => v.to_string(),
            Value::U32(v) => v.to_string(),
            Value::I32(v) => v.to_string(),
            Value::F32(v) => v.to_string(),
            Value::Bool(v) => v.to_string(),
            Value::Str(v) => v.clone(),
            Value::U64(v) => v.to_string(),
            Value::I64(v) => v.to_string(),
            Value::F64(v) => v.to_string(),
            Value::Array { .. } => return None,
        })
    }

    /// How `inspect` shows it: the value, or for an array its length, type
    /// and first items: `[32000 x string: "<unk>", "<s>", "</s>", ...]`.
    pub fn describe(&self) -> String {
        match self {
            Value::Array { of, len, first } => {
                let more = if *len > first.len() as u64 {
                    ", ..."
                } else {
                    ""
                };
                match first.is_empty() {
                    true => format!("[{len} x {of}]"),
                    false => format!("[{len} x {of}: {}{more}]", first.join(", ")),
                }
            }
            other => other.to_metadata().unwrap_or_default(),
        }
    }

    /// An array item as `describe` shows it: strings quoted.
    fn item(&self) -> String {
        match self {
            Value::Str(s) => format!("{s:?}"),
            other => other.describe(),
        }
    }
}

/// One tensor as the header describes it.
#[derive(Debug, Clone)]
pub(crate) struct TensorInfo {
    pub(crate) name: String,
    /// ggml's dimensions, innermost first.
    pub(crate) dims: Vec<u64>,
    pub(crate) ty: GgmlType,
    /// Absolute offset of the first byte.
    pub(crate) offset: u64,
    /// Bytes in the file.
    pub(crate) len: u64,
}

impl TensorInfo {
    /// Elements (the product of the dimensions).
    pub(crate) fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Row-major shape, as gguf-py and transformers give it.
    pub(crate) fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A parsed header.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    /// 2 or 3.
    pub version: u32,
    /// Whether the file's numbers are big-endian.
    pub big_endian: bool,
    /// The data section's alignment.
    pub alignment: u64,
    /// The key-values, in file order.
    pub metadata: Vec<(String, Value)>,
    pub(crate) tensors: Vec<TensorInfo>,
    /// Where the data section starts.
    pub data_start: u64,
}

impl GgufHeader {
    /// How many tensors the file holds.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }
}

/// Reads the header of a file of `len` bytes from `r` (at its start), and
/// checks every tensor's data lies in the file, apart from the others.
pub fn read_header(r: impl Read, len: u64) -> Result<GgufHeader> {
    read_header_within(r, len, &Limits::default())
}

/// [`read_header`] under the caller's `limits` (`gguf-string-bytes`).
pub fn read_header_within(r: impl Read, len: u64, limits: &Limits) -> Result<GgufHeader> {
    let mut p = Parser {
        r,
        pos: 0,
        len,
        big: false,
        charged: 0,
        limits: *limits,
    };
    p.header()
}

struct Parser<R> {
    r: R,
    pos: u64,
    len: u64,
    big: bool,
    /// Bytes of memory what was read holds (estimated from above).
    charged: u64,
    /// The longest string value kept is the caller's `gguf-string-bytes`.
    limits: Limits,
}

fn gguf(e: GgufError) -> Error {
    Error::new(ErrorKind::Gguf(e))
}

impl<R: Read> Parser<R> {
    fn left(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    /// Charges `bytes` of memory held against the bound for the bytes read
    /// so far ([`within_memory_bound`](crate::header::within_memory_bound)).
    fn charge(&mut self, bytes: u64) -> Result<()> {
        self.charged = self.charged.saturating_add(bytes);
        crate::header::within_memory_bound(self.charged, self.pos)
            .map_err(|kind| Error::new(kind).at_offset(self.pos))
    }

    fn bytes<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|e| self.eof(e, what))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn eof(&self, e: std::io::Error, what: &'static str) -> Error {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            gguf(GgufError::Truncated(what)).at_offset(self.pos)
        } else {
            Error::io(e)
        }
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        let b = self.bytes::<4>(what)?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self, what: &'static str) -> Result<u64> {
        let b = self.bytes::<8>(what)?;
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// A count of items of at least `min` bytes each, checked to fit in
    /// the rest of the file.
    fn count(&mut self, what: &'static str, min: u64) -> Result<u64> {
        let at = self.pos;
        let count = self.u64(what)?;
        let left = self.left();
        if count.checked_mul(min).is_none_or(|n| n > left) {
            return Err(gguf(GgufError::TooMany { what, count, left }).at_offset(at));
        }
        Ok(count)
    }

    /// A string's length, checked against `limit` and the file.
    fn string_len(&mut self, what: &'static str, limit: u64) -> Result<u64> {
        let at = self.pos;
        let len = self.u64(what)?;
        if len > limit {
            return Err(gguf(TextError::TooLong { what, len, limit }.into()).at_offset(at));
        }
        if len > self.left() {
            return Err(gguf(GgufError::Truncated(what)).at_offset(at));
        }
        Ok(len)
    }

    fn string(&mut self, what: &'static str, limit: u64) -> Result<String> {
        let at = self.pos;
        let len = self.string_len(what, limit)?;
        self.string_body(what, len, at)
    }

    /// A string's `len` bytes (its length, read at `at`, already checked
    /// against its limit but not against the file).
    fn string_body(&mut self, what: &'static str, len: u64, at: u64) -> Result<String> {
        if len > self.left() {
            return Err(gguf(GgufError::Truncated(what)).at_offset(at));
        }
        let mut buf = Vec::new();
        let got = (&mut self.r)
            .take(len)
            .read_to_end(&mut buf)
            .map_err(Error::io)?;
        if got as u64 != len {
            return Err(gguf(GgufError::Truncated(what)).at_offset(at));
        }
        self.pos += len;
        String::from_utf8(buf).map_err(|_| gguf(TextError::NotUtf8(what).into()).at_offset(at))
    }

    /// A metadata string value, at most the `gguf-string-bytes` limit.
    fn metadata_string(&mut self) -> Result<String> {
        let limit = self.limits.get(Limit::GgufStringBytes);
        let at = self.pos;
        let len = self.u64("metadata string")?;
        if len > limit {
            let what = format!("a GGUF metadata string of {len} bytes");
            return Err(self
                .limits
                .refuse(Limit::GgufStringBytes, what)
                .at_offset(at));
        }
        self.string_body("metadata string", len, at)
    }

    /// An array's string item, quoted, of at most [`ARRAY_CHARS_KEPT`]
    /// bytes (cut at a character boundary, `...` after); the rest skipped.
    fn string_start(&mut self) -> Result<String> {
        let at = self.pos;
        let len = self.string_len("array string", u64::MAX)?;
        let keep = len.min(ARRAY_CHARS_KEPT);
        let mut buf = Vec::with_capacity(keep as usize);
        let got = (&mut self.r)
            .take(keep)
            .read_to_end(&mut buf)
            .map_err(Error::io)?;
        if got as u64 != keep {
            return Err(gguf(GgufError::Truncated("array string")).at_offset(at));
        }
        self.pos += keep;
        self.skip(len - keep, "array string")?;
        let text = String::from_utf8_lossy(&buf);
        // A character cut at the end shows as U+FFFD: drop it.
        let text = match keep < len {
            true => format!("{:?}...", text.trim_end_matches('\u{fffd}')),
            false => format!("{text:?}"),
        };
        Ok(text)
    }

    fn skip(&mut self, n: u64, what: &'static str) -> Result<()> {
        let at = self.pos;
        let got = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink())?;
        if got != n {
            return Err(gguf(GgufError::Truncated(what)).at_offset(at));
        }
        self.pos += n;
        Ok(())
    }

    fn header(&mut self) -> Result<GgufHeader> {
        if self.bytes::<4>("magic")? != *b"GGUF" {
            return Err(gguf(GgufError::Magic).at_offset(0));
        }
        let raw = self.bytes::<4>("version")?;
        let le = u32::from_le_bytes(raw);
        // A big-endian file's small version reads, little-endian, as a
        // number whose low half is zero.
        self.big = le & 0xffff == 0 && le != 0;
        let version = if self.big {
            u32::from_be_bytes(raw)
        } else {
            le
        };
        match version {
            2 | 3 => {}
            1 => return Err(gguf(GgufError::Version1).at_offset(4)),
            v => return Err(gguf(GgufError::Version(v)).at_offset(4)),
        }
        // Each tensor info is at least 24 bytes, each key-value 13.
        let n_tensors = self.u64("tensor count")?;
        let n_kv = self.count("metadata key-values", 13)?;
        let mut metadata = Vec::new();
        let mut keys = std::collections::HashSet::new();
        let mut alignment_at = 0;
        for _ in 0..n_kv {
            let at = self.pos;
            let key = self.string("metadata key", MAX_NAME)?;
            if key == "general.alignment" {
                alignment_at = at;
            }
            let value = self.value(&key, None, 0)?;
            let text = match &value {
                Value::Str(s) => s.len() as u64,
                _ => 0,
            };
            self.charge(KV_COST + 2 * key.len() as u64 + text)?;
            if !keys.insert(key.clone()) {
                return Err(gguf(GgufError::DuplicateKey(key)).at_offset(at));
            }
            metadata.push((key, value));
        }
        let alignment = alignment(&metadata).map_err(|e| e.at_offset(alignment_at))?;
        let left = self.left();
        if n_tensors.checked_mul(24).is_none_or(|n| n > left) {
            let e = GgufError::TooMany {
                what: "tensors",
                count: n_tensors,
                left,
            };
            return Err(gguf(e).at_offset(16));
        }
        // The caller's count, refused before any tensor is listed.
        if n_tensors > self.limits.get(Limit::TensorCount) {
            let what = format!("the GGUF header lists {n_tensors} tensors");
            return Err(self.limits.refuse(Limit::TensorCount, what).at_offset(8));
        }
        let mut tensors = Vec::new();
        let mut names = std::collections::HashSet::new();
        for _ in 0..n_tensors {
            let at = self.pos;
            let name = self.string("tensor name", MAX_NAME)?;
            let info = self.tensor_info().map_err(|e| e.with_tensor(&name))?;
            let dims = info.0.len() as u64;
            self.charge(TENSOR_COST + 3 * name.len() as u64 + 16 * dims)?;
            if !names.insert(name.clone()) {
                return Err(gguf(GgufError::DuplicateTensor(name)).at_offset(at));
            }
            tensors.push((name, info));
        }
        let data_start = self.pos.div_ceil(alignment).saturating_mul(alignment);
        let tensors = tensors
            .into_iter()
            .map(|(name, (dims, ty, offset, at))| {
                let place = Place {
                    offset,
                    alignment,
                    data_start,
                    file_len: self.len,
                };
                locate(name, dims, ty, place).map_err(|e| e.at_offset(at))
            })
            .collect::<Result<Vec<_>>>()?;
        check_overlaps(&tensors)?;
        Ok(GgufHeader {
            version,
            big_endian: self.big,
            alignment,
            metadata,
            tensors,
            data_start,
        })
    }

    /// Dimensions, type, relative offset, and where the info started.
    fn tensor_info(&mut self) -> Result<(Vec<u64>, GgmlType, u64, u64)> {
        let at = self.pos;
        let n_dims = self.u32("dimension count")?;
        if n_dims > 4 {
            return Err(gguf(GgufError::Dims(n_dims)).at_offset(at));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64("dimension")?);
        }
        let ty_at = self.pos;
        let id = self.u32("tensor type")?;
        let ty = GgmlType::from_id(id)
            .ok_or_else(|| gguf(GgufError::UnknownType(id)).at_offset(ty_at))?;
        let offset = self.u64("tensor offset")?;
        Ok((dims, ty, offset, at))
    }

    /// A value of type `ty` (read first when `None`), arrays `depth` deep.
    fn value(&mut self, key: &str, ty: Option<u32>, depth: u32) -> Result<Value> {
        let at = self.pos;
        let ty = match ty {
            Some(t) => t,
            None => self.u32("value type")?,
        };
        let big = self.big;
        macro_rules! num {
            ($t:ty, $n:literal, $v:ident) => {{
                let b = self.bytes::<$n>("metadata value")?;
                Value::$v(if big {
                    <$t>::from_be_bytes(b)
                } else {
                    <$t>::from_le_bytes(b)
                })
            }};
        }
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>("metadata value")?[0]),
            1 => Value::I8(self.bytes::<1>("metadata value")?[0] as i8),
            2 => num!(u16, 2, U16),
            3 => num!(i16, 2, I16),
            4 => num!(u32, 4, U32),
            5 => num!(i32, 4, I32),
            6 => num!(f32, 4, F32),
            7 => Value::Bool(self.bytes::<1>("metadata value")?[0] != 0),
            8 => Value::Str(self.metadata_string()?),
            9 => self.array(key, depth)?,
            10 => num!(u64, 8, U64),
            11 => num!(i64, 8, I64),
            12 => num!(f64, 8, F64),
            ty => {
                let key = key.to_string();
                return Err(gguf(GgufError::ValueType { key, ty }).at_offset(at));
            }
        })
    }

    /// An array, read through and summarised.
    fn array(&mut self, key: &str, depth: u32) -> Result<Value> {
        let at = self.pos;
        if depth >= MAX_DEPTH {
            return Err(gguf(GgufError::TooDeep(key.to_string())).at_offset(at));
        }
        let of = self.u32("array type")?;
        let (name, width) = match of {
            0 => ("u8", 1),
            1 => ("i8", 1),
            2 => ("u16", 2),
            3 => ("i16", 2),
            4 => ("u32", 4),
            5 => ("i32", 4),
            6 => ("f32", 4),
            7 => ("bool", 1),
            8 => ("string", 0),
            9 => ("array", 0),
            10 => ("u64", 8),
            11 => ("i64", 8),
            12 => ("f64", 8),
            ty => {
                let key = key.to_string();
                return Err(gguf(GgufError::ValueType { key, ty }).at_offset(at));
            }
        };
        // A string is at least its 8-byte length, an array its type and count.
        let min = match of {
            8 => 8,
            9 => 12,
            _ => width,
        };
        let len = self.count("array elements", min)?;
        // The first items are kept to show; the rest are read through.
        let kept = len.min(ARRAY_ITEMS_KEPT);
        let mut first = Vec::with_capacity(kept as usize);
        for _ in 0..kept {
            let item = match of {
                8 => self.string_start()?,
                _ => self.value(key, Some(of), depth + 1)?.item(),
            };
            self.charge(item.len() as u64 + 24)?;
            first.push(item);
        }
        let rest = len - kept;
        match of {
            8 => {
                for _ in 0..rest {
                    let n = self.string_len("array string", u64::MAX)?;
                    self.skip(n, "array string")?;
                }
            }
            9 => {
                for _ in 0..rest {
                    self.value(key, Some(9), depth + 1)?;
                }
            }
            // Fits: `count` checked len * width against the file.
            _ => self.skip(rest * width, "array")?,
        }
        Ok(Value::Array {
            of: name,
            len,
            first,
        })
    }
}

/// `general.alignment`, or the default.
fn alignment(metadata: &[(String, Value)]) -> Result<u64> {
    match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some((_, Value::U32(a))) if a.is_power_of_two() => Ok(*a as u64),
        Some((_, v)) => Err(gguf(GgufError::Alignment(format!("{v:?}")))),
    }
}

/// The product of `dims`, if the product of its non-zero dimensions fits
/// ggml's signed 64 bits (numpy's rule for an array's size). A zero does not
/// excuse the others: the shape is also multiplied out in the reverse order
/// (the row-major shape), where the zero may come last.
fn element_count(dims: &[u64]) -> Option<u64> {
    let nonzero = dims.iter().filter(|&&d| d != 0).try_fold(1u64, |n, &d| {
        n.checked_mul(d).filter(|&n| n <= i64::MAX as u64)
    })?;
    Some(if dims.contains(&0) { 0 } else { nonzero })
}

/// Where a tensor info says its data is, and what bounds it.
struct Place {
    /// From the start of the data section, as the file gives it.
    offset: u64,
    alignment: u64,
    data_start: u64,
    file_len: u64,
}

/// A tensor's place in the file, checked: its type readable, its offset a
/// multiple of the alignment (ggml's rule: the data section is a run of
/// tensors each padded to it), its rows whole blocks, its bytes inside the
/// file.
fn locate(name: String, dims: Vec<u64>, ty: GgmlType, place: Place) -> Result<TensorInfo> {
    let Place {
        offset,
        alignment,
        data_start,
        file_len,
    } = place;
    let fail = |e: GgufError, name: &str| gguf(e).with_tensor(name);
    if offset % alignment != 0 {
        return Err(fail(GgufError::Misaligned { offset, alignment }, &name));
    }
    if let Kind::Refused(why) = ty.kind {
        return Err(fail(GgufError::Unsupported { name: ty.name, why }, &name));
    }
    let Some(elements) = element_count(&dims) else {
        return Err(fail(GgufError::Overflow(dims), &name));
    };
    let row = dims.first().copied().unwrap_or(1);
    if row % ty.block_elems != 0 {
        let e = GgufError::PartialBlock {
            name: ty.name,
            row,
            block: ty.block_elems,
        };
        return Err(fail(e, &name));
    }
    // Blocks times bytes per block: at most 2^63 / 1 * 8, checked anyway.
    let len = (elements / ty.block_elems).checked_mul(ty.block_bytes);
    let start = data_start.checked_add(offset);
    let end = start.zip(len).and_then(|(s, l)| s.checked_add(l));
    match (start, len, end) {
        (Some(offset), Some(len), Some(end)) if end <= file_len => Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
            len,
        }),
        _ => {
            let end = end.unwrap_or(u64::MAX);
            Err(fail(GgufError::PastEnd { end, len: file_len }, &name))
        }
    }
}

/// Two tensors sharing bytes are refused (a small file would otherwise
/// dequantize to any size).
fn check_overlaps(tensors: &[TensorInfo]) -> Result<()> {
    let spans = tensors
        .iter()
        .enumerate()
        .map(|(k, t)| ((), t.offset, t.offset + t.len, k))
        .collect();
    match first_overlap(spans) {
        None => Ok(()),
        Some((a, b, next)) => {
            let (a, b) = (tensors[a].name.clone(), tensors[b].name.clone());
            Err(gguf(GgufError::Overlap(a, b)).at_offset(next))
        }
    }
}
