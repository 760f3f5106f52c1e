//! The filters h5py applies to chunks by default or on request, undone:
//! deflate (zlib, `compression="gzip"`), shuffle, and fletcher32 (whose
//! 4-byte checksum is stripped, not verified). Each chunk decodes to
//! exactly its logical size: inflating stops one byte past it, so a chunk
//! that claims to expand without end costs one chunk of memory.

use std::io::Read;

use super::dataset::Filter;

/// Why a chunk could not be decoded.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// Its bytes, decoded, are this long (at most one past the expected).
    Length(u64),
    /// Its deflate stream is corrupt.
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
        .map_err(|e| DecodeError::Inflate(e.to_string()))?;
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
