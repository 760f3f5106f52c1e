//! The format of `torch.save` before 1.6 (and with
//! `_use_new_zipfile_serialization=False`): five pickles one after another
//! (magic number, protocol version, sys_info, the checkpoint, the sorted
//! storage keys), then each storage as an int64 element count and its
//! bytes. Offsets follow from the keys and counts alone: 8 bytes are read
//! per storage, never its data.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::model::StorageDecl;
use super::pickle::{unpickle, Limits, Node, Pickled};
use super::{bad, Located, Storages};
use crate::{Error, ErrorKind, PickleError, PyTorchError, Result};

/// The magic number the first pickle holds, as `LONG1` bytes after `PROTO n`.
pub(crate) const MAGIC: [u8; 12] = [
    0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19,
];

/// True if `first` starts the legacy format.
pub(crate) fn is_legacy(first: &[u8]) -> bool {
    first.len() >= 14 && first[0] == 0x80 && (2..=5).contains(&first[1]) && first[2..14] == MAGIC
}

/// The pickles of a legacy checkpoint, and where its storages begin.
#[derive(Debug)]
pub(crate) struct LegacyCheckpoint {
    /// The checkpoint itself.
    pub main: Pickled,
    /// sys_info said `little_endian: False`.
    pub big_endian: bool,
    /// The storage keys, in the order their data follows.
    pub keys: Vec<String>,
    /// Where the first storage's count is.
    pub data_start: u64,
}

/// Reads the five pickles from the start of `file` (`len` bytes): at
/// most `max_pickle` bytes of them, each with [`Limits`] from
/// `limits(len)` for the `len` bytes read.
pub(crate) fn open(
    file: &File,
    len: u64,
    max_pickle: u64,
    limits: impl Fn(usize) -> Limits,
) -> Result<LegacyCheckpoint> {
    // The pickles are small; read a prefix, and a longer one if they do not fit.
    let mut want = len.min(1 << 20);
    loop {
        let mut buf = vec![0u8; want as usize];
        file.read_exact_at(&mut buf, 0).map_err(Error::io)?;
        match parse(&buf, limits(buf.len())) {
            Ok(c) => return Ok(c),
            Err(e) if want < len && want < max_pickle && truncated(&e) => {
                want = (want * 4).min(len).min(max_pickle);
            }
            Err(e) => return Err(e),
        }
    }
}

fn truncated(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Pickle(PickleError::Truncated))
}

fn parse(buf: &[u8], limits: Limits) -> Result<LegacyCheckpoint> {
    // One budget per pickle, from the bytes read so far (the pickles are
    // all of them but the storages' data).
    let mut at = 0usize;
    let next = |at: &mut usize| -> Result<Pickled> {
        let (p, used) = unpickle(&buf[*at..], limits).map_err(|e| match e.offset() {
            // Offsets in the whole file, not in this pickle.
            Some(o) => Error::new(e.into_kind()).at_offset(o + *at as u64),
            None => e,
        })?;
        *at += used;
        Ok(p)
    };
    let magic = next(&mut at)?;
    if !matches!(magic.get(magic.root), Node::BigInt) {
        return Err(bad(PyTorchError::LegacyMagic));
    }
    let version = next(&mut at)?;
    if version.get(version.root) != Node::Int(1001) {
        return Err(bad(PyTorchError::LegacyVersion));
    }
    let info = next(&mut at)?;
    let big_endian = little_endian(&info) == Some(false);
    let main = next(&mut at)?;
    let keys_p = next(&mut at)?;
    let keys = match keys_p.get(keys_p.root) {
        Node::List(ids) => ids
            .iter()
            .map(|&i| match keys_p.get(i) {
                Node::Str(s) => Ok(s.to_string()),
                _ => Err(bad(PyTorchError::KeyListItemNotString)),
            })
            .collect::<Result<Vec<_>>>()?,
        _ => return Err(bad(PyTorchError::KeyListNotList)),
    };
    Ok(LegacyCheckpoint {
        main,
        big_endian,
        keys,
        data_start: at as u64,
    })
}

fn little_endian(info: &Pickled) -> Option<bool> {
    let Node::Dict(items) = info.get(info.root) else {
        return None;
    };
    items
        .iter()
        .find_map(|&(k, v)| match (info.get(k), info.get(v)) {
            (Node::Str("little_endian"), Node::Bool(b)) => Some(b),
            _ => None,
        })
}

/// Walks the storages after the pickles: each count read and checked
/// against what the pickle declared and against the file's length.
pub(crate) fn locate(
    file: &File,
    len: u64,
    c: &LegacyCheckpoint,
    decls: &[(Box<str>, StorageDecl)],
) -> Result<Storages> {
    let decls: HashMap<&str, StorageDecl> = decls.iter().map(|(k, d)| (&**k, *d)).collect();
    let mut at = c.data_start;
    let mut out = Vec::with_capacity(c.keys.len());
    for key in &c.keys {
        let decl = decls
            .get(key.as_str())
            .ok_or_else(|| bad(PyTorchError::NeverDeclared(key.clone())))?;
        if at.checked_add(8).is_none_or(|e| e > len) {
            return Err(bad(PyTorchError::EndsBeforeStorage(key.clone())).at_offset(at));
        }
        let mut n = [0u8; 8];
        file.read_exact_at(&mut n, at).map_err(Error::io)?;
        let count = if c.big_endian {
            u64::from_be_bytes(n)
        } else {
            u64::from_le_bytes(n)
        };
        if count != decl.numel {
            return Err(bad(PyTorchError::StorageCount {
                key: key.clone(),
                count,
                declared: decl.numel,
            })
            .at_offset(at));
        }
        let bytes = decl
            .bytes()
            .ok_or_else(|| bad(PyTorchError::StorageOverflow(key.clone())))?;
        let start = at + 8;
        let end = start
            .checked_add(bytes)
            .filter(|&e| e <= len)
            .ok_or_else(|| bad(PyTorchError::StoragePastEnd(key.clone())).at_offset(at))?;
        out.push((
            key.as_str().into(),
            Located {
                start,
                len: bytes,
                crc: None,
            },
        ));
        at = end;
    }
    Storages::new(out)
}
