//! The superblock: the sizes of addresses and lengths, and where the root
//! group is. Versions 0 and 1 (h5py's default, `libver="earliest"`) and 2
//! and 3 (`libver="latest"`); the file starts with it (no user block).

use super::error::Hdf5Error;
use super::read::{bad, unknown_version, Geometry};
use crate::Result;

/// HDF5's format signature, the file's first 8 bytes.
pub(crate) const SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// What the superblock says.
#[derive(Debug)]
pub(crate) struct Superblock {
    pub(crate) offset_size: u8,
    pub(crate) length_size: u8,
    /// The root group's object header.
    pub(crate) root: u64,
}

/// Reads the superblock of `geo.file`.
pub(crate) fn read_superblock(geo: Geometry<'_>) -> Result<Superblock> {
    let mut f = geo.block_upto("the superblock", 0, 96)?;
    if f.bytes(8).ok() != Some(&SIGNATURE[..]) {
        return Err(bad(Hdf5Error::Signature("HDF5"), 0));
    }
    let version = f.u8()?;
    let (offset_size, length_size) = match version {
        0 | 1 => {
            f.skip(4)?; // free-space, root symbol table, reserved, shared header versions
            (f.u8()?, f.u8()?)
        }
        2 | 3 => (f.u8()?, f.u8()?),
        v => return Err(unknown_version("superblock", v, 8)),
    };
    for (what, size) in [("offsets", offset_size), ("lengths", length_size)] {
        if ![2, 4, 8].contains(&size) {
            let e = Hdf5Error::Malformed(format!("a size of {what} of {size} bytes"));
            return Err(bad(e, 13));
        }
    }
    f.geo.offset_size = offset_size;
    f.geo.length_size = length_size;
    let base = match version {
        0 | 1 => {
            // reserved, group leaf/internal K, consistency flags, (v1) indexed K + reserved
            f.skip(if version == 0 {
                1 + 4 + 4
            } else {
                1 + 4 + 4 + 4
            })?;
            let base = f.addr()?;
            f.skip(usize::from(offset_size))?; // free space
            let eof = f.addr()?;
            f.skip(usize::from(offset_size))?; // driver info
                                               // The root group's symbol table entry: name offset, then its object header.
            f.skip(usize::from(offset_size))?;
            let root = f.addr()?;
            (base, root, eof)
        }
        _ => {
            f.skip(1)?; // consistency flags
            let base = f.addr()?;
            f.skip(usize::from(offset_size))?; // extension
            let eof = f.addr()?;
            (base, f.addr()?, eof)
        }
    };
    if base.0 != 0 {
        let e = Hdf5Error::Unsupported(format!("a base address of {} (a user block)", base.0));
        return Err(bad(e, 8));
    }
    // libhdf5 refuses a file shorter than this too: it was cut short.
    if geo.len < base.2 {
        return Err(bad(
            Hdf5Error::CutShort {
                len: geo.len,
                eof: base.2,
            },
            8,
        ));
    }
    Ok(Superblock {
        offset_size,
        length_size,
        root: base.1,
    })
}
