//! Version 1 B-trees (`TREE`): a group's symbol nodes (type 0) and a
//! chunked dataset's chunks (type 1). Only the leaves' entries are wanted;
//! each is returned with the key before it (a chunk's size, filter mask
//! and offsets). A node's level must be one less than its parent's, so a
//! walk ends; the nodes visited are counted against what the file has
//! room for, so a tree whose nodes point at each other cannot make it long,
//! and a node reached twice is refused (a tree has no shared children:
//! sharing would list the same leaves again and again).

use std::collections::HashSet;

use super::error::Hdf5Error;
use super::read::{bad, malformed, Fields, Geometry};
use crate::Result;

/// Deepest tree walked (libhdf5 itself keeps them far shallower).
const MAX_LEVEL: u8 = 32;

/// A leaf entry: the key before it, and the child's address.
pub(crate) struct Leaf {
    pub(crate) key: Vec<u8>,
    /// The key's file offset, for errors.
    pub(crate) key_at: u64,
    pub(crate) child: u64,
}

/// The leaves of the tree at `root`, of node type `node_type`, whose keys
/// are `key_size` bytes, in key order.
pub(crate) fn leaves(
    geo: Geometry<'_>,
    root: u64,
    node_type: u8,
    key_size: usize,
) -> Result<Vec<Leaf>> {
    let node_header = 8 + 2 * u64::from(geo.offset_size);
    // Every node takes at least its header and one key: the most the file holds.
    let mut budget = geo.len / (node_header + key_size as u64) + 1;
    let mut out = Vec::new();
    let mut stack = vec![(root, None::<u8>)];
    let mut seen = HashSet::new();
    while let Some((addr, want_level)) = stack.pop() {
        if budget == 0 {
            return Err(bad(Hdf5Error::TooMany("B-tree nodes"), addr));
        }
        budget -= 1;
        if !seen.insert(addr) {
            return Err(malformed("a B-tree node reached twice", addr));
        }
        let mut head = geo.block("a B-tree node", addr, node_header)?;
        head.signature("TREE")?;
        let ty = head.u8()?;
        if ty != node_type {
            return Err(malformed(
                format!("a B-tree node of type {ty} where type {node_type} belongs"),
                addr + 4,
            ));
        }
        let level = head.u8()?;
        if level > MAX_LEVEL || want_level.is_some_and(|w| w != level) {
            return Err(malformed(
                format!("a B-tree node at level {level}"),
                addr + 5,
            ));
        }
        let used = u64::from(head.u16()?);
        let entry = key_size as u64 + u64::from(geo.offset_size);
        let body_len = used * entry + key_size as u64;
        let mut body = geo.block("a B-tree node", addr + node_header, body_len)?;
        let mut children = Vec::with_capacity(used as usize);
        for _ in 0..used {
            let key_at = body.at();
            let key = body.bytes(key_size)?.to_vec();
            let child = body.addr()?;
            if level == 0 {
                out.push(Leaf { key, key_at, child });
            } else {
                children.push(child);
            }
        }
        // Children in reverse onto the stack: they come off in key order.
        for child in children.into_iter().rev() {
            stack.push((child, Some(level - 1)));
        }
        if out.len() as u64 > geo.len {
            return Err(bad(Hdf5Error::TooMany("B-tree entries"), addr));
        }
    }
    Ok(out)
}

/// A key's fields, parsed.
pub(crate) fn key_fields<'f>(geo: Geometry<'f>, leaf: &Leaf) -> Fields<'f> {
    Fields::new(leaf.key.clone(), leaf.key_at, "a B-tree key", geo)
}
