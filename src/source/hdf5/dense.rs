//! Dense link storage: a new-style group of more links than its compact
//! limit (8 by default: `libver="latest"` or `track_order=True` in h5py,
//! Keras 3's many-layer groups) keeps its link messages as objects of a
//! fractal heap (`FRHP`), indexed by a version 2 B-tree (`BTHD`) of the
//! names' hashes.
//!
//! The links are found through the index, not by scanning the heap: a
//! direct block's free space is whatever libhdf5's buffer held, so only
//! the B-tree's records say where objects are. Each record holds a heap
//! ID (an offset and a length in the heap's address space); the heap's
//! doubling table maps the offset to a direct block, the root itself or
//! one the root indirect block (`FHIB`) lists. What groups of up to
//! several thousand links use is read; heaps with filters, with indirect
//! blocks below the root, and huge or tiny objects are refused by name.
//! Every count and size is checked against the file before it is used,
//! and no node of the index, nor any direct block, is reached twice.

use std::collections::HashSet;

use super::error::Hdf5Error;
use super::read::{bad, malformed, Fields, Geometry};
use crate::Result;

/// B-tree v2 type of a group's link-name index.
const NAME_INDEX: u8 = 5;

/// A B-tree v2 node's signature, version, type and checksum.
const NODE_PREFIX: u64 = 10;

/// Deepest B-tree v2 walked.
const MAX_DEPTH: u16 = 16;

/// The link messages of a dense group: the fractal heap at `heap` and its
/// name index at `index`, each message's bytes parsed on their own.
pub(crate) fn dense_links<'f>(geo: Geometry<'f>, heap: u64, index: u64) -> Result<Vec<Fields<'f>>> {
    let heap = Heap::read(geo, heap)?;
    let ids = name_index(geo, index, heap.id_len)?;
    let blocks = heap.direct_blocks(geo)?;
    ids.iter()
        .map(|(id, at)| heap.object(geo, &blocks, id, *at))
        .collect()
}

/// What reading objects of a fractal heap needs from its header.
struct Heap {
    at: u64,
    id_len: usize,
    /// Bytes of a heap ID's offset and length fields.
    offset_bytes: usize,
    length_bytes: usize,
    /// Bytes of a direct block's header (objects' offsets count them).
    block_header: u64,
    width: u64,
    start_block: u64,
    max_direct: u64,
    root: u64,
    /// 0: the root is a direct block.
    root_rows: u64,
}

/// The bytes needed to encode `x` as libhdf5 sizes its fields
/// (`H5VM_limit_enc_size`): one per started 8 bits of its log2, plus one.
fn enc_size(x: u64) -> usize {
    (63 - x.max(1).leading_zeros() as usize) / 8 + 1
}

impl Heap {
    fn read(geo: Geometry<'_>, at: u64) -> Result<Heap> {
        let (o, l) = (u64::from(geo.offset_size), u64::from(geo.length_size));
        // Up to the root's row count; filters' fields and the checksum follow.
        let len = 14 + 12 * l + 3 * o + 8;
        let mut f = geo.block("a fractal heap header", at, len)?;
        f.signature("FRHP")?;
        f.version("fractal heap", 0)?;
        let id_len = usize::from(f.u16()?);
        let filters = f.u16()?;
        let flags = f.u8()?;
        let max_managed = u64::from(f.u32()?);
        f.length()?; // the next huge object's ID
        f.addr()?; // the huge objects' B-tree
        f.length()?; // free space in managed blocks
        f.addr()?; // the free-space manager
        f.length()?; // managed space
        f.length()?; // allocated managed space
        f.length()?; // the direct block allocation iterator
        f.length()?; // managed objects
        f.length()?; // huge objects' bytes
        let huge = f.length()?;
        f.length()?; // tiny objects' bytes
        let tiny = f.length()?;
        let width = u64::from(f.u16()?);
        let start_block = f.length()?;
        let max_direct = f.length()?;
        let max_heap_bits = f.u16()?;
        f.u16()?; // the root's starting rows
        let root = f.addr()?;
        let root_rows = u64::from(f.u16()?);
        let unsupported = |what: &str| bad(Hdf5Error::Unsupported(what.into()), at);
        if filters != 0 {
            return Err(unsupported("a fractal heap with filters"));
        }
        if huge != 0 || tiny != 0 {
            return Err(unsupported("huge or tiny objects in a fractal heap"));
        }
        let pow2 = |x: u64| x.is_power_of_two();
        if width == 0
            || !pow2(start_block)
            || !pow2(max_direct)
            || max_direct < start_block
            || !(1..=64).contains(&max_heap_bits)
        {
            return Err(malformed(
                format!(
                    "a fractal heap of width {width}, blocks of {start_block} to {max_direct} \
                     bytes, {max_heap_bits}-bit offsets"
                ),
                at,
            ));
        }
        let offset_bytes = usize::from(max_heap_bits).div_ceil(8);
        let direct_bits = 63 - max_direct.leading_zeros() as usize;
        let length_bytes = direct_bits.div_ceil(8).min(enc_size(max_managed));
        if 1 + offset_bytes + length_bytes > id_len {
            return Err(malformed(format!("heap IDs of {id_len} bytes"), at));
        }
        let checksum = if flags & 2 != 0 { 4 } else { 0 };
        Ok(Heap {
            at,
            id_len,
            offset_bytes,
            length_bytes,
            block_header: 5 + o + offset_bytes as u64 + checksum,
            width,
            start_block,
            max_direct,
            root,
            root_rows,
        })
    }

    /// The rows of the doubling table that hold direct blocks.
    fn direct_rows(&self) -> u64 {
        let log2 = |x: u64| u64::from(63 - x.leading_zeros());
        log2(self.max_direct) - log2(self.start_block) + 2
    }

    /// Every direct block: (its offset in the heap, its size, its address;
    /// `None` where not allocated).
    fn direct_blocks(&self, geo: Geometry<'_>) -> Result<Vec<(u64, u64, Option<u64>)>> {
        if self.root_rows == 0 {
            return Ok(vec![(0, self.start_block, Some(self.root))]);
        }
        let o = u64::from(geo.offset_size);
        let rows = self.root_rows.min(self.direct_rows());
        let direct = rows * self.width;
        let indirect = (self.root_rows - rows) * self.width;
        let len = 5 + o + self.offset_bytes as u64 + (direct + indirect) * o;
        let mut f = geo.block("a fractal heap indirect block", self.root, len)?;
        f.signature("FHIB")?;
        f.skip(1 + geo.offset_size as usize + self.offset_bytes)?;
        let mut out = Vec::with_capacity(direct as usize);
        let mut offset = 0u64;
        // Each block holds its own part of the heap: one address in two
        // slots would give one object two IDs, and two blocks one header.
        let mut seen = HashSet::new();
        for row in 0..rows {
            let size = if row == 0 {
                self.start_block
            } else {
                self.start_block << (row - 1)
            };
            for _ in 0..self.width {
                let at = f.at();
                let addr = f.addr()?;
                let addr = (!geo.undefined(addr)).then_some(addr);
                if addr.is_some_and(|a| !seen.insert(a)) {
                    return Err(malformed("a fractal heap direct block listed twice", at));
                }
                out.push((offset, size, addr));
                offset = offset.saturating_add(size);
            }
        }
        for _ in 0..indirect {
            let at = f.at();
            if !geo.undefined(f.addr()?) {
                let e = Hdf5Error::Unsupported("a fractal heap of more than one level".into());
                return Err(bad(e, at));
            }
        }
        Ok(out)
    }

    /// The object a managed heap ID (read at `at`) names.
    fn object<'f>(
        &self,
        geo: Geometry<'f>,
        blocks: &[(u64, u64, Option<u64>)],
        id: &[u8],
        at: u64,
    ) -> Result<Fields<'f>> {
        let mut f = Fields::new(id.to_vec(), at, "a heap ID", geo);
        let first = f.u8()?;
        if first >> 4 != 0 {
            let e = format!(
                "a heap ID of version {} and type {}",
                first >> 6,
                (first >> 4) & 3
            );
            return Err(bad(Hdf5Error::Unsupported(e), at));
        }
        let offset = f.uint(self.offset_bytes)?;
        let len = f.uint(self.length_bytes)?;
        // The blocks tile the heap's address space in order (each starts
        // where the one before ends), so their ends ascend: a binary search,
        // not a scan per ID (a million IDs over a million blocks).
        let first_ending_after =
            blocks.partition_point(|&(start, size, _)| start.saturating_add(size) <= offset);
        let block = blocks
            .get(first_ending_after)
            .filter(|(start, size, _)| offset >= *start && offset - start < *size);
        let Some(&(start, size, Some(addr))) = block else {
            let e = format!(
                "a heap object at offset {offset}, in no block of the heap at {}",
                self.at
            );
            return Err(malformed(e, at));
        };
        let inside = offset - start;
        if inside < self.block_header || len > size - inside || len == 0 {
            let e = format!("a heap object of {len} bytes at {inside} in a block of {size}");
            return Err(malformed(e, at));
        }
        geo.block("a fractal heap direct block", addr, 4)?
            .signature("FHDB")?;
        geo.block("a link in a fractal heap", addr + inside, len)
    }
}

/// The heap IDs of a name index (a B-tree v2 of type 5), each with where
/// its record is, in the tree's order (by the names' hashes).
fn name_index(geo: Geometry<'_>, at: u64, id_len: usize) -> Result<Vec<(Vec<u8>, u64)>> {
    let tree = btree2_records(geo, at, |ty, record| {
        ty == NAME_INDEX && record == 4 + id_len as u64
    })?;
    // Each record: the name's hash, then the heap ID.
    Ok(tree
        .records
        .into_iter()
        .map(|(bytes, at)| (bytes[4..].to_vec(), at))
        .collect())
}

/// A version 2 B-tree's records, each's bytes and where it is, in the
/// tree's order.
pub(crate) struct Btree2 {
    /// The tree's record type (5: link names, 10 and 11: chunks).
    pub(crate) ty: u8,
    pub(crate) records: Vec<(Vec<u8>, u64)>,
}

/// Reads every record of the version 2 B-tree whose header is at `at`, if
/// `wanted(type, record length)` (else it is malformed where it is found).
pub(crate) fn btree2_records(
    geo: Geometry<'_>,
    at: u64,
    wanted: impl Fn(u8, u64) -> bool,
) -> Result<Btree2> {
    let o = u64::from(geo.offset_size);
    let len = 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + o + 2 + u64::from(geo.length_size);
    let mut f = geo.block("a B-tree v2 header", at, len)?;
    f.signature("BTHD")?;
    f.version("B-tree v2", 0)?;
    let ty = f.u8()?;
    let node_size = u64::from(f.u32()?);
    let record = u64::from(f.u16()?);
    let depth = f.u16()?;
    f.skip(2)?; // split and merge percentages
    let root = f.addr()?;
    let root_records = u64::from(f.u16()?);
    let total = f.length()?;
    if !wanted(ty, record) {
        let e = format!("a B-tree v2 of type {ty} with records of {record} bytes");
        return Err(malformed(e, at));
    }
    // Every record takes its bytes in some node: no file holds more.
    if depth > MAX_DEPTH || node_size <= NODE_PREFIX + record || total > geo.len / record {
        let e =
            format!("a B-tree v2 of depth {depth}, nodes of {node_size} bytes, {total} records");
        return Err(malformed(e, at));
    }
    let sizes = PointerSizes::new(o, node_size, record, depth);
    let mut out = Vec::new();
    let mut stack = vec![(root, root_records, depth)];
    // Every node holds at least one record, so no tree visits more nodes than records.
    let mut budget = total + 1;
    // A tree shares no nodes: one reached again (from two parents, or from
    // itself) would list its records again, as often as it is named.
    let mut seen = HashSet::new();
    while let Some((addr, records, level)) = stack.pop() {
        if budget == 0 || out.len() as u64 > total {
            return Err(bad(Hdf5Error::TooMany("B-tree v2 nodes"), addr));
        }
        budget -= 1;
        if geo.undefined(addr) && records == 0 {
            continue; // an empty tree
        }
        if !seen.insert(addr) {
            return Err(malformed("a B-tree v2 node reached twice", addr));
        }
        let ptr = sizes.pointer(level);
        let len = 6 + records * record + if level > 0 { (records + 1) * ptr } else { 0 };
        if len > node_size {
            let e = format!("a B-tree v2 node of {records} records in {node_size} bytes");
            return Err(malformed(e, addr));
        }
        let mut node = geo.block("a B-tree v2 node", addr, len)?;
        node.signature(if level == 0 { "BTLF" } else { "BTIN" })?;
        node.skip(2)?; // version, type
        for _ in 0..records {
            let at = node.at();
            out.push((node.bytes(record as usize)?.to_vec(), at));
        }
        let mut children = Vec::new();
        if level > 0 {
            for _ in 0..=records {
                let child = node.addr()?;
                let n = node.uint(sizes.records)?;
                if level > 1 {
                    node.uint(sizes.totals[level as usize - 1])?;
                }
                children.push((child, n, level - 1));
            }
        }
        stack.extend(children.into_iter().rev());
    }
    if out.len() as u64 != total {
        let e = format!("a B-tree v2 of {total} records holding {}", out.len());
        return Err(malformed(e, at));
    }
    Ok(Btree2 { ty, records: out })
}

/// The widths of an internal node's child pointers, as libhdf5 derives
/// them from the node size (`H5B2__hdr_init`): a child's record count in
/// the bytes the most records a leaf holds need, and below depth 1 its
/// subtree's total in the bytes the most that subtree holds needs.
struct PointerSizes {
    addr: usize,
    records: usize,
    /// By depth: bytes of the total-records field of a child at that depth.
    totals: Vec<usize>,
}

impl PointerSizes {
    fn new(addr: u64, node_size: u64, record: u64, depth: u16) -> Self {
        let leaf_max = (node_size - NODE_PREFIX) / record;
        let records = enc_size(leaf_max);
        let mut sizes = PointerSizes {
            addr: addr as usize,
            records,
            totals: vec![enc_size(leaf_max)],
        };
        let mut cum = leaf_max;
        for d in 1..=depth {
            let ptr = sizes.pointer(d) as u64;
            let max = node_size.saturating_sub(NODE_PREFIX + ptr) / (record + ptr);
            cum = max
                .saturating_add(1)
                .saturating_mul(cum)
                .saturating_add(max);
            sizes.totals.push(enc_size(cum));
        }
        sizes
    }

    /// Bytes of a child pointer in a node at `depth`.
    fn pointer(&self, depth: u16) -> u64 {
        let total = if depth > 1 {
            self.totals[depth as usize - 1]
        } else {
            0
        };
        (self.addr + self.records + total) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_sizes_follow_libhdf5s_rule() {
        assert_eq!(enc_size(0), 1);
        assert_eq!(enc_size(45), 1);
        assert_eq!(enc_size(255), 1);
        assert_eq!(enc_size(256), 2);
        assert_eq!(enc_size(4096), 2);
        // 512-byte nodes of 11-byte records (7-byte heap IDs), 8-byte addresses:
        // 45 records a leaf, 24 an internal node of depth 1.
        let s = PointerSizes::new(8, 512, 11, 2);
        assert_eq!(s.pointer(1), 9);
        assert_eq!(s.totals[1], enc_size(25 * 45 + 24));
        assert_eq!(s.pointer(2), 9 + s.totals[1] as u64);
    }
}
