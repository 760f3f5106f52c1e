//! Groups: the walk from the root that finds every dataset and its path.
//!
//! Old-style groups (h5py's default) keep their members in a symbol table:
//! a B-tree of symbol nodes (`SNOD`) whose entries name a member by an
//! offset into the group's local heap (`HEAP`). New-style groups
//! (`libver="latest"`) hold link messages in their header, or, past a few
//! members, in a fractal heap (`dense`). Soft and
//! external links are skipped and counted: they name another object,
//! whose data is listed under its own path if it is in the file. So is a
//! second hard link to an object: each group is walked, and each dataset
//! listed, once, under the first path that reaches it (groups linking the
//! next one twice, forty deep, would otherwise make 2^40 paths).

use std::collections::HashSet;

use super::btree::leaves;
use super::dense::dense_links;
use super::error::Hdf5Error;
use super::header::{kind, read_header, Message};
use super::read::{bad, malformed, Fields, Geometry};
use crate::Result;

/// Deepest nesting of groups walked.
pub(crate) const MAX_DEPTH: usize = 64;

/// An object found by the walk that is not a group: its path and header.
pub(crate) struct Found<'f> {
    pub(crate) path: String,
    pub(crate) messages: Vec<Message<'f>>,
    pub(crate) header: u64,
}

/// What a walk found.
#[derive(Default)]
pub(crate) struct Walked<'f> {
    pub(crate) objects: Vec<Found<'f>>,
    /// Soft and external links, and hard links to an object reached before.
    pub(crate) links_skipped: u64,
    /// The objects reached so far, by header address.
    reached: HashSet<u64>,
}

/// Walks the groups from `root`: every object that is not a group, with
/// its path (names joined with `/`, no leading `/`), members in each
/// group's own order (a symbol table's is by name).
pub(crate) fn walk(geo: Geometry<'_>, root: u64) -> Result<Walked<'_>> {
    let mut out = Walked::default();
    let mut on_path = HashSet::new();
    out.reached.insert(root);
    let messages = read_header(geo, root)?;
    group(geo, root, messages, "", 0, &mut on_path, &mut out)?;
    Ok(out)
}

/// A member of a group: a hard link's name and object, or a link skipped.
enum Member {
    Hard(String, u64),
    Skipped,
}

impl Member {
    /// A hard link's name; `None` (first) for a link skipped.
    fn name(&self) -> Option<&str> {
        match self {
            Member::Hard(name, _) => Some(name),
            Member::Skipped => None,
        }
    }
}

fn group<'f>(
    geo: Geometry<'f>,
    addr: u64,
    messages: Vec<Message<'f>>,
    path: &str,
    depth: usize,
    on_path: &mut HashSet<u64>,
    out: &mut Walked<'f>,
) -> Result<()> {
    if depth > MAX_DEPTH || !on_path.insert(addr) {
        return Err(bad(Hdf5Error::TooDeep(MAX_DEPTH), addr));
    }
    let members = members(geo, messages)?;
    for m in members {
        let (name, child) = match m {
            // A group that contains itself is refused below, not skipped.
            Member::Hard(name, child) if on_path.contains(&child) || out.reached.insert(child) => {
                (name, child)
            }
            Member::Hard(..) | Member::Skipped => {
                out.links_skipped += 1;
                continue;
            }
        };
        let child_path = if path.is_empty() {
            name
        } else {
            format!("{path}/{name}")
        };
        // Paths are built, not read: a long one reached many times is charged.
        geo.budget.charge(child_path.len() as u64, child)?;
        let messages = read_header(geo, child)?;
        if is_group(&messages) {
            group(geo, child, messages, &child_path, depth + 1, on_path, out)?;
        } else {
            out.objects.push(Found {
                path: child_path,
                messages,
                header: child,
            });
        }
    }
    on_path.remove(&addr);
    Ok(())
}

fn is_group(messages: &[Message<'_>]) -> bool {
    messages
        .iter()
        .any(|m| matches!(m.kind, kind::SYMBOL_TABLE | kind::LINK | kind::LINK_INFO))
}

/// The members a group's messages name.
fn members(geo: Geometry<'_>, messages: Vec<Message<'_>>) -> Result<Vec<Member>> {
    let mut out = Vec::new();
    for mut m in messages {
        match m.kind {
            kind::SYMBOL_TABLE => {
                let btree = m.body.addr()?;
                let heap = m.body.addr()?;
                symbol_table(geo, btree, heap, &mut out)?;
            }
            kind::LINK => out.push(link(&mut m.body)?),
            kind::LINK_INFO => {
                let _version = m.body.u8()?;
                let flags = m.body.u8()?;
                if flags & 1 != 0 {
                    m.body.skip(8)?;
                }
                let heap = m.body.addr()?;
                let index = m.body.addr()?;
                if !geo.undefined(heap) {
                    let mut links = Vec::new();
                    for mut f in dense_links(geo, heap, index)? {
                        links.push(link(&mut f)?);
                    }
                    // The name index's order is the names' hashes': by name
                    // instead, as a symbol table lists them.
                    links.sort_by(|a, b| a.name().cmp(&b.name()));
                    out.extend(links);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A link message's member.
fn link(f: &mut Fields<'_>) -> Result<Member> {
    let at = f.at();
    f.version("link message", 1)?;
    let flags = f.u8()?;
    let link_type = if flags & 0x08 != 0 { f.u8()? } else { 0 };
    if flags & 0x04 != 0 {
        f.skip(8)?; // creation order
    }
    if flags & 0x10 != 0 {
        f.skip(1)?; // character set
    }
    let name_len = f.uint(1 << (flags & 3))?;
    let name = name_of(f.bytes(name_len as usize)?, at)?;
    if link_type != 0 {
        return Ok(Member::Skipped);
    }
    Ok(Member::Hard(name, f.addr()?))
}

fn name_of(bytes: &[u8], at: u64) -> Result<String> {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.is_empty() && !s.contains('/') => Ok(s.to_string()),
        Ok(s) => Err(malformed(format!("a link named {s:?}"), at)),
        Err(_) => Err(bad(
            Hdf5Error::NotUtf8(String::from_utf8_lossy(bytes).into_owned()),
            at,
        )),
    }
}

/// The members of an old-style group: its B-tree's symbol nodes, their
/// names in its local heap.
fn symbol_table(geo: Geometry<'_>, btree: u64, heap: u64, out: &mut Vec<Member>) -> Result<()> {
    let names = local_heap(geo, heap)?;
    let key = usize::from(geo.length_size);
    for leaf in leaves(geo, btree, 0, key)? {
        let node = leaf.child;
        let mut head = geo.block("a symbol node", node, 8)?;
        head.signature("SNOD")?;
        head.version("symbol node", 1)?;
        head.skip(1)?;
        let count = u64::from(head.u16()?);
        let entry = 2 * u64::from(geo.offset_size) + 4 + 4 + 16;
        let mut f = geo.block("a symbol node", node + 8, count * entry)?;
        for _ in 0..count {
            let at = f.at();
            let name_at = f.addr()?;
            let object = f.addr()?;
            let cache = f.u32()?;
            f.skip(4 + 16)?;
            let name = heap_name(&names, name_at, at)?;
            if cache == 2 || geo.undefined(object) {
                out.push(Member::Skipped); // a soft link
            } else {
                out.push(Member::Hard(name, object));
            }
        }
    }
    Ok(())
}

/// A local heap's data segment.
fn local_heap(geo: Geometry<'_>, at: u64) -> Result<Fields<'_>> {
    let len = 8 + u64::from(geo.length_size) * 2 + u64::from(geo.offset_size);
    let mut f = geo.block("a local heap", at, len)?;
    f.signature("HEAP")?;
    f.version("local heap", 0)?;
    f.skip(3)?;
    let size = f.length()?;
    f.length()?; // the free list
    let data = f.addr()?;
    geo.block("a local heap's data", data, size)
}

/// The null-terminated name at `offset` of a local heap.
fn heap_name(heap: &Fields<'_>, offset: u64, at: u64) -> Result<String> {
    let data = heap.peek_all();
    let start = usize::try_from(offset)
        .ok()
        .filter(|&o| o < data.len())
        .ok_or_else(|| malformed(format!("a name at {offset}, past its local heap"), at))?;
    let end = data[start..]
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| malformed("a name that runs past its local heap", at))?;
    name_of(&data[start..start + end], at)
}
