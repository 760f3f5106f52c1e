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

use super::dataset::{Chunk, ChunkShape};
use super::read::{malformed, Fields, Geometry};
use crate::Result;

/// The client ID of an array of filtered chunks (0: unfiltered).
const FILTERED: u8 = 1;
/// The most `page_bits` a header may claim (libhdf5 writes 10).
const MAX_PAGE_BITS: u8 = 32;

/// How a chunk index's entries are written: an address, then, for
/// filtered chunks, the stored size in `size_len` bytes and the filter
/// mask. Shared by the fixed and the extensible array (client 0: chunks
/// without filters, 1: filtered).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryFormat {
    filtered: bool,
    size_len: usize,
}

impl EntryFormat {
    /// The format of entries of `entry_len` bytes for `client`, from a
    /// header at `at`: the size's width is what is left after the address
    /// and the mask (libhdf5 sizes it by the chunk's size, and by the
    /// layout's version; the header says the total).
    pub(crate) fn new(geo: Geometry<'_>, client: u8, entry_len: u8, at: u64) -> Result<Self> {
        let (entry_len, addr) = (usize::from(entry_len), usize::from(geo.offset_size));
        let size_len = match client {
            FILTERED => entry_len
                .checked_sub(addr + 4)
                .filter(|n| (1..=8).contains(n)),
            0 => (entry_len == addr).then_some(0),
            _ => None,
        };
        let Some(size_len) = size_len else {
            let e = format!("chunk index entries of {entry_len} bytes (client {client})");
            return Err(malformed(e, at));
        };
        Ok(EntryFormat {
            filtered: client == FILTERED,
            size_len,
        })
    }

    /// Reads one entry: the chunk at its first element's `offsets`, or
    /// `None` if it was never written.
    pub(crate) fn read(
        &self,
        f: &mut Fields<'_>,
        offsets: impl FnOnce() -> Vec<u64>,
        logical: u64,
    ) -> Result<Option<Chunk>> {
        let addr = f.addr()?;
        let (size, mask) = if self.filtered {
            (f.uint(self.size_len)?, f.u32()?)
        } else {
            (logical, 0)
        };
        if f.geo.undefined(addr) {
            return Ok(None);
        }
        Ok(Some(Chunk {
            offsets: offsets(),
            addr,
            size,
            mask,
        }))
    }
}

/// The stored chunks indexed by the fixed array whose header is at
/// `header`, over a grid of the maximum shape, in the array's order;
/// chunks never written are left out. Their offsets and sizes are the
/// caller's to check.
pub(crate) fn fixed_array_chunks(
    geo: Geometry<'_>,
    header: u64,
    s: &ChunkShape<'_>,
) -> Result<Vec<Chunk>> {
    let ChunkShape {
        max_shape,
        chunk,
        logical,
    } = *s;
    let head_len = 12 + u64::from(geo.length_size) + u64::from(geo.offset_size);
    let mut h = geo.block("a fixed array header", header, head_len)?;
    h.signature("FAHD")?;
    let (_version, client, entry_len, page_bits) = (h.u8()?, h.u8()?, h.u8()?, h.u8()?);
    let count = h.length()?;
    let block = h.addr()?;
    let grid = chunk_grid(max_shape, chunk);
    let cells = grid.iter().try_fold(1u64, |a, &g| a.checked_mul(g));
    if cells != Some(count) || page_bits > MAX_PAGE_BITS {
        let e = format!(
            "a fixed array of {count} entries (pages of 2^{page_bits}) for a grid of {grid:?} chunks"
        );
        return Err(malformed(e, header));
    }
    let format = EntryFormat::new(geo, client, entry_len, header)?;
    if geo.undefined(block) || count == 0 {
        return Ok(Vec::new());
    }
    let prefix = 6 + u64::from(geo.offset_size);
    geo.block("a fixed array data block", block, prefix)?
        .signature("FADB")?;
    let page = 1u64 << page_bits;
    let entry_len = u64::from(entry_len);
    let mut out = Vec::new();
    let mut keep = |i: u64, f: &mut Fields<'_>| -> Result<()> {
        let offsets = || grid_offsets(i, &grid, chunk);
        out.extend(format.read(f, offsets, logical)?);
        Ok(())
    };
    if count <= page {
        let len = count.saturating_mul(entry_len); // the file's length bounds it
        let mut f = geo.block("a fixed array's entries", block + prefix, len)?;
        for i in 0..count {
            keep(i, &mut f)?;
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
                keep(i, &mut f)?;
            }
        }
        at += n * entry_len + 4;
    }
    Ok(out)
}

/// How many chunks of `chunk` cover `shape` in each dimension.
pub(crate) fn chunk_grid(shape: &[u64], chunk: &[u64]) -> Vec<u64> {
    shape
        .iter()
        .zip(chunk)
        .map(|(&m, &c)| m.div_ceil(c))
        .collect()
}

/// The first element's index of chunk `i` of a row-major `grid` of chunks
/// of `chunk`.
pub(crate) fn grid_offsets(mut i: u64, grid: &[u64], chunk: &[u64]) -> Vec<u64> {
    let mut offsets = vec![0; grid.len()];
    for d in (0..grid.len()).rev() {
        offsets[d] = (i % grid[d]) * chunk[d];
        i /= grid[d];
    }
    offsets
}
