//! The extensible array chunk index (`EAHD`, `EAIB`, `EASB`, `EADB`): what
//! libhdf5 1.10 and later write for a chunked dataset with one unlimited
//! dimension (h5py's `maxshape` with one `None`) under `libver="v110"` or
//! `"latest"` (index type 4). Its entries are those of the fixed array
//! ([`EntryFormat`]); entry `i` is chunk `i` of the grid with the unlimited
//! dimension moved first (libhdf5 "swizzles" it there, so the array only
//! grows at its end).
//!
//! Where entry `i` is: the first `index_entries` in the index block
//! itself; then data blocks, grouped in super blocks `u = 0, 1, ...` of
//! `2^(u/2)` data blocks of `2^((u+1)/2) * min_entries` entries each. The
//! index block lists the first super blocks' data blocks directly (those
//! of the first `2 log2(min_pointers)`), then the later super blocks,
//! each of which lists its data blocks. Data blocks of more than
//! `2^page_bits` entries are paged (libhdf5's parameters: from super block
//! 13, past 131,076 chunks): the block holds no entries, its pages of
//! `2^page_bits` follow it, and its super block says which were written.

use super::dataset::{Chunk, ChunkShape};
use super::farray::{chunk_grid, grid_offsets, EntryFormat};
use super::read::{malformed, Geometry};
use crate::Result;

/// The header's creation parameters and where its index block is.
struct Header {
    format: EntryFormat,
    entry_len: u64,
    /// Bits of the largest entry index (libhdf5: 32).
    max_bits: u8,
    index_entries: u64,
    min_entries: u64,
    min_pointers: u64,
    page_bits: u8,
    /// How many entries were ever set: the rest are not read.
    entries_set: u64,
    index_block: u64,
}

/// The stored chunks indexed by the extensible array whose header is at
/// `header`, of a dataset with one dimension without a maximum; chunks
/// never written are left out; their offsets and sizes are the caller's
/// to check.
pub(crate) fn extensible_array_chunks(
    geo: Geometry<'_>,
    header: u64,
    s: &ChunkShape<'_>,
) -> Result<Vec<Chunk>> {
    let h = read_header(geo, header)?;
    let mut out = Vec::new();
    let Some(order) = Swizzled::new(geo, s.max_shape, s.chunk, header)? else {
        return Ok(out);
    };
    if geo.undefined(h.index_block) {
        return Ok(out);
    }
    // The index block: its own entries, then the first super blocks' data
    // block addresses, then the later super blocks' addresses.
    let super_blocks = 1 + u64::from(h.max_bits).saturating_sub(u64::from(log2(h.min_entries)));
    let direct_supers = 2 * u64::from(log2(h.min_pointers));
    let direct_blocks = 2 * (h.min_pointers - 1);
    let super_addrs = super_blocks.saturating_sub(direct_supers);
    let prefix = 6 + u64::from(geo.offset_size);
    let addr = u64::from(geo.offset_size);
    let len = prefix + h.index_entries * h.entry_len + (direct_blocks + super_addrs) * addr;
    let mut ib = geo.block("an extensible array index block", h.index_block, len)?;
    ib.signature("EAIB")?;
    ib.skip(prefix as usize - 4)?;
    let mut keep = |i: u64, f: &mut super::read::Fields<'_>| -> Result<()> {
        out.extend(h.format.read(f, || order.offsets(i), s.logical)?);
        Ok(())
    };
    // Entries never set hold the undefined address: read, and left out.
    for i in 0..h.index_entries {
        keep(i, &mut ib)?;
    }
    let dblock_addrs: Vec<u64> = (0..direct_blocks)
        .map(|_| ib.addr())
        .collect::<Result<_>>()?;
    let sblock_addrs: Vec<u64> = (0..super_addrs).map(|_| ib.addr()).collect::<Result<_>>()?;
    // Entry index of the first entry of super block u, and its data blocks.
    let mut first = h.index_entries;
    let mut direct = dblock_addrs.into_iter();
    for u in 0..super_blocks {
        if first >= h.entries_set {
            break;
        }
        let blocks = 1u64 << (u / 2);
        let per_block = (1u64 << u.div_ceil(2)).saturating_mul(h.min_entries);
        let page = 1u64 << h.page_bits;
        // A paged block's pages: each present if its bit is set in the super block.
        let pages = if per_block > page {
            per_block / page
        } else {
            0
        };
        let (addrs, bitmaps) = if u < direct_supers {
            if pages > 0 {
                let e =
                    format!("a paged data block ({per_block} entries) listed by the index block");
                return Err(malformed(e, h.index_block));
            }
            (direct.by_ref().take(blocks as usize).collect(), Vec::new())
        } else {
            let at = sblock_addrs[(u - direct_supers) as usize];
            super_block(geo, &h, at, blocks, pages)?
        };
        let block_prefix = prefix + u64::from(h.max_bits.div_ceil(8));
        for (k, block) in addrs.into_iter().enumerate() {
            let start = first.saturating_add((k as u64).saturating_mul(per_block));
            if geo.undefined(block) || start >= h.entries_set {
                continue;
            }
            let n = per_block.min(h.entries_set - start);
            if pages == 0 {
                let len = block_prefix + n * h.entry_len;
                let mut f = geo.block("an extensible array data block", block, len)?;
                f.signature("EADB")?;
                f.skip(block_prefix as usize - 4)?;
                for i in start..start + n {
                    keep(i, &mut f)?;
                }
                continue;
            }
            // Paged: the block's prefix and checksum, then its pages, each
            // of `page` entries and a checksum, written or not.
            geo.block("an extensible array data block", block, block_prefix + 4)?
                .signature("EADB")?;
            let page_len = page * h.entry_len + 4;
            for p in 0..pages.min(n.div_ceil(page)) {
                // One run of bits over the super block's pages, block by block.
                let bit = k as u64 * pages + p;
                if bitmaps[(bit / 8) as usize] & (0x80 >> (bit % 8)) == 0 {
                    continue;
                }
                let at = block + block_prefix + 4 + p * page_len;
                let (from, count) = (start + p * page, page.min(n - p * page));
                let mut f = geo.block(
                    "an extensible array data block page",
                    at,
                    count * h.entry_len,
                )?;
                for i in from..from + count {
                    keep(i, &mut f)?;
                }
            }
        }
        first = first.saturating_add(blocks.saturating_mul(per_block));
    }
    Ok(out)
}

fn read_header(geo: Geometry<'_>, at: u64) -> Result<Header> {
    let len = 16 + 6 * u64::from(geo.length_size) + u64::from(geo.offset_size);
    let mut f = geo.block("an extensible array header", at, len)?;
    f.signature("EAHD")?;
    let (_version, client, entry_len) = (f.u8()?, f.u8()?, f.u8()?);
    let (max_bits, index_entries, min_entries, min_pointers, page_bits) =
        (f.u8()?, f.u8()?, f.u8()?, f.u8()?, f.u8()?);
    let format = EntryFormat::new(geo, client, entry_len, at)?;
    f.skip(4 * usize::from(geo.length_size))?; // super and data block counts and sizes
    let entries_set = f.length()?;
    f.skip(usize::from(geo.length_size))?; // entries realized
    let index_block = f.addr()?;
    let power_of_two = |n: u8| n >= 2 && n.is_power_of_two();
    if !(1..=64).contains(&max_bits)
        || !power_of_two(min_entries)
        || !power_of_two(min_pointers)
        || page_bits > 32
        || u32::from(log2(u64::from(min_entries))) > u32::from(max_bits)
    {
        let e = format!(
            "an extensible array of 2^{max_bits} entries, {min_entries} per data block, {min_pointers} pointers per super block, pages of 2^{page_bits}"
        );
        return Err(malformed(e, at));
    }
    Ok(Header {
        format,
        entry_len: u64::from(entry_len),
        max_bits,
        index_entries: u64::from(index_entries),
        min_entries: u64::from(min_entries),
        min_pointers: u64::from(min_pointers),
        page_bits,
        entries_set,
        index_block,
    })
}

/// The data block addresses a super block lists (none when the super
/// block was never written), and, when its data blocks are paged (in
/// `pages` pages each), the bitmap of their pages written: bit
/// `block * pages + page`, the top bit of a byte first (libhdf5 sizes it a
/// byte per 8 pages of each block).
fn super_block(
    geo: Geometry<'_>,
    h: &Header,
    at: u64,
    blocks: u64,
    pages: u64,
) -> Result<(Vec<u64>, Vec<u8>)> {
    if geo.undefined(at) {
        return Ok((Vec::new(), Vec::new()));
    }
    let prefix = 6 + u64::from(geo.offset_size) + u64::from(h.max_bits.div_ceil(8));
    let bitmaps = blocks.saturating_mul(pages.div_ceil(8));
    let addrs = blocks.saturating_mul(u64::from(geo.offset_size));
    let len = prefix.saturating_add(bitmaps).saturating_add(addrs);
    let mut f = geo.block("an extensible array super block", at, len)?;
    f.signature("EASB")?;
    f.skip(prefix as usize - 4)?;
    let bitmaps = f.bytes(bitmaps as usize)?.to_vec();
    let addrs = (0..blocks).map(|_| f.addr()).collect::<Result<_>>()?;
    Ok((addrs, bitmaps))
}

/// The order of a chunk grid whose one unlimited dimension comes first.
struct Swizzled {
    /// Chunks per dimension of the others, their product, and their chunks' sizes.
    rest: Vec<u64>,
    cells: u64,
    rest_chunk: Vec<u64>,
    unlimited: usize,
    unlimited_chunk: u64,
}

impl Swizzled {
    /// The order for `max_shape`; `None` when a fixed dimension is 0 (no chunk).
    fn new(geo: Geometry<'_>, max_shape: &[u64], chunk: &[u64], at: u64) -> Result<Option<Self>> {
        let unlimited_size = u64::MAX >> (64 - 8 * u32::from(geo.length_size));
        let unlimited: Vec<usize> = (0..max_shape.len())
            .filter(|&d| max_shape[d] == unlimited_size)
            .collect();
        let [unlimited] = unlimited[..] else {
            let e = format!(
                "an extensible array chunk index for {} unlimited dimensions (it serves one)",
                unlimited.len()
            );
            return Err(malformed(e, at));
        };
        let mut rest = chunk_grid(max_shape, chunk);
        let mut rest_chunk = chunk.to_vec();
        rest.remove(unlimited);
        let unlimited_chunk = rest_chunk.remove(unlimited);
        if rest.contains(&0) {
            return Ok(None);
        }
        let Some(cells) = rest.iter().try_fold(1u64, |a, &g| a.checked_mul(g)) else {
            let e = format!("a grid of {rest:?} chunks beside the unlimited dimension");
            return Err(malformed(e, at));
        };
        Ok(Some(Swizzled {
            rest,
            cells,
            rest_chunk,
            unlimited,
            unlimited_chunk,
        }))
    }

    /// The first element's index of chunk `i`: the unlimited dimension's
    /// index is `i` over the others' count, the others' row-major in the rest.
    fn offsets(&self, i: u64) -> Vec<u64> {
        let mut offsets = grid_offsets(i % self.cells, &self.rest, &self.rest_chunk);
        let unlimited = (i / self.cells).saturating_mul(self.unlimited_chunk);
        offsets.insert(self.unlimited, unlimited);
        offsets
    }
}

/// log2 of a power of two.
fn log2(n: u64) -> u8 {
    n.trailing_zeros() as u8
}
