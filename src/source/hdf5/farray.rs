//! The fixed array chunk index (`FAHD`, `FADB`): what libhdf5 1.10 and
//! later write for a chunked dataset whose maximum shape is fixed, under
//! h5py's `libver="v110"` or `"latest"` (data layout version 4 or 5,
//! index type 3). The array has one entry per chunk of the grid over the
//! maximum shape, in row-major order: the chunk's address (undefined: never
//! written) and, when the dataset has filters, its stored size and filter
//! mask. Over `2^page_bits` entries the data block is split into pages,
//! each present only if its bit in the block's bitmap is set.
//!
//! Checksums are not verified (as for the other structures read here):
//! every address and size is checked against the file and the dataset.

use super::chunks::Chunk;
use super::read::{malformed, Fields, Geometry};
use crate::Result;

/// The client ID of an array of filtered chunks (0: unfiltered).
const FILTERED: u8 = 1;
/// The most `page_bits` a header may claim (libhdf5 writes 10).
const MAX_PAGE_BITS: u8 = 32;

/// One entry of the array: a chunk's address, stored size and mask.
struct Entry {
    addr: u64,
    size: Option<u64>,
    mask: u32,
}

/// The stored chunks indexed by the fixed array whose header is at
/// `header`, for chunks of `chunk` (`logical` bytes unfiltered) over a
/// grid of `max_shape`, in the array's order; chunks never written are
/// left out. Their offsets and sizes are the caller's to check.
pub(crate) fn fixed_array_chunks(
    geo: Geometry<'_>,
    header: u64,
    max_shape: &[u64],
    chunk: &[u64],
    logical: u64,
) -> Result<Vec<Chunk>> {
    if geo.undefined(header) {
        return Ok(Vec::new()); // never written: all fill value
    }
    let head_len = 12 + u64::from(geo.length_size) + u64::from(geo.offset_size);
    let mut h = geo.block("a fixed array header", header, head_len)?;
    h.signature("FAHD")?;
    let (_version, client, entry_len, page_bits) = (h.u8()?, h.u8()?, h.u8()?, h.u8()?);
    let count = h.length()?;
    let block = h.addr()?;
    let grid: Vec<u64> = max_shape
        .iter()
        .zip(chunk)
        .map(|(&m, &c)| m.div_ceil(c))
        .collect();
    let cells = grid.iter().try_fold(1u64, |a, &g| a.checked_mul(g));
    if cells != Some(count) || page_bits > MAX_PAGE_BITS {
        let e = format!(
            "a fixed array of {count} entries (pages of 2^{page_bits}) for a grid of {grid:?} chunks"
        );
        return Err(malformed(e, header));
    }
    let size_len = match client {
        FILTERED => usize::from(entry_len).checked_sub(usize::from(geo.offset_size) + 4),
        _ => (usize::from(entry_len) == usize::from(geo.offset_size)).then_some(0),
    };
    let size_len = match size_len {
        Some(n) if n <= 8 && (client != FILTERED || n > 0) => n,
        _ => {
            let e = format!("fixed array entries of {entry_len} bytes (client {client})");
            return Err(malformed(e, header));
        }
    };
    if geo.undefined(block) || count == 0 {
        return Ok(Vec::new());
    }
    let read_entry = |f: &mut Fields<'_>| -> Result<Entry> {
        let addr = f.addr()?;
        if client != FILTERED {
            return Ok(Entry {
                addr,
                size: None,
                mask: 0,
            });
        }
        Ok(Entry {
            addr,
            size: Some(f.uint(size_len)?),
            mask: f.u32()?,
        })
    };
    let prefix = 6 + u64::from(geo.offset_size);
    geo.block("a fixed array data block", block, prefix)?
        .signature("FADB")?;
    let page = 1u64 << page_bits;
    let entry_len = u64::from(entry_len);
    let mut out = Vec::new();
    let mut keep = |i: u64, e: Entry| {
        if !geo.undefined(e.addr) {
            out.push(Chunk {
                offsets: grid_offsets(i, &grid, chunk),
                addr: e.addr,
                size: e.size.unwrap_or(logical),
                mask: e.mask,
            });
        }
    };
    if count <= page {
        let mut f = geo.block("a fixed array's entries", block + prefix, count * entry_len)?;
        for i in 0..count {
            keep(i, read_entry(&mut f)?);
        }
        return Ok(out);
    }
    // Paged: a bitmap of the pages present (and its checksum), then each
    // page's entries and checksum.
    let pages = count.div_ceil(page);
    let bitmap_len = pages.div_ceil(8);
    let bitmap = geo.block("a fixed array's page bitmap", block + prefix, bitmap_len)?;
    let bitmap = bitmap.peek_all().to_vec();
    let mut at = block + prefix + bitmap_len + 4;
    for p in 0..pages {
        let first = p * page;
        let n = page.min(count - first);
        let present = bitmap[(p / 8) as usize] & (0x80 >> (p % 8)) != 0;
        if present {
            let mut f = geo.block("a fixed array page", at, n * entry_len)?;
            for i in first..first + n {
                keep(i, read_entry(&mut f)?);
            }
        }
        at += n * entry_len + 4;
    }
    Ok(out)
}

/// The first element's index of chunk `i` of a row-major `grid` of chunks
/// of `chunk`.
fn grid_offsets(mut i: u64, grid: &[u64], chunk: &[u64]) -> Vec<u64> {
    let mut offsets = vec![0; grid.len()];
    for d in (0..grid.len()).rev() {
        offsets[d] = (i % grid[d]) * chunk[d];
        i /= grid[d];
    }
    offsets
}
