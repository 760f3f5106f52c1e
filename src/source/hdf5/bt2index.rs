//! The version 2 B-tree chunk index (`BTHD`): what libhdf5 1.10 and later
//! write for a chunked dataset with more than one unlimited dimension
//! (h5py's `maxshape=(None, None)`) under `libver="v110"` or `"latest"`
//! (index type 5). Its records are of type 10 (chunks without filters:
//! the address, then the chunk's index in each dimension, 8 bytes each) or
//! 11 (filtered: the address, the stored size, the filter mask, then the
//! indexes). The tree is walked by `dense::btree2_records`, as a dense
//! group's name index is.

use super::dataset::{Chunk, ChunkShape};
use super::dense::btree2_records;
use super::read::{Fields, Geometry};
use crate::Result;

/// Record types of a chunk index: without filters, and filtered.
const CHUNKS: u8 = 10;
const FILTERED_CHUNKS: u8 = 11;

/// The stored chunks the B-tree at `header` indexes; their offsets and
/// sizes are the caller's to check.
pub(crate) fn btree2_chunks(
    geo: Geometry<'_>,
    header: u64,
    s: &ChunkShape<'_>,
) -> Result<Vec<Chunk>> {
    let ChunkShape { chunk, logical, .. } = *s;
    let indexes = 8 * chunk.len() as u64;
    let addr = u64::from(geo.offset_size);
    let tree = btree2_records(geo, header, |ty, len| match ty {
        CHUNKS => len == addr + indexes,
        FILTERED_CHUNKS => (addr + 5 + indexes..=addr + 12 + indexes).contains(&len),
        _ => false,
    })?;
    let filtered = tree.ty == FILTERED_CHUNKS;
    let read = |(bytes, at): (Vec<u8>, u64)| -> Result<Chunk> {
        // `wanted` checked a filtered record has room for a size.
        let size_len = if filtered {
            bytes.len() - (addr + 4 + indexes) as usize
        } else {
            0
        };
        let mut f = Fields::new(bytes, at, "a chunk record", geo);
        let addr = f.addr()?;
        let (size, mask) = if filtered {
            (f.uint(size_len)?, f.u32()?)
        } else {
            (logical, 0)
        };
        let offsets = chunk
            .iter()
            .map(|&c| Ok(f.uint(8)?.saturating_mul(c)))
            .collect::<Result<_>>()?;
        Ok(Chunk {
            offsets,
            addr,
            size,
            mask,
        })
    };
    tree.records.into_iter().map(read).collect()
}
