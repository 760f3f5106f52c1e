//! The .npy header: magic, version, length, and the dict that says dtype,
//! memory order and shape. Pure: it parses bytes handed to it.

use super::literal::{parse, Literal};
use crate::transform::Transform;
use crate::{Dtype, Error, ErrorKind, Result};

/// `\x93NUMPY`: every .npy file starts with it.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Largest header text we read. numpy itself refuses more than 10,000
/// bytes by default, and a plain array's header (even with 64 axes) is
/// under 2 KB; a larger claim is refused before reading or allocating.
pub const MAX_HEADER_TEXT: u64 = 64 * 1024;

/// What the first bytes say: version and where the data starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prelude {
    /// (major, minor): 1.0, 2.0 or 3.0.
    pub version: (u8, u8),
    /// Bytes of header text.
    pub text_len: u64,
    /// Offset of the text: 10 for version 1, 12 for 2 and 3.
    pub text_start: u64,
}

impl Prelude {
    /// Where the data starts: wherever the length field says, never assumed aligned.
    pub fn data_start(&self) -> u64 {
        self.text_start + self.text_len
    }
}

/// Bytes needed to parse the prelude of any version.
pub const PRELUDE_LEN: usize = 12;

/// Parses the first bytes of a .npy (at least 10; 12 for versions 2 and 3).
pub fn parse_prelude(first: &[u8]) -> Result<Prelude> {
    if first.len() < 10 || &first[..6] != MAGIC {
        return Err(npy_error("not an .npy file (bad magic)").at_offset(0));
    }
    let version = (first[6], first[7]);
    let (text_len, text_start) = match version.0 {
        1 => (u16::from_le_bytes([first[8], first[9]]) as u64, 10),
        2 | 3 if first.len() >= 12 => {
            let n = u32::from_le_bytes(first[8..12].try_into().expect("4 bytes"));
            (n as u64, 12)
        }
        2 | 3 => return Err(npy_error("file ends inside the header length").at_offset(8)),
        _ => {
            let msg = format!("unsupported .npy version {}.{}", version.0, version.1);
            return Err(npy_error(msg).at_offset(6));
        }
    };
    if text_len > MAX_HEADER_TEXT {
        let msg = format!("header length {text_len} exceeds the limit of {MAX_HEADER_TEXT} bytes");
        return Err(npy_error(msg).at_offset(8));
    }
    Ok(Prelude {
        version,
        text_len,
        text_start,
    })
}

/// Reads and parses a whole .npy header from `r`, leaving `r` at the data.
#[cfg(any(test, feature = "internals"))]
pub fn read_header<R: std::io::Read>(r: &mut R) -> Result<(Prelude, NpyHeader)> {
    read_header_as(r, None)
}

/// [`read_header`], reading void elements (`<V2`) as `void_as` (see [`map_descr_as`]).
pub fn read_header_as<R: std::io::Read>(
    r: &mut R,
    void_as: Option<Dtype>,
) -> Result<(Prelude, NpyHeader)> {
    let short = |e: std::io::Error, at: u64| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            npy_error("input ends inside the header").at_offset(at)
        } else {
            Error::io(e)
        }
    };
    let mut pre = [0u8; PRELUDE_LEN];
    r.read_exact(&mut pre[..10]).map_err(|e| short(e, 0))?;
    let used = if matches!(pre[6], 2 | 3) && &pre[..6] == MAGIC {
        r.read_exact(&mut pre[10..]).map_err(|e| short(e, 10))?;
        PRELUDE_LEN
    } else {
        10
    };
    let prelude = parse_prelude(&pre[..used])?;
    // Bounded by MAX_HEADER_TEXT in parse_prelude.
    let mut text = vec![0u8; prelude.text_len as usize];
    r.read_exact(&mut text)
        .map_err(|e| short(e, prelude.text_start))?;
    let header = parse_header_text_as(&text, &prelude, void_as)?;
    Ok((prelude, header))
}

/// The interpreted header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// The descr as written (`<f4`), for messages.
    pub descr: String,
    /// The safetensors dtype.
    pub dtype: Dtype,
    /// Byte swap for big-endian data; identity otherwise.
    pub transform: Transform,
    /// Data stored in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The shape.
    pub shape: Vec<u64>,
}

/// Parses the header text. Versions 1 and 2 are latin-1, version 3 UTF-8.
#[cfg(any(test, feature = "internals"))]
pub fn parse_header_text(text: &[u8], prelude: &Prelude) -> Result<NpyHeader> {
    parse_header_text_as(text, prelude, None)
}

/// [`parse_header_text`], reading void elements as `void_as` (see [`map_descr_as`]).
pub fn parse_header_text_as(
    text: &[u8],
    prelude: &Prelude,
    void_as: Option<Dtype>,
) -> Result<NpyHeader> {
    let at = |e: Error| e.at_offset(prelude.text_start);
    // ASCII, as numpy writes it, reads the same either way: no copy.
    let decoded: std::borrow::Cow<'_, str> = match std::str::from_utf8(text) {
        Ok(s) if prelude.version.0 >= 3 || s.is_ascii() => s.into(),
        Err(_) if prelude.version.0 >= 3 => return Err(at(npy_error("header is not UTF-8"))),
        _ => text.iter().map(|&b| b as char).collect::<String>().into(),
    };
    if let Some((descr, fortran_order, shape)) = as_numpy_writes_it(&decoded) {
        return header_of(descr.to_string(), fortran_order, shape, void_as).map_err(at);
    }
    let lit = parse(&decoded).map_err(|m| at(npy_error(format!("header: {m}"))))?;
    interpret(lit, void_as).map_err(at)
}

/// The header in exactly the form numpy writes it,
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }` and
/// padding, read without building literals: a fifth of the time of an
/// npz of 20,000 small arrays went to the general parser. Anything else
/// (other spacing or key order, escapes, `L` suffixes, too many
/// dimensions) is `None`, left to the general parser, which reads this
/// form to the same result (a property test holds them to it).
fn as_numpy_writes_it(text: &str) -> Option<(&str, bool, Vec<u64>)> {
    let rest = text.strip_prefix("{'descr': '")?;
    let (descr, rest) = rest.split_once('\'')?;
    if descr.contains('\\') {
        return None;
    }
    let rest = rest.strip_prefix(", 'fortran_order': ")?;
    let (fortran, rest) = match rest.strip_prefix("False") {
        Some(rest) => (false, rest),
        None => (true, rest.strip_prefix("True")?),
    };
    let (dims, rest) = rest.strip_prefix(", 'shape': (")?.split_once(')')?;
    let padding = rest.strip_prefix(", }")?;
    if !padding.bytes().all(|b| b == b' ' || b == b'\n') {
        return None;
    }
    let shape = match dims {
        "" => Vec::new(),
        _ => {
            let body = dims.strip_suffix(',').unwrap_or(dims);
            let dim = |d: &str| match !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) {
                true => d.parse::<u64>().ok(),
                false => None,
            };
            let mut shape: Vec<u64> = body.split(", ").map(dim).collect::<Option<_>>()?;
            // Kept for the tensor's life: no spare room.
            shape.shrink_to_fit();
            (shape.len() <= MAX_DIMS).then_some(shape)?
        }
    };
    Some((descr, fortran, shape))
}

fn interpret(lit: Literal, void_as: Option<Dtype>) -> Result<NpyHeader> {
    let Literal::Dict(items) = lit else {
        return Err(npy_error("header is not a dict"));
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (k, v) in items {
        let Literal::Str(k) = k else {
            return Err(npy_error("header key is not a string"));
        };
        match (k.as_str(), v) {
            ("descr", Literal::Str(s)) => descr = Some(s),
            ("descr", list @ Literal::List(_)) => {
                return Err(unsupported(
                    &list.to_python(),
                    "structured dtypes have no safetensors equivalent",
                ));
            }
            ("descr", tuple @ Literal::Tuple(_)) => {
                return Err(unsupported(
                    &tuple.to_python(),
                    "sub-array dtypes have no safetensors equivalent",
                ));
            }
            ("fortran_order", Literal::Bool(b)) => fortran = Some(b),
            ("shape", Literal::Tuple(dims)) => shape = Some(dims_of(dims)?),
            (other, _) => {
                return Err(npy_error(format!(
                    "unexpected or malformed header key {other:?}"
                )))
            }
        }
    }
    let descr = descr.ok_or_else(|| npy_error("header has no 'descr'"))?;
    let fortran_order = fortran.ok_or_else(|| npy_error("header has no 'fortran_order'"))?;
    let shape = shape.ok_or_else(|| npy_error("header has no 'shape'"))?;
    header_of(descr, fortran_order, shape, void_as)
}

/// The header from its three fields, whichever parser read them.
fn header_of(
    descr: String,
    fortran_order: bool,
    shape: Vec<u64>,
    void_as: Option<Dtype>,
) -> Result<NpyHeader> {
    let (dtype, transform) = map_descr_as(&descr, void_as)?;
    // A shape whose byte length overflows is refused later, naming the
    // tensor; one that fits 64 bits only thanks to a zero is refused here.
    if dtype.byte_len(&shape).is_ok() && !crate::header::numpy_can_hold(dtype, &shape) {
        return Err(npy_error(format!(
            "shape {shape:?} is too big: numpy refuses an array whose non-zero dimensions \
             exceed 2^63-1 bytes, even one with no elements"
        )));
    }
    Ok(NpyHeader {
        descr,
        dtype,
        transform,
        fortran_order,
        shape,
    })
}

/// numpy's own limit on dimensions (NPY_MAXDIMS): np.load refuses more.
pub const MAX_DIMS: usize = 64;

fn dims_of(dims: Vec<Literal>) -> Result<Vec<u64>> {
    // Without this, a compressible header (a deflated npz member of a
    // few bytes) could make every tensor's shape tens of thousands long.
    if dims.len() > MAX_DIMS {
        return Err(npy_error(format!(
            "shape has {} dimensions; numpy allows at most {MAX_DIMS}",
            dims.len()
        )));
    }
    // Exactly its length: collecting `into_iter()` reused the literals'
    // list, so a 1-D shape kept 128 bytes (room for four 32-byte literals)
    // in every one of an npz's 200,000 members.
    let mut shape = Vec::with_capacity(dims.len());
    for d in &dims {
        match *d {
            Literal::Int(n) => shape.push(n),
            _ => {
                return Err(npy_error(
                    "shape holds something other than non-negative integers",
                ))
            }
        }
    }
    Ok(shape)
}

/// Maps a numpy type string to a safetensors dtype and the transform that
/// makes its bytes little-endian.
///
/// ```
/// use safetensors_stream::{Dtype, source::Transform, internals::npy_header::map_descr};
///
/// assert_eq!(map_descr("<f4").unwrap(), (Dtype::F32, Transform::Identity));
/// assert_eq!(map_descr(">c8").unwrap(), (Dtype::C64, Transform::SwapBytes { width: 4 }));
/// assert!(map_descr("|O").is_err());
/// ```
#[cfg(any(test, feature = "internals"))]
pub fn map_descr(descr: &str) -> Result<(Dtype, Transform)> {
    map_descr_as(descr, None)
}

/// [`map_descr`], and a void type (`<V2`, `|V1`: how `np.save` stores
/// ml_dtypes' bfloat16 and float8, whose type it cannot name) read as
/// `void_as`, whose width must be the void's. Never guessed: without
/// `void_as` a void type is refused.
///
/// ```
/// use safetensors_stream::{Dtype, source::Transform, internals::npy_header::map_descr_as};
///
/// assert_eq!(map_descr_as("<V2", Some(Dtype::BF16)).unwrap(), (Dtype::BF16, Transform::Identity));
/// assert_eq!(map_descr_as("|V1", Some(Dtype::F8_E4M3)).unwrap().0, Dtype::F8_E4M3);
/// assert!(map_descr_as("<V2", Some(Dtype::F8_E5M2)).is_err()); // 1 byte, not 2
/// assert!(map_descr_as("<V2", None).is_err());
/// ```
pub fn map_descr_as(descr: &str, void_as: Option<Dtype>) -> Result<(Dtype, Transform)> {
    let (order, rest) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('=', descr),
    };
    let kind = rest.chars().next().unwrap_or(' ');
    let size: Option<u64> = rest.get(kind.len_utf8()..).and_then(|s| s.parse().ok());
    if let (Some(as_dtype), 'V', Some(n)) = (void_as, kind, size) {
        return void_as_dtype(descr, order, n, as_dtype);
    }
    let dtype = match (kind, size) {
        ('b', Some(1)) | ('?', _) => Dtype::BOOL,
        ('i', Some(1)) => Dtype::I8,
        ('u', Some(1)) => Dtype::U8,
        ('i', Some(2)) => Dtype::I16,
        ('u', Some(2)) => Dtype::U16,
        ('i', Some(4)) => Dtype::I32,
        ('u', Some(4)) => Dtype::U32,
        ('i', Some(8)) => Dtype::I64,
        ('u', Some(8)) => Dtype::U64,
        ('f', Some(2)) => Dtype::F16,
        ('f', Some(4)) => Dtype::F32,
        ('f', Some(8)) => Dtype::F64,
        ('c', Some(8)) => Dtype::C64,
        _ => return Err(unsupported(descr, refusal_reason(kind, size))),
    };
    let width = dtype.byte_width().unwrap_or(1);
    let transform = match order {
        '>' if width > 1 => Transform::SwapBytes {
            // A complex64 is two float32s: swap each half.
            width: if dtype == Dtype::C64 {
                4
            } else {
                width as usize
            },
        },
        '|' if width > 1 => return Err(unsupported(descr, "a multi-byte type needs a byte order")),
        _ => Transform::Identity,
    };
    Ok((dtype, transform))
}

/// A void of `n` bytes read as `dtype`: the widths must agree.
fn void_as_dtype(descr: &str, order: char, n: u64, dtype: Dtype) -> Result<(Dtype, Transform)> {
    match dtype.byte_width() {
        Some(w) if w == n => {}
        Some(w) => {
            let reason =
                format!("--npy-void-as {dtype} is {w} bytes per element, but this array's are {n}");
            return Err(unsupported(descr, &reason));
        }
        None => {
            let reason = format!("--npy-void-as {dtype}: a sub-byte dtype cannot be a void type");
            return Err(unsupported(descr, &reason));
        }
    }
    let transform = match order {
        '>' if n > 1 => Transform::SwapBytes { width: n as usize },
        _ => Transform::Identity,
    };
    Ok((dtype, transform))
}

fn refusal_reason(kind: char, size: Option<u64>) -> &'static str {
    match (kind, size) {
        ('O', _) => "object arrays hold pickled Python objects; never unpickled",
        ('U' | 'S' | 'a', _) => "string arrays have no safetensors equivalent",
        ('M' | 'm', _) => "datetime and timedelta arrays have no safetensors equivalent",
        ('V', _) => {
            "void dtype (this is how np.save stores ml_dtypes' bfloat16 and float8); \
                     if you know what it holds, pass --npy-void-as BF16 (or F8_E4M3, F8_E5M2, ...)"
        }
        ('c', Some(16)) => "complex128 has no safetensors equivalent",
        ('f', Some(12 | 16)) => "long double has no safetensors equivalent",
        _ => "no safetensors equivalent",
    }
}

fn npy_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::NpyHeader(msg.into()))
}

fn unsupported(descr: &str, reason: &str) -> Error {
    Error::new(ErrorKind::UnsupportedDtype {
        descr: descr.to_string(),
        reason: reason.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A header as numpy writes it, or near it (another spacing, a
    /// trailing comma, an `L`, an escape, huge or many dimensions).
    fn near_numpy() -> impl Strategy<Value = String> {
        let descr = prop::sample::select(vec![
            "<f4", "|u1", ">i8", "<f2", "|b1", "<c8", "|V2", "<U3", "a\\b", "",
        ]);
        let dim = prop_oneof![0u64..5, Just(u64::MAX), Just(1 << 62)];
        let shape = prop::collection::vec(dim, 0..40);
        let tail = prop::sample::select(vec![", }", ",}", "}", ", }\t", ", } x"]);
        let sep = prop::sample::select(vec![", ", ",", ",  ", "L, "]);
        let trailing = prop::sample::select(vec!["", ",", ", "]);
        (descr, any::<bool>(), shape, tail, sep, trailing).prop_map(
            |(descr, fortran, shape, tail, sep, trailing)| {
                let mut dims: Vec<String> = shape.iter().map(u64::to_string).collect();
                if dims.len() == 1 && trailing.is_empty() {
                    dims[0].push(',');
                }
                let fortran = if fortran { "True" } else { "False" };
                format!(
                    "{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({}{trailing}){tail}   \n",
                    dims.join(sep)
                )
            },
        )
    }

    proptest! {
        #[test]
        fn the_fast_path_reads_what_the_general_parser_reads(text in near_numpy()) {
            if let Some((descr, fortran, shape)) = as_numpy_writes_it(&text) {
                let general = parse(&text).map_err(|m| npy_error(format!("header: {m}")))
                    .and_then(|lit| interpret(lit, None));
                let fast = header_of(descr.to_string(), fortran, shape, None);
                prop_assert_eq!(format!("{fast:?}"), format!("{general:?}"));
            }
        }
    }

    #[test]
    fn the_fast_path_takes_what_numpy_writes() {
        let text = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }      \n";
        assert_eq!(as_numpy_writes_it(text), Some(("<f4", false, vec![3, 4])));
        let one = "{'descr': '|u1', 'fortran_order': True, 'shape': (7,), }\n";
        assert_eq!(as_numpy_writes_it(one), Some(("|u1", true, vec![7])));
        let scalar = "{'descr': '<i8', 'fortran_order': False, 'shape': (), }\n";
        assert_eq!(as_numpy_writes_it(scalar), Some(("<i8", false, vec![])));
        for odd in [
            "{'descr': '<f4', 'fortran_order': False, 'shape': (,), }",
            "{'shape': (), 'descr': '<f4', 'fortran_order': False, }",
        ] {
            assert_eq!(as_numpy_writes_it(odd), None, "{odd}");
        }
    }

    #[test]
    fn prelude_versions() {
        let mut v1 = MAGIC.to_vec();
        v1.extend_from_slice(&[1, 0, 0x76, 0]);
        assert_eq!(parse_prelude(&v1).unwrap().data_start(), 128);
        let mut v3 = MAGIC.to_vec();
        v3.extend_from_slice(&[3, 0, 0x74, 0, 0, 0]);
        assert_eq!(parse_prelude(&v3).unwrap().data_start(), 128);
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&[2, 0, 0xff, 0xff, 0xff, 0xff]);
        assert!(parse_prelude(&huge).is_err());
        assert!(parse_prelude(b"\x93NUMPX\x01\x00\x00\x00").is_err());
    }

    #[test]
    fn descr_refusals() {
        for d in [
            "|O", "<U5", "|S3", "<M8[ns]", "<m8[s]", "|V4", "<V2", "<c16", "<f16", "<f12", ">i",
            "|i4",
        ] {
            assert!(map_descr(d).is_err(), "{d}");
        }
        assert_eq!(map_descr("|b1").unwrap().0, Dtype::BOOL);
        assert_eq!(
            map_descr(">i2").unwrap().1,
            Transform::SwapBytes { width: 2 }
        );
        assert_eq!(map_descr(">u1").unwrap().1, Transform::Identity);
    }

    #[test]
    fn header_text() {
        let p = Prelude {
            version: (1, 0),
            text_len: 0,
            text_start: 10,
        };
        let h = parse_header_text(
            b"{'descr': '>f8', 'fortran_order': True, 'shape': (2, 3), }\n",
            &p,
        )
        .unwrap();
        assert_eq!(h.dtype, Dtype::F64);
        assert!(h.fortran_order);
        assert_eq!(h.shape, [2, 3]);
        assert_eq!(h.shape.capacity(), 2, "a shape holds no spare room");
        let s = parse_header_text(
            b"{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': ()}",
            &p,
        );
        assert!(matches!(
            s.unwrap_err().kind(),
            ErrorKind::UnsupportedDtype { .. }
        ));
        let sub = parse_header_text(
            b"{'descr': ('<i4', (2,)), 'fortran_order': False, 'shape': (3,), }",
            &p,
        )
        .unwrap_err();
        assert!(matches!(sub.kind(), ErrorKind::UnsupportedDtype { .. }));
        assert!(sub.to_string().contains("('<i4', (2,))"), "{sub}");
    }
}
