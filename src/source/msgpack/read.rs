//! Reading MessagePack's pieces from a cursor: markers (by `rmp`),
//! big-endian lengths and integers, and the errors they end in.

use std::fs::File;

use rmp::Marker;

use crate::error::msgpack::MsgpackError;
use crate::source::cursor::FileCursor;
use crate::{Error, Result};

/// A bad-input error at `at`.
pub(crate) fn bad(e: MsgpackError, at: u64) -> Error {
    Error::new(e).at_offset(at)
}

/// The file ended inside `what`, which began at `at`.
pub(crate) fn truncated(what: &'static str, at: u64) -> Error {
    bad(MsgpackError::Truncated(what), at)
}

fn io_or_truncated(e: std::io::Error, what: &'static str, at: u64) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        truncated(what, at)
    } else {
        Error::io(e)
    }
}

/// The next marker.
pub(crate) fn marker(c: &mut FileCursor<&File>) -> Result<Marker> {
    let at = c.position();
    rmp::decode::read_marker(c).map_err(|e| io_or_truncated(e.0, "a value", at))
}

/// An `N`-byte big-endian number.
pub(crate) fn read_be<const N: usize>(c: &mut FileCursor<&File>) -> Result<u64> {
    let at = c.position();
    let mut b = [0u8; N];
    std::io::Read::read_exact(c, &mut b).map_err(|e| io_or_truncated(e, "a length", at))?;
    Ok(b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
}

/// The integer a marker starts, read; `None` if it starts something else.
pub(crate) fn int_value(c: &mut FileCursor<&File>, m: Marker) -> Result<Option<i128>> {
    let signed = |v: u64, bits: u32| {
        let shift = 64 - bits;
        i128::from(((v << shift) as i64) >> shift)
    };
    Ok(Some(match m {
        Marker::FixPos(v) => i128::from(v),
        Marker::FixNeg(v) => i128::from(v),
        Marker::U8 => i128::from(read_be::<1>(c)?),
        Marker::U16 => i128::from(read_be::<2>(c)?),
        Marker::U32 => i128::from(read_be::<4>(c)?),
        Marker::U64 => i128::from(read_be::<8>(c)?),
        Marker::I8 => signed(read_be::<1>(c)?, 8),
        Marker::I16 => signed(read_be::<2>(c)?, 16),
        Marker::I32 => signed(read_be::<4>(c)?, 32),
        Marker::I64 => signed(read_be::<8>(c)?, 64),
        _ => return Ok(None),
    }))
}

/// The length of a map a marker starts; `None` if it starts something else.
pub(crate) fn map_len(c: &mut FileCursor<&File>, m: Marker) -> Result<Option<u64>> {
    Ok(Some(match m {
        Marker::FixMap(n) => u64::from(n),
        Marker::Map16 => read_be::<2>(c)?,
        Marker::Map32 => read_be::<4>(c)?,
        _ => return Ok(None),
    }))
}
