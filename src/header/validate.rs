//! Validation of a header against the file it heads: every rule of the
//! format, in the reference reader's order, plus the strict extras.

use super::json::{parse_json, RawTensor};
use super::names::permute;
use super::{Header, TensorEntry, MAX_HEADER_LEN, PREFIX_LEN};
use crate::error::Span;
use crate::{Error, HeaderError, Result};

/// How strictly to read a header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// The format's own rules: also refuses duplicate keys anywhere, a first
    /// byte other than `{`, extra fields in a tensor's entry, padding other
    /// than trailing spaces, and the reference's alternative JSON shapes.
    #[default]
    Strict,
    /// Accepts exactly what the reference reader (safetensors 0.8) accepts.
    Reference,
}

/// The rules a header is read under: a [`Mode`], and whether a repeated
/// key is refused (always in strict mode; optional in reference mode, where
/// the reference silently keeps the last one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Strict or reference.
    pub mode: Mode,
    /// Refuse a key given twice in one object.
    pub refuse_duplicate_keys: bool,
}

impl Rules {
    /// The format's rules (the default).
    pub const STRICT: Rules = Rules {
        mode: Mode::Strict,
        refuse_duplicate_keys: true,
    };
    /// Exactly the reference reader's rules.
    pub const REFERENCE: Rules = Rules {
        mode: Mode::Reference,
        refuse_duplicate_keys: false,
    };
    /// What a conversion reads its safetensors inputs with: the reference's
    /// leniency, but never an ambiguous repeated key.
    pub const SOURCE: Rules = Rules {
        mode: Mode::Reference,
        refuse_duplicate_keys: true,
    };

    /// The rules of `mode`.
    pub fn of(mode: Mode) -> Rules {
        match mode {
            Mode::Strict => Rules::STRICT,
            Mode::Reference => Rules::REFERENCE,
        }
    }
}

impl Default for Rules {
    fn default() -> Self {
        Rules::STRICT
    }
}

/// Checks the 8-byte prefix against the file's length and returns N.
///
/// Runs before anything is allocated on N's claim: N must be within the
/// 100,000,000-byte limit and within the file.
///
/// ```
/// use safetensors_stream::header::check_prefix;
///
/// assert_eq!(check_prefix(16u64.to_le_bytes(), 24).unwrap(), 16);
/// assert!(check_prefix(u64::MAX.to_le_bytes(), 24).is_err());
/// assert!(check_prefix(17u64.to_le_bytes(), 24).is_err());
/// ```
pub fn check_prefix(prefix: [u8; 8], file_len: u64) -> Result<u64> {
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER_LEN {
        let kind = HeaderError::HeaderTooLarge {
            len: n,
            limit: MAX_HEADER_LEN,
        };
        return Err(Error::new(kind).at_offset(0));
    }
    let available = file_len.saturating_sub(PREFIX_LEN);
    if n > available {
        return Err(Error::new(HeaderError::HeaderPastEnd { len: n, available }).at_offset(0));
    }
    Ok(n)
}

/// Parses and validates the header's `n` bytes of a file of `file_len` bytes.
///
/// `json` is the file's bytes `8..8+n`; the data buffer is never needed.
pub fn parse_header(json: &[u8], file_len: u64, rules: Rules) -> Result<Header> {
    let header = parse_header_json(json, rules)?;
    check_file_len(&header, file_len)?;
    Ok(header)
}

/// Parses and validates a header's bytes without knowing the file's length
/// (a stream): every rule but the last, that the file is
/// [`Header::file_len`] bytes long, which the caller checks as it reads.
pub fn parse_header_json(json: &[u8], rules: Rules) -> Result<Header> {
    let header_len = json.len() as u64;
    let text = std::str::from_utf8(json).map_err(|e| {
        Error::new(HeaderError::HeaderNotUtf8).at_offset(PREFIX_LEN + e.valid_up_to() as u64)
    })?;
    if rules.mode == Mode::Strict {
        check_starts_with_brace(json)?;
    }
    let raw = parse_json(text, rules).map_err(|(kind, pos)| {
        let e = Error::new(kind);
        match pos {
            Some(p) => e.at_offset(PREFIX_LEN + p),
            None => e,
        }
    })?;
    if rules.mode == Mode::Strict {
        check_padding(json)?;
    }
    let tensors = check_layout(raw.tensors)?;
    Ok(Header {
        metadata: raw.metadata,
        tensors,
        header_len,
    })
}

/// Validates a whole file held in memory (tests, fuzzing, small files).
///
/// ```
/// use safetensors_stream::header::{parse_file_bytes, Rules};
///
/// let mut file = 16u64.to_le_bytes().to_vec();
/// file.extend_from_slice(b"{}              ");
/// assert!(parse_file_bytes(&file, Rules::STRICT).unwrap().tensors.is_empty());
/// file[8] = b' ';
/// file[9] = b'{';
/// file[10] = b'}';
/// assert!(parse_file_bytes(&file, Rules::STRICT).is_err()); // leading space
/// assert!(parse_file_bytes(&file, Rules::REFERENCE).is_ok());
/// ```
pub fn parse_file_bytes(file: &[u8], rules: Rules) -> Result<Header> {
    let file_len = file.len() as u64;
    let Some(prefix) = file.get(..8) else {
        return Err(Error::new(HeaderError::FileTooShort { len: file_len }).at_offset(0));
    };
    let n = check_prefix(prefix.try_into().expect("8 bytes"), file_len)?;
    // n <= file_len - 8 was checked, so the slice is in bounds.
    parse_header(&file[8..8 + n as usize], file_len, rules)
}

fn check_starts_with_brace(json: &[u8]) -> Result<()> {
    match json.first() {
        Some(&b) if b != b'{' => {
            Err(Error::new(HeaderError::HeaderNotBrace(b)).at_offset(PREFIX_LEN))
        }
        _ => Ok(()),
    }
}

/// After a successful parse only JSON whitespace follows the closing brace,
/// which is therefore the last `}`; strict mode allows only spaces there.
fn check_padding(json: &[u8]) -> Result<()> {
    let close = json.iter().rposition(|&b| b == b'}').unwrap_or(0);
    match json[close + 1..].iter().position(|&b| b != b' ') {
        Some(i) => {
            let at = close + 1 + i;
            Err(Error::new(HeaderError::BadPadding(json[at])).at_offset(PREFIX_LEN + at as u64))
        }
        None => Ok(()),
    }
}

/// Sorts by offsets and checks the ranges tile `[0, end)` exactly, and each
/// range's length is its dtype and shape's byte length (the reference's order).
fn check_layout(mut raw: Vec<RawTensor>) -> Result<Vec<TensorEntry>> {
    // Sorted through a list of indices (ties keep the document's order, as a
    // stable sort would), then moved by swaps: a stable sort of the entries
    // themselves borrows a buffer of half of them, 36 MB for a million.
    let last = u32::try_from(raw.len()).expect("a header holds fewer than 2^32 tensors");
    let mut order: Vec<u32> = (0..last).collect();
    order.sort_unstable_by_key(|&i| (raw[i as usize].begin, raw[i as usize].end, i));
    permute(order, |i, j| raw.swap(i, j));
    // Checked pairwise, then converted in place (a RawTensor and a
    // TensorEntry have one layout, so `collect` reuses the allocation): a
    // second list of a million entries would double the parse's memory.
    let mut start = 0u64;
    for (k, t) in raw.iter().enumerate() {
        check_tiling(k.checked_sub(1).map(|p| &raw[p]), t, start)?;
        start = t.end;
        let expected = t.meta.byte_len()?;
        if t.end - t.begin != expected {
            return Err(Error::new(HeaderError::RangeLength {
                tensor: t.meta.name.clone(),
                dtype: t.meta.dtype,
                shape: t.meta.shape.clone(),
                span: Span(t.begin, t.end),
                expected,
            }));
        }
    }
    Ok(raw
        .into_iter()
        .map(|t| TensorEntry {
            meta: t.meta,
            begin: t.begin,
            end: t.end,
        })
        .collect())
}

fn check_tiling(prev: Option<&RawTensor>, t: &RawTensor, start: u64) -> Result<()> {
    let name = || t.meta.name.clone();
    if t.end < t.begin {
        let span = Span(t.begin, t.end);
        return Err(Error::new(HeaderError::InvertedOffsets {
            tensor: name(),
            span,
        }));
    }
    if t.begin > start {
        return Err(Error::new(HeaderError::Gap {
            begin: start,
            end: t.begin,
            next: name(),
        }));
    }
    if t.begin < start {
        // `start` is the previous tensor's end, so there is one.
        let prev = prev.expect("a tensor ends at start > 0");
        return Err(Error::new(HeaderError::Overlap {
            first: prev.meta.name.clone(),
            first_span: Span(prev.begin, prev.end),
            second: name(),
            second_span: Span(t.begin, t.end),
        }));
    }
    Ok(())
}

/// The file must be exactly `8 + N + data` bytes long.
pub fn check_file_len(header: &Header, file_len: u64) -> Result<()> {
    // data_start <= file_len (checked by the prefix), so the sum overflows
    // only if the data claims near 2^64 bytes: then it cannot match.
    let expected = header.data_start().checked_add(header.data_len());
    if expected != Some(file_len) {
        return Err(Error::new(HeaderError::FileLength {
            expected: expected.unwrap_or(u64::MAX),
            actual: file_len,
        }));
    }
    Ok(())
}
