//! Flax's ndarray encoding inside an ext value (types 1 and 3):
//! `msgpack.packb((shape, dtype_name, arr.tobytes('C')))` — a 3-array of
//! an array of dimensions, the numpy dtype's name and the row-major bytes
//! (`flax/serialization.py`, `_ndarray_to_bytes`). The bytes are located,
//! not read.

use std::fs::File;

use rmp::Marker;

use super::read::{bad, int_value, marker, read_be, truncated};
use crate::error::msgpack::MsgpackError;
use crate::source::cursor::FileCursor;
use crate::{Dtype, Result};

/// numpy's limit on dimensions.
const MAX_DIMS: u64 = 64;

/// An ndarray: its dtype, shape and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ndarray {
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<u64>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

/// Reads the ndarray in the ext payload `[start, start + len)`; leaves the
/// cursor at its end.
pub(crate) fn read_ndarray(c: &mut FileCursor<&File>, start: u64, len: u64) -> Result<Ndarray> {
    let end = start + len;
    let not_flax = |what| bad(MsgpackError::Ndarray(what), start);
    if marker(c)? != Marker::FixArray(3) {
        return Err(not_flax("not a 3-array [shape, dtype, bytes]"));
    }
    let dims = match marker(c)? {
        Marker::FixArray(n) => u64::from(n),
        Marker::Array16 => read_be::<2>(c)?,
        Marker::Array32 => read_be::<4>(c)?,
        _ => return Err(not_flax("its shape is not an array")),
    };
    if dims > MAX_DIMS {
        return Err(bad(MsgpackError::TooManyDims, start));
    }
    let mut shape = Vec::with_capacity(dims as usize);
    for _ in 0..dims {
        let at = c.position();
        let m = marker(c)?;
        match int_value(c, m)? {
            Some(d) if d >= 0 => shape.push(d as u64),
            _ => return Err(bad(MsgpackError::Ndarray("a dimension is not a count"), at)),
        }
    }
    let name_len = match marker(c)? {
        Marker::FixStr(n) => u64::from(n),
        Marker::Str8 => read_be::<1>(c)?,
        _ => return Err(not_flax("its dtype is not a short string")),
    };
    let name_at = c.position();
    let mut name = [0u8; 32];
    let name = name
        .get_mut(..name_len as usize)
        .ok_or_else(|| not_flax("its dtype name is longer than 32 bytes"))?;
    std::io::Read::read_exact(c, name).map_err(|_| truncated("a dtype name", start))?;
    let dtype = dtype_of(name).map_err(|e| e.at_offset(name_at))?;
    let data_len = match marker(c)? {
        Marker::Bin8 => read_be::<1>(c)?,
        Marker::Bin16 => read_be::<2>(c)?,
        Marker::Bin32 => read_be::<4>(c)?,
        _ => return Err(not_flax("its data is not a bin value")),
    };
    let offset = c.position();
    if offset.checked_add(data_len) != Some(end) {
        let e = MsgpackError::ExtLength {
            declared: len,
            actual: (offset - start).saturating_add(data_len),
        };
        return Err(bad(e, start));
    }
    c.seek(end);
    Ok(Ndarray {
        dtype,
        shape,
        offset,
        len: data_len,
    })
}

/// The dtype numpy (with ml_dtypes) names `name`: `arr.dtype.name`.
fn dtype_of(name: &[u8]) -> Result<Dtype> {
    let d = match name {
        b"bool" => Dtype::BOOL,
        b"int8" => Dtype::I8,
        b"uint8" => Dtype::U8,
        b"int16" => Dtype::I16,
        b"uint16" => Dtype::U16,
        b"int32" => Dtype::I32,
        b"uint32" => Dtype::U32,
        b"int64" => Dtype::I64,
        b"uint64" => Dtype::U64,
        b"float16" => Dtype::F16,
        b"bfloat16" => Dtype::BF16,
        b"float32" => Dtype::F32,
        b"float64" => Dtype::F64,
        b"complex64" => Dtype::C64,
        b"float8_e4m3fn" => Dtype::F8_E4M3,
        b"float8_e5m2" => Dtype::F8_E5M2,
        b"float8_e4m3fnuz" => Dtype::F8_E4M3FNUZ,
        b"float8_e5m2fnuz" => Dtype::F8_E5M2FNUZ,
        b"float8_e8m0fnu" => Dtype::F8_E8M0,
        other => {
            let name = String::from_utf8_lossy(other).into_owned();
            return Err(crate::Error::new(MsgpackError::Dtype(name)));
        }
    };
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_names_map_and_others_are_refused_by_name() {
        assert_eq!(dtype_of(b"bfloat16").unwrap(), Dtype::BF16);
        assert_eq!(dtype_of(b"float8_e8m0fnu").unwrap(), Dtype::F8_E8M0);
        for bad in [
            &b"complex128"[..],
            b"float4_e2m1fn",
            b"int4",
            b"object",
            b"<f4",
        ] {
            let e = dtype_of(bad).unwrap_err();
            assert!(e.to_string().contains("is not supported"), "{e}");
        }
    }
}
