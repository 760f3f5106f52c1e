//! The filters h5py applies to chunks by default or on request, undone:
//! deflate (zlib, `compression="gzip"`), h5py's own LZF (filter 32000,
//! `compression="lzf"`), shuffle, and fletcher32 (whose 4-byte checksum
//! is stripped, not verified). Each chunk decodes to
//! exactly its logical size: inflating stops one byte past it, so a chunk
//! that claims to expand without end costs one chunk of memory.

use std::io::Read;

use super::dataset::Filter;

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
