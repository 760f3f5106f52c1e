//! The filters h5py applies to chunks by default or on request, undone:
//! deflate (zlib, `compression="gzip"`), h5py's own LZF (filter 32000,
//! `compression="lzf"`), shuffle, fletcher32 (whose 4-byte checksum
//! is stripped, not verified) and scaleoffset (`scaleoffset=`: integers
//! exactly, floats as libhdf5 reconstructs them). Each chunk decodes to
//! exactly its logical size: inflating stops one byte past it, so a chunk
//! that claims to expand without end costs one chunk of memory.
//!
//! LZF is decoded here, not by a crate (weighed in December 2026): `lzf`
//! 1.0 is marked deprecated by its author, and `lzf-sys` binds liblzf's C
//! through a C compiler at build time and FFI on hostile bytes; the
//! decoder below is some 40 lines of safe Rust, bounded to one byte past
//! the chunk's size, tested on liblzf's own output (h5py's chunks) and
//! under the `hdf5_file` fuzz target.

use std::io::Read;

use super::dataset::{Filter, ScaleOffset};

/// Why a chunk could not be decoded.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// Its bytes, decoded, are this long (at most one past the expected).
    Length(u64),
    /// Its deflate or LZF stream is corrupt: the filter, and why.
    Inflate(String),
}

/// Undoes `filters` (in reverse order; those whose bit is set in `mask`
/// were not applied) on `raw`, expecting `logical` bytes.
pub(crate) fn decode(
    raw: &[u8],
    filters: &[Filter],
    mask: u32,
    logical: usize,
) -> Result<Vec<u8>, DecodeError> {
    // `None` while no filter has run: the first one reads `raw` in place.
    let mut data: Option<Vec<u8>> = None;
    for (i, f) in filters.iter().enumerate().rev() {
        if i < 32 && mask & (1 << i) != 0 {
            continue;
        }
        let now = data.as_deref().unwrap_or(raw);
        data = Some(match *f {
            Filter::Deflate => inflate(now, logical)?,
            Filter::Lzf => unlzf(now, logical)?,
            Filter::Shuffle(width) => unshuffle(now, width),
            Filter::ScaleOffset(so) => unscale(now, &so, logical)?,
            Filter::Fletcher32 => {
                let n = now.len().checked_sub(4).ok_or(DecodeError::Length(0))?;
                match data.take() {
                    Some(mut v) => {
                        v.truncate(n);
                        v
                    }
                    None => raw[..n].to_vec(),
                }
            }
        });
    }
    let data = data.unwrap_or_else(|| raw.to_vec());
    if data.len() != logical {
        return Err(DecodeError::Length(data.len() as u64));
    }
    Ok(data)
}

/// Inflates a zlib stream to at most `logical + 1` bytes, reading `raw`
/// in place (the `bufread` decoder: no copy of the input into a buffer).
fn inflate(raw: &[u8], logical: usize) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(logical + 1);
    flate2::bufread::ZlibDecoder::new(raw)
        .take(logical as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Inflate(format!("deflate: {e}")))?;
    Ok(out)
}

/// Decompresses an LZF stream (liblzf's format, which h5py's filter
/// writes with no header of its own) to at most `logical + 1` bytes. Each
/// control byte is either a run of literals (under 32: that many plus one
/// follow) or a copy from earlier output (length in its top 3 bits, plus
/// a byte when they are all set, plus 2; distance in its low 5 bits and
/// the next byte, plus 1).
fn unlzf(raw: &[u8], logical: usize) -> Result<Vec<u8>, DecodeError> {
    let corrupt = |why: &str| DecodeError::Inflate(format!("lzf: {why}"));
    let cap = logical + 1;
    let mut out = Vec::with_capacity(cap);
    let mut at = 0;
    let next = |at: &mut usize| {
        let b = raw.get(*at).copied().map(usize::from);
        *at += 1;
        b.ok_or_else(|| corrupt("a copy cut short"))
    };
    while at < raw.len() {
        let ctrl = next(&mut at)?;
        let room = cap - out.len();
        if ctrl < 32 {
            let run = raw
                .get(at..at + ctrl + 1)
                .ok_or_else(|| corrupt("a literal run past the end"))?;
            at += run.len();
            out.extend_from_slice(&run[..run.len().min(room)]);
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += next(&mut at)?;
            }
            let back = ((ctrl & 0x1f) << 8) + next(&mut at)? + 1;
            let from = out
                .len()
                .checked_sub(back)
                .ok_or_else(|| corrupt("a copy from before the start"))?;
            // A copy may overlap what it writes (a run of one byte): one at a time.
            for i in from..from + (len + 2).min(room) {
                out.push(out[i]);
            }
        }
        if out.len() == cap {
            return Err(DecodeError::Length(cap as u64));
        }
    }
    Ok(out)
}

/// The bytes libhdf5 writes before a scaleoffset chunk's packed values:
/// the bits per value (4), the size of the minimum (1) and the minimum (16).
const SCALEOFFSET_HEADER: usize = 21;

/// The low `size` bytes of a u64 set.
fn width_mask(size: usize) -> u64 {
    u64::MAX >> (64 - 8 * size)
}

/// Undoes scaleoffset as libhdf5's `H5Z__filter_scaleoffset` reads it:
/// after a 21-byte header (bits per value, the minimum), every value's
/// low `minbits` bits, most significant first, packed without gaps. An
/// integer is its packed value plus the minimum (wrapping in its width);
/// a float, the packed value over 10^D plus the minimum, in the float's
/// own precision (f32 arithmetic for f32, as libhdf5's `powf`); the
/// all-ones value is the fill value, when one is defined. Values with
/// every bit are stored as they are, in the writer's (little-endian)
/// order. Written in the element's byte order.
fn unscale(raw: &[u8], so: &ScaleOffset, logical: usize) -> Result<Vec<u8>, DecodeError> {
    let corrupt = |why: String| DecodeError::Inflate(format!("scaleoffset: {why}"));
    if so.verbatim {
        return Ok(raw.to_vec());
    }
    // The parameters' element count, checked before anything is allocated.
    let len = so.elements.saturating_mul(so.size as u64);
    if len != logical as u64 {
        return Err(DecodeError::Length(len.min(logical as u64 + 1)));
    }
    let header = raw
        .get(..SCALEOFFSET_HEADER)
        .ok_or_else(|| corrupt(format!("a chunk of {} bytes, under its header", raw.len())))?;
    let minbits = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if minbits > 8 * so.size {
        return Err(corrupt(format!(
            "{minbits} bits per {}-byte value",
            so.size
        )));
    }
    let minimum = header[5..5 + usize::from(header[4]).min(8)]
        .iter()
        .rev()
        .fold(0u64, |a, &b| a << 8 | u64::from(b));
    let body = &raw[SCALEOFFSET_HEADER..];
    let mut out = Vec::with_capacity(logical);
    let full = minbits == 8 * so.size;
    let all_ones = if full {
        u64::MAX
    } else {
        (1u64 << minbits) - 1
    };
    let each = |v: u64| {
        let value = match so.fill {
            _ if full => v,
            Some(fill) if v == all_ones => fill & width_mask(so.size),
            _ => rescale(v, minimum, so),
        };
        let bytes = value.to_le_bytes();
        let element = &bytes[..so.size];
        if so.big_endian {
            out.extend(element.iter().rev());
        } else {
            out.extend_from_slice(element);
        }
    };
    unpack(body, minbits, so.size, logical / so.size, each).ok_or_else(|| {
        corrupt(format!(
            "{} bytes hold fewer than {} values of {minbits} bits",
            body.len(),
            logical / so.size
        ))
    })?;
    Ok(out)
}

/// Gives `each` the `count` values of `minbits` bits, most significant
/// bit first, or `None` (before any) if `body` is too short; with every
/// bit (`minbits` the width), little-endian values as they are. One value
/// at a time: a chunk of 0-bit values has no body to bound a list by.
fn unpack(
    body: &[u8],
    minbits: usize,
    size: usize,
    count: usize,
    mut each: impl FnMut(u64),
) -> Option<()> {
    if minbits == 8 * size {
        let whole = body.get(..count.checked_mul(size)?)?;
        let le = |e: &[u8]| e.iter().rev().fold(0u64, |a, &b| a << 8 | u64::from(b));
        whole.chunks_exact(size).map(le).for_each(each);
        return Some(());
    }
    if (body.len() as u64) * 8 < (count as u64) * minbits as u64 {
        return None;
    }
    let mut bytes = body.iter();
    let (mut acc, mut have) = (0u128, 0usize);
    for _ in 0..count {
        while have < minbits {
            acc = acc << 8 | u128::from(*bytes.next()?);
            have += 8;
        }
        have -= minbits;
        each((acc >> have) as u64 & ((1u64 << minbits) - 1));
        acc &= (1u128 << have) - 1;
    }
    Some(())
}

/// A packed value back to its element's bits: integers add the minimum
/// (wrapping), floats divide by 10^D and add the minimum (whose bits are
/// the low bytes of the stored minimum), as libhdf5 computes them.
fn rescale(v: u64, minimum: u64, so: &ScaleOffset) -> u64 {
    match (so.float, so.size) {
        (true, 4) => {
            let min = f32::from_bits(minimum as u32);
            let value = v as i32 as f32 / 10f32.powf(so.decimals as f32) + min;
            u64::from(value.to_bits())
        }
        (true, _) => {
            let min = f64::from_bits(minimum);
            let value = v as i64 as f64 / 10f64.powf(f64::from(so.decimals)) + min;
            value.to_bits()
        }
        (false, size) => v.wrapping_add(minimum) & width_mask(size),
    }
}

/// Undoes the shuffle of `width`-byte elements: byte j of every element
/// was stored together, j = 0 first; a tail shorter than an element was
/// left as it was. Plane by plane, each written with a stride (iterators,
/// no index checks): byte by byte with an index was a sixth of a chunked
/// file's conversion time (benches/results-formats.md).
fn unshuffle(data: &[u8], width: usize) -> Vec<u8> {
    let n = data.len() / width.max(1);
    if width <= 1 || n <= 1 {
        return data.to_vec();
    }
    let mut out = vec![0u8; data.len()];
    for (j, plane) in data[..n * width].chunks_exact(n).enumerate() {
        for (o, &b) in out[j..].iter_mut().step_by(width).zip(plane) {
            *o = b;
        }
    }
    out[n * width..].copy_from_slice(&data[n * width..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshuffle_regroups_the_bytes_of_each_element() {
        // Two 4-byte elements 0x04030201 and 0x08070605, shuffled, then a 1-byte tail.
        let shuffled = [1, 5, 2, 6, 3, 7, 4, 8, 9];
        assert_eq!(unshuffle(&shuffled, 4), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        // Against the definition, element by element, for widths and tails of every kind.
        for width in 1..=9usize {
            for len in [0, 1, width, 3 * width + width / 2, 100 * width + 1] {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
                let n = len / width;
                let mut want = data.clone();
                if width > 1 && n > 1 {
                    for k in 0..n {
                        for j in 0..width {
                            want[k * width + j] = data[j * n + k];
                        }
                    }
                }
                assert_eq!(unshuffle(&data, width), want, "width {width}, {len} bytes");
            }
        }
    }

    #[test]
    fn filters_run_in_reverse_and_fletcher32_is_stripped() {
        // shuffle then fletcher32 on write: strip the checksum, then unshuffle.
        let mut stored = vec![1, 3, 2, 4];
        stored.extend_from_slice(&[9, 9, 9, 9]);
        let filters = [Filter::Shuffle(2), Filter::Fletcher32];
        assert_eq!(decode(&stored, &filters, 0, 4).unwrap(), [1, 2, 3, 4]);
        assert!(matches!(
            decode(&stored, &filters, 0, 5),
            Err(DecodeError::Length(4))
        ));
    }

    #[test]
    fn lzf_literals_and_overlapping_copies_decode_as_liblzf_writes_them() {
        // "abc" as literals, then 5 bytes from 3 back (overlapping what it
        // writes), then a long copy (length 7 + 3 + 2 = 12) of the byte
        // just written.
        let raw = [2, b'a', b'b', b'c', 0x60, 2, 0xe0, 3, 0];
        let want = b"abcabcabbbbbbbbbbbbb";
        assert_eq!(decode(&raw, &[Filter::Lzf], 0, want.len()).unwrap(), want);
        // One byte short of the logical size: the length error.
        assert!(matches!(
            decode(&raw, &[Filter::Lzf], 0, want.len() + 1),
            Err(DecodeError::Length(20))
        ));
        // Output past the logical size stops one byte past it.
        assert!(matches!(
            decode(&raw, &[Filter::Lzf], 0, 10),
            Err(DecodeError::Length(11))
        ));
    }

    #[test]
    fn corrupt_lzf_is_refused_not_read_out_of_bounds() {
        for (raw, why) in [
            (&[5, b'a'][..], "a literal run past the end"),
            (
                &[2, b'a', b'b', b'c', 0x60, 9],
                "a copy from before the start",
            ),
            (&[2, b'a', b'b', b'c', 0xe0], "a copy cut short"),
        ] {
            match decode(raw, &[Filter::Lzf], 0, 64) {
                Err(DecodeError::Inflate(d)) => assert_eq!(d, format!("lzf: {why}")),
                other => panic!("{raw:?}: {other:?}"),
            }
        }
    }

    /// The 20 client values libhdf5 stores for scaleoffset on `size`-byte
    /// elements: integer (signed) or float, 4 elements, little-endian.
    fn scaleoffset(float: bool, size: u32, factor: u32, fill: Option<u32>) -> ScaleOffset {
        let mut v = [0u32; 20];
        v[..7].copy_from_slice(&[
            if float { 0 } else { 2 },
            factor,
            4,
            float.into(),
            size,
            1,
            0,
        ]);
        if let Some(f) = fill {
            v[7] = 1;
            v[8] = f;
        }
        ScaleOffset::from_values(&v).unwrap()
    }

    /// A scaleoffset chunk: its header (bits per value, an 8-byte minimum) and body.
    fn packed(minbits: u32, minimum: u64, body: &[u8]) -> Vec<u8> {
        let mut raw = minbits.to_le_bytes().to_vec();
        raw.push(8);
        raw.extend_from_slice(&minimum.to_le_bytes());
        raw.extend_from_slice(&[0; 8]);
        raw.extend_from_slice(body);
        raw
    }

    #[test]
    fn scaleoffset_adds_the_minimum_to_values_packed_most_significant_bit_first() {
        // Four 3-bit values 1, 7 (all ones), 0, 5: 001 111 000 101, then padding.
        let raw = packed(3, (-5i64) as u64, &[0b0011_1100, 0b0101_0000]);
        let f = |so| decode(&raw, &[Filter::ScaleOffset(so)], 0, 8).unwrap();
        let i16s = |b: Vec<u8>| {
            b.chunks(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]))
                .collect::<Vec<_>>()
        };
        assert_eq!(i16s(f(scaleoffset(false, 2, 0, None))), [-4, 2, -5, 0]);
        // With a fill value defined, all ones stands for it.
        assert_eq!(
            i16s(f(scaleoffset(false, 2, 0, Some(0xfff6)))),
            [-4, -10, -5, 0]
        );
        // Floats: the value over 10^D plus the minimum (whose bits are the low bytes).
        let raw = packed(3, u64::from(1.5f32.to_bits()), &[0b0011_1100, 0b0101_0000]);
        let so = scaleoffset(true, 4, 1, None);
        let got = decode(&raw, &[Filter::ScaleOffset(so)], 0, 16).unwrap();
        // In f32 arithmetic, as libhdf5's: 7 / 10 + 1.5 is 2.2f32, not 2.2f64 rounded.
        let want: Vec<u8> = [1u8, 7, 0, 5]
            .iter()
            .flat_map(|&v| (f32::from(v) / 10.0 + 1.5).to_le_bytes())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn corrupt_scaleoffset_chunks_are_refused_not_read_out_of_bounds() {
        let so = Filter::ScaleOffset(scaleoffset(false, 2, 0, None));
        for (raw, why) in [
            (vec![3, 0, 0], "a chunk of 3 bytes, under its header"),
            (packed(17, 0, &[0; 8]), "17 bits per 2-byte value"),
            (
                packed(3, 0, &[0]),
                "1 bytes hold fewer than 4 values of 3 bits",
            ),
        ] {
            match decode(&raw, &[so], 0, 8) {
                Err(DecodeError::Inflate(d)) => assert_eq!(d, format!("scaleoffset: {why}")),
                other => panic!("{raw:?}: {other:?}"),
            }
        }
        // The parameters' element count must make the chunk's size.
        assert!(matches!(
            decode(&packed(3, 0, &[0; 2]), &[so], 0, 10),
            Err(DecodeError::Length(8))
        ));
    }

    #[test]
    fn a_chunk_that_inflates_past_its_size_is_refused_one_byte_past_it() {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&[0u8; 1 << 20]).unwrap();
        let raw = z.finish().unwrap();
        match decode(&raw, &[Filter::Deflate], 0, 100) {
            Err(DecodeError::Length(101)) => {}
            other => panic!("{other:?}"),
        }
        // The mask skips the filter: the raw bytes are the data.
        assert!(matches!(
            decode(&raw, &[Filter::Deflate], 1, raw.len()),
            Ok(d) if d == raw
        ));
    }
}
