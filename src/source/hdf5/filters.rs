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
    let mut data = raw.to_vec();
    for (i, f) in filters.iter().enumerate().rev() {
        if i < 32 && mask & (1 << i) != 0 {
            continue;
        }
        data = match *f {
            Filter::Deflate => inflate(&data, logical)?,
            Filter::Shuffle(width) => unshuffle(&data, width),
            Filter::Fletcher32 => {
                let n = data.len().checked_sub(4).ok_or(DecodeError::Length(0))?;
                data.truncate(n);
                data
            }
        };
    }
    if data.len() != logical {
        return Err(DecodeError::Length(data.len() as u64));
    }
    Ok(data)
}

/// Inflates a zlib stream to at most `logical + 1` bytes.
fn inflate(raw: &[u8], logical: usize) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(logical + 1);
    flate2::read::ZlibDecoder::new(raw)
        .take(logical as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Inflate(e.to_string()))?;
    Ok(out)
}

/// Undoes the shuffle of `width`-byte elements: byte j of every element
/// was stored together, j = 0 first; a tail shorter than an element was
/// left as it was.
fn unshuffle(data: &[u8], width: usize) -> Vec<u8> {
    let n = data.len() / width;
    if width <= 1 || n <= 1 {
        return data.to_vec();
    }
    let mut out = vec![0u8; data.len()];
    for j in 0..width {
        let plane = &data[j * n..(j + 1) * n];
        for (k, &b) in plane.iter().enumerate() {
            out[k * width + j] = b;
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
