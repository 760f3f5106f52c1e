//! The walk of a Flax MessagePack file: maps (and arrays) descended, each
//! ndarray leaf recorded by its path of keys joined with `.` and the place
//! of its bytes, every other leaf (numbers, strings, None) stepped over and
//! counted. Markers and their lengths are decoded with `rmp`; payloads are
//! never read, only stepped over, so memory is the listing and the path.
//! Nesting is bounded ([`MAX_DEPTH`]): the walk recurses once per level.

use std::collections::HashSet;
use std::fs::File;

use rmp::Marker;

use super::ndarray::{read_ndarray, Ndarray};
use super::read::{bad, int_value, map_len, marker, read_be, truncated};
use crate::error::msgpack::MsgpackError;
use crate::error::text::TextError;
use crate::header::TensorMeta;
use crate::source::cursor::FileCursor;
use crate::{Error, Result};

/// How deep maps and arrays may nest (Flax models nest a handful of levels).
pub(crate) const MAX_DEPTH: usize = 64;
/// The longest map key read.
const KEY_LIMIT: u64 = 1 << 16;
/// What one tensor's listing costs beyond its name and dims.
const PER_TENSOR: u64 = 160;
/// Bytes a map key held for the duplicate check costs beyond its text.
const KEY_COST: u64 = 48;
/// Paths of skipped leaves kept for the notice.
const SKIPPED_SHOWN: usize = 8;
/// The key that makes a map a chunked array (`flax.serialization._chunk`).
const CHUNKED: &str = "__msgpack_chunked_array__";

/// Where a tensor's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Data {
    /// `len` bytes at `offset`.
    One { offset: u64, len: u64 },
    /// The chunks of a chunked array, `(offset, len)` each, in order.
    Chunks(Vec<(u64, u64)>),
}

/// A tensor found by the walk.
#[derive(Debug, Clone)]
pub(crate) struct Tensor {
    pub(crate) meta: TensorMeta,
    pub(crate) data: Data,
}

/// What the walk found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    pub(crate) tensors: Vec<Tensor>,
    /// Leaves that are not arrays: how many, and the first few paths.
    pub(crate) skipped: u64,
    pub(crate) skipped_paths: Vec<String>,
}

/// Walks the file, `len` bytes: one map, nothing after it.
pub(crate) fn walk(file: &File, len: u64) -> Result<Walked> {
    let mut w = Walk {
        c: FileCursor::new(file, 0, len),
        path: String::new(),
        keys: 0,
        names: HashSet::new(),
        out: Walked::default(),
        charged: 0,
        data: 0,
    };
    let m = marker(&mut w.c)?;
    let Some(n) = map_len(&mut w.c, m)? else {
        return Err(bad(MsgpackError::NotAMap, 0));
    };
    w.map(n, 1, 0)?;
    let end = w.c.position();
    if end != len {
        return Err(bad(MsgpackError::Trailing(len - end), end));
    }
    Ok(w.out)
}

struct Walk<'f> {
    c: FileCursor<&'f File>,
    /// The keys down to the value being walked, joined with `.`.
    path: String,
    /// How many keys `path` has.
    keys: usize,
    names: HashSet<String>,
    out: Walked,
    /// Bytes the listing holds; data bytes stepped over.
    charged: u64,
    data: u64,
}

impl Walk<'_> {
    /// The `n` entries of a map that began at `at`, at nesting `depth`.
    fn map(&mut self, n: u64, depth: usize, at: u64) -> Result<()> {
        let mut keys = HashSet::new();
        for i in 0..n {
            let key_at = self.c.position();
            let key = self.key()?;
            if i == 0 && key == CHUNKED {
                return self.chunked(n - 1, at);
            }
            self.charge_key(&key, key_at)?;
            if !keys.insert(key.clone()) {
                return Err(bad(MsgpackError::DuplicateKey(key), key_at));
            }
            let keep = self.push(&key);
            self.value(depth)?;
            self.pop(keep);
        }
        Ok(())
    }

    /// Counts a key a map's duplicate check holds (kept until the walk
    /// ends) against the listing's memory bound.
    fn charge_key(&mut self, key: &str, at: u64) -> Result<()> {
        self.charged = self.charged.saturating_add(KEY_COST + key.len() as u64);
        let metadata = self.c.position().saturating_sub(self.data);
        crate::header::within_memory_bound(self.charged, metadata)
            .map_err(|e| Error::new(e).at_offset(at))
    }

    /// Adds a key to the path; returns the length to cut back to.
    fn push(&mut self, key: &str) -> usize {
        let keep = self.path.len();
        if self.keys > 0 {
            self.path.push('.');
        }
        self.path.push_str(key);
        self.keys += 1;
        keep
    }

    /// Takes the last key off the path.
    fn pop(&mut self, keep: usize) {
        self.path.truncate(keep);
        self.keys -= 1;
    }

    /// A map key: a string, or an integer as its decimal digits.
    fn key(&mut self) -> Result<String> {
        let at = self.c.position();
        let m = marker(&mut self.c)?;
        let len = match m {
            Marker::FixStr(n) => u64::from(n),
            Marker::Str8 => read_be::<1>(&mut self.c)?,
            Marker::Str16 => read_be::<2>(&mut self.c)?,
            Marker::Str32 => read_be::<4>(&mut self.c)?,
            m => {
                if let Some(v) = int_value(&mut self.c, m)? {
                    return Ok(v.to_string());
                }
                return Err(bad(MsgpackError::KeyType(kind(m)), at));
            }
        };
        if len > KEY_LIMIT {
            let e = TextError::TooLong {
                what: "a map key",
                len,
                limit: KEY_LIMIT,
            };
            return Err(bad(e.into(), at));
        }
        self.check_fits(len, "a map key", at)?;
        let mut b = vec![0u8; len as usize];
        std::io::Read::read_exact(&mut self.c, &mut b)?;
        String::from_utf8(b).map_err(|_| bad(TextError::NotUtf8("a map key").into(), at))
    }

    /// Refuses a length that runs past the end of the file.
    fn check_fits(&self, len: u64, what: &'static str, at: u64) -> Result<()> {
        if len > self.c.end() - self.c.position() {
            return Err(truncated(what, at));
        }
        Ok(())
    }

    fn step_over(&mut self, len: u64, what: &'static str, at: u64) -> Result<()> {
        self.check_fits(len, what, at)?;
        self.c.seek(self.c.position() + len);
        Ok(())
    }

    /// The value at the current path.
    fn value(&mut self, depth: usize) -> Result<()> {
        let at = self.c.position();
        let m = marker(&mut self.c)?;
        if let Some(n) = map_len(&mut self.c, m)? {
            self.deeper(depth, at)?;
            return self.map(n, depth + 1, at);
        }
        let array = match m {
            Marker::FixArray(n) => Some(u64::from(n)),
            Marker::Array16 => Some(read_be::<2>(&mut self.c)?),
            Marker::Array32 => Some(read_be::<4>(&mut self.c)?),
            _ => None,
        };
        if let Some(n) = array {
            // A list's items are named by their index, as flax's state dicts name them.
            self.deeper(depth, at)?;
            for i in 0..n {
                let keep = self.push(&i.to_string());
                self.value(depth + 1)?;
                self.pop(keep);
            }
            return Ok(());
        }
        if let Some((ty, len)) = self.ext_header(m)? {
            let start = self.c.position();
            self.check_fits(len, "an ext value", at)?;
            if ty == 1 || ty == 3 {
                let a =
                    read_ndarray(&mut self.c, start, len).map_err(|e| e.with_tensor(&self.path))?;
                return self.tensor(a, at);
            }
            self.c.seek(start + len);
            return self.skipped();
        }
        self.scalar(m, at)?;
        self.skipped()
    }

    fn deeper(&self, depth: usize, at: u64) -> Result<()> {
        if depth >= MAX_DEPTH {
            return Err(bad(MsgpackError::TooDeep(MAX_DEPTH), at));
        }
        Ok(())
    }

    /// An ext value's type and length, if `m` starts one.
    fn ext_header(&mut self, m: Marker) -> Result<Option<(i8, u64)>> {
        let len = match m {
            Marker::FixExt1 => 1,
            Marker::FixExt2 => 2,
            Marker::FixExt4 => 4,
            Marker::FixExt8 => 8,
            Marker::FixExt16 => 16,
            Marker::Ext8 => read_be::<1>(&mut self.c)?,
            Marker::Ext16 => read_be::<2>(&mut self.c)?,
            Marker::Ext32 => read_be::<4>(&mut self.c)?,
            _ => return Ok(None),
        };
        let ty = read_be::<1>(&mut self.c)? as u8 as i8;
        Ok(Some((ty, len)))
    }

    /// Steps over a leaf that is not an array.
    fn scalar(&mut self, m: Marker, at: u64) -> Result<()> {
        let len = match m {
            Marker::Reserved => return Err(bad(MsgpackError::Reserved, at)),
            Marker::FixStr(n) => u64::from(n),
            Marker::Str8 | Marker::Bin8 => read_be::<1>(&mut self.c)?,
            Marker::Str16 | Marker::Bin16 => read_be::<2>(&mut self.c)?,
            Marker::Str32 | Marker::Bin32 => read_be::<4>(&mut self.c)?,
            Marker::U8 | Marker::I8 => 1,
            Marker::U16 | Marker::I16 => 2,
            Marker::U32 | Marker::I32 | Marker::F32 => 4,
            Marker::U64 | Marker::I64 | Marker::F64 => 8,
            _ => 0,
        };
        self.step_over(len, "a value", at)
    }

    fn skipped(&mut self) -> Result<()> {
        self.out.skipped += 1;
        if self.out.skipped_paths.len() < SKIPPED_SHOWN {
            self.out.skipped_paths.push(self.path.clone());
        }
        Ok(())
    }

    /// Records the ndarray at the current path.
    fn tensor(&mut self, a: Ndarray, at: u64) -> Result<()> {
        let data = Data::One {
            offset: a.offset,
            len: a.len,
        };
        let meta = TensorMeta::new(self.path.clone(), a.dtype, a.shape);
        self.record(meta, data, a.len, at)
    }

    /// Checks a tensor's length, name and cost, and lists it.
    fn record(&mut self, meta: TensorMeta, data: Data, len: u64, at: u64) -> Result<()> {
        let named = |e: Error| e.with_tensor(&meta.name).at_offset(at);
        let expected = meta.byte_len().map_err(named)?;
        if expected != len {
            let e = MsgpackError::DataLength {
                expected,
                actual: len,
            };
            return Err(named(Error::new(e)));
        }
        let chunks = match &data {
            Data::Chunks(c) => c.len() as u64,
            Data::One { .. } => 0,
        };
        let cost = PER_TENSOR + 2 * meta.name.len() as u64 + 8 * meta.shape.len() as u64;
        self.charged = self.charged.saturating_add(cost + 16 * chunks);
        self.data += len;
        let metadata = self.c.position().saturating_sub(self.data);
        crate::header::within_memory_bound(self.charged, metadata)
            .map_err(|e| named(Error::new(e)))?;
        if !self.names.insert(meta.name.clone()) {
            let e = MsgpackError::DuplicateTensor(meta.name.clone());
            return Err(named(Error::new(e)));
        }
        self.out.tensors.push(Tensor { meta, data });
        Ok(())
    }

    /// A chunked array: the rest of its map (`n` entries after the marker
    /// key), `{"shape": {"0": d0, ...}, "chunks": {"0": ndarray, ...}}`.
    fn chunked(&mut self, n: u64, at: u64) -> Result<()> {
        let wrong = |why: &str| bad(MsgpackError::Chunked(why.to_string()), at);
        if marker(&mut self.c)? != Marker::True {
            return Err(wrong("__msgpack_chunked_array__ is not true"));
        }
        let (mut shape, mut chunks) = (None, None);
        for _ in 0..n {
            match self.key()?.as_str() {
                "shape" if shape.is_none() => shape = Some(self.chunk_shape(at)?),
                "chunks" if chunks.is_none() => chunks = Some(self.chunk_list(at)?),
                other => {
                    return Err(wrong(&format!("unexpected or repeated key {other:?}")));
                }
            }
        }
        let (Some(shape), Some((dtype, chunks, elements))) = (shape, chunks) else {
            return Err(wrong("no shape or no chunks"));
        };
        let want = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if want != Some(elements) {
            return Err(wrong(&format!(
                "its chunks hold {elements} elements, its shape {shape:?} makes {want:?}"
            )));
        }
        let len = chunks.iter().map(|c| c.1).sum();
        let meta = TensorMeta::new(self.path.clone(), dtype, shape);
        self.record(meta, Data::Chunks(chunks), len, at)
    }

    /// The `n` entries of a map whose keys must be `"0"`, `"1"`, ... in order.
    fn numbered(&mut self, at: u64, what: &str) -> Result<u64> {
        let m = marker(&mut self.c)?;
        map_len(&mut self.c, m)?.ok_or_else(|| {
            bad(
                MsgpackError::Chunked(format!("its {what} is not a map")),
                at,
            )
        })
    }

    fn index_key(&mut self, i: u64, at: u64, what: &str) -> Result<()> {
        let key = self.key()?;
        if key != i.to_string() {
            let why = format!("its {what} key {key:?} is not \"{i}\"");
            return Err(bad(MsgpackError::Chunked(why), at));
        }
        Ok(())
    }

    fn chunk_shape(&mut self, at: u64) -> Result<Vec<u64>> {
        let n = self.numbered(at, "shape")?;
        if n > 64 {
            return Err(bad(MsgpackError::TooManyDims, at));
        }
        let mut shape = Vec::with_capacity(n as usize);
        for i in 0..n {
            self.index_key(i, at, "shape")?;
            let m = marker(&mut self.c)?;
            match int_value(&mut self.c, m)? {
                Some(d) if d >= 0 && d <= i128::from(u64::MAX) => shape.push(d as u64),
                _ => {
                    let why = "a dimension is not a count".to_string();
                    return Err(bad(MsgpackError::Chunked(why), at));
                }
            }
        }
        Ok(shape)
    }

    /// The chunks: their dtype, places, and element count.
    fn chunk_list(&mut self, at: u64) -> Result<ChunkList> {
        let n = self.numbered(at, "chunks")?;
        let wrong = |why: &str| bad(MsgpackError::Chunked(why.to_string()), at);
        let (mut dtype, mut places, mut elements) = (None, Vec::new(), 0u64);
        for i in 0..n {
            self.index_key(i, at, "chunks")?;
            let chunk_at = self.c.position();
            let m = marker(&mut self.c)?;
            let Some((1, len)) = self.ext_header(m)? else {
                return Err(wrong("a chunk is not an ndarray"));
            };
            self.check_fits(len, "an ext value", chunk_at)?;
            let start = self.c.position();
            let a = read_ndarray(&mut self.c, start, len).map_err(|e| e.with_tensor(&self.path))?;
            let [count] = a.shape[..] else {
                return Err(wrong("a chunk is not one-dimensional"));
            };
            if *dtype.get_or_insert(a.dtype) != a.dtype {
                return Err(wrong("its chunks' dtypes differ"));
            }
            elements = elements
                .checked_add(count)
                .ok_or_else(|| wrong("too many elements"))?;
            places.push((a.offset, a.len));
        }
        let dtype = dtype.ok_or_else(|| wrong("no chunks"))?;
        Ok((dtype, places, elements))
    }
}

/// A chunked array's chunks: their dtype, places, and element count.
type ChunkList = (crate::Dtype, Vec<(u64, u64)>, u64);

/// What a marker starts, for messages.
fn kind(m: Marker) -> &'static str {
    match m {
        Marker::Null => "nil",
        Marker::True | Marker::False => "a boolean",
        Marker::F32 | Marker::F64 => "a float",
        Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => "bytes",
        Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => "a map",
        Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => "an array",
        Marker::Reserved => "byte 0xc1",
        _ => "an ext value",
    }
}
