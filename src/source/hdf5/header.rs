//! Object headers: the messages that say what an object is (a group's
//! symbol table or links, a dataset's shape, type, layout and filters).
//! Version 1 (`libver="earliest"`) and version 2 (`OHDR`, `libver="latest"`),
//! with their continuation blocks. Checksums are not verified: every field
//! read is checked against the file instead.

use super::error::Hdf5Error;
use super::read::{bad, Fields, Geometry};
use crate::Result;

/// Message types read.
pub(crate) mod kind {
    pub(crate) const DATASPACE: u16 = 0x01;
    pub(crate) const LINK_INFO: u16 = 0x02;
    pub(crate) const DATATYPE: u16 = 0x03;
    pub(crate) const FILL_OLD: u16 = 0x04;
    pub(crate) const FILL: u16 = 0x05;
    pub(crate) const LINK: u16 = 0x06;
    pub(crate) const EXTERNAL_FILES: u16 = 0x07;
    pub(crate) const LAYOUT: u16 = 0x08;
    pub(crate) const FILTERS: u16 = 0x0b;
    pub(crate) const CONTINUATION: u16 = 0x10;
    pub(crate) const SYMBOL_TABLE: u16 = 0x11;
}

/// The most continuation blocks one header may have.
const MAX_BLOCKS: usize = 1024;

/// Counts the blocks of one header and their bytes against the limits
/// (every message's body is held until the header is read).
#[derive(Default)]
struct Budget {
    blocks: usize,
    bytes: u64,
}

impl Budget {
    fn take(&mut self, at: u64, len: u64) -> Result<()> {
        self.blocks += 1;
        self.bytes = self.bytes.saturating_add(len);
        if self.blocks > MAX_BLOCKS || self.bytes > super::read::MAX_BLOCK {
            return Err(bad(Hdf5Error::TooMany("header continuation blocks"), at));
        }
        Ok(())
    }
}

/// One message: its type, flags and body.
pub(crate) struct Message<'f> {
    pub(crate) kind: u16,
    pub(crate) flags: u8,
    pub(crate) body: Fields<'f>,
}

/// Reads the messages of the object header at `addr`.
pub(crate) fn read_header<'f>(geo: Geometry<'f>, addr: u64) -> Result<Vec<Message<'f>>> {
    let first = geo.block_upto("an object header", addr, 16)?;
    let mut messages = Vec::new();
    let mut blocks: Vec<(u64, u64)> = Vec::new();
    if first.left() >= 4 && geo.block("", addr, 4)?.rest() == b"OHDR" {
        let mut f = geo.block_upto("an object header", addr, 6 + 16 + 4 + 8)?;
        f.signature("OHDR")?;
        f.version("object header", 2)?;
        let flags = f.u8()?;
        if flags & 0x20 != 0 {
            f.skip(16)?; // access, modification, change, birth times
        }
        if flags & 0x10 != 0 {
            f.skip(4)?; // attribute phase change values
        }
        let size = f.uint(1 << (flags & 3))?;
        let start = f.at();
        let body = geo.block("an object header", start, size)?;
        read_messages(body, Some(flags), &mut messages, &mut blocks)?;
        let mut budget = Budget::default();
        budget.take(start, size)?;
        while let Some((at, len)) = blocks.pop() {
            budget.take(at, len)?;
            let mut block = geo.block("an object header continuation", at, len)?;
            block.signature("OCHK")?;
            let n = block.left().saturating_sub(4); // the checksum
            let body = block.sub(n, "an object header continuation")?;
            read_messages(body, Some(flags), &mut messages, &mut blocks)?;
        }
        return Ok(messages);
    }
    let mut f = first;
    f.version("object header", 1)?;
    f.skip(1)?;
    // The message count: the blocks' ends bound the messages instead.
    f.skip(2)?;
    f.skip(4)?; // reference count
    let size = u64::from(f.u32()?);
    // The messages start 16 bytes in (the prefix padded to 8 bytes).
    blocks.push((addr + 16, size));
    let mut budget = Budget::default();
    while let Some((at, len)) = blocks.pop() {
        budget.take(at, len)?;
        let body = geo.block("an object header", at, len)?;
        read_messages(body, None, &mut messages, &mut blocks)?;
    }
    Ok(messages)
}

fn continuation(m: &mut Fields<'_>, blocks: &mut Vec<(u64, u64)>) -> Result<()> {
    let at = m.addr()?;
    let len = m.length()?;
    blocks.push((at, len));
    Ok(())
}

/// The messages of one header block: version 1 (`v2_flags` `None`: a 2-byte
/// kind, 3 reserved bytes) or version 2 (a 1-byte kind, then a creation order
/// when its header's flags say so).
fn read_messages<'f>(
    mut f: Fields<'f>,
    v2_flags: Option<u8>,
    out: &mut Vec<Message<'f>>,
    blocks: &mut Vec<(u64, u64)>,
) -> Result<()> {
    let (prefix, skip) = match v2_flags {
        None => (8, 3),
        Some(flags) if flags & 0x04 != 0 => (6, 2), // creation order
        Some(_) => (4, 0),
    };
    // What is left at the end, shorter than a message's prefix, is a gap.
    while f.left() >= prefix {
        let kind = match v2_flags {
            None => f.u16()?,
            Some(_) => u16::from(f.u8()?),
        };
        let size = usize::from(f.u16()?);
        let flags = f.u8()?;
        f.skip(skip)?;
        let mut body = f.sub(size, "a header message")?;
        if kind == kind::CONTINUATION {
            continuation(&mut body, blocks)?;
        } else if kind != 0 {
            out.push(Message { kind, flags, body });
        }
    }
    Ok(())
}
