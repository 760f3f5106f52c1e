//! The zip format of `torch.save` (torch >= 1.6): `ROOT/data.pkl`, each
//! storage stored as `ROOT/data/KEY`, `ROOT/byteorder` (torch >= 2.1;
//! little before). Read with our zip reader; data members are never read
//! here, only located.

use std::fs::File;
use std::io::Read;

use super::{bad, Located, Storages};
use crate::block_cache::BlockCache;
use crate::io_util::PositionalReader;
use crate::source::zip::{check_overlaps, data_start_via, span, MemberReader, Method, ZipEntry};
use crate::{Error, PyTorchError, Result};

/// The most bytes a `data.pkl` may have: the pickle is an index of the
/// tensors, never their data, but torch spends ~100 bytes a tensor on it
/// (99 MB for a million `layer.N.w`), so room for a million tensors with
/// names of ~40 bytes.
pub(crate) const MAX_PICKLE: u64 = 128 << 20;

/// What the archive's layout tells before any storage is read.
#[derive(Debug)]
pub(crate) struct ZipCheckpoint {
    /// `data.pkl`'s member and where its bytes start: read by
    /// [`read_pickle`] once the directory is freed.
    pub pickle: (ZipEntry, u64),
    /// `byteorder` said `big`.
    pub big_endian: bool,
    /// Every `ROOT/data/KEY` member, by key.
    pub storages: Storages,
    /// `ROOT/data/`, which a storage's key completes into its member's name.
    pub data_prefix: String,
    /// The most bytes [`read_pickle`] reads of `data.pkl`.
    pub max_pickle: u64,
}

/// True if a zip's members say it is a PyTorch checkpoint (or TorchScript
/// archive, which [`open`] then refuses) rather than an `.npz`.
pub(crate) fn is_torch_zip(entries: &[ZipEntry]) -> bool {
    entries.iter().any(|e| {
        let base = e.name.rsplit('/').next().unwrap_or(&e.name);
        base == "data.pkl" || base == "constants.pkl"
    })
}

fn check_size(e: &ZipEntry, limit: u64) -> Result<()> {
    if e.uncompressed > limit {
        return Err(bad(PyTorchError::MemberTooLarge {
            member: e.name.clone(),
            size: e.uncompressed,
            limit,
        }));
    }
    Ok(())
}

fn read_member(file: &File, e: &ZipEntry, start: u64, limit: u64) -> Result<Vec<u8>> {
    check_size(e, limit)?;
    let mut out = Vec::with_capacity(e.uncompressed as usize);
    if e.crc32 == 0 && e.method == Method::Stored {
        // Saved without CRCs: nothing to check against.
        PositionalReader::new(file, start, e.uncompressed)
            .read_to_end(&mut out)
            .map_err(Error::io)?;
    } else {
        let mut r = MemberReader::new(file, e, start, 64 * 1024)?;
        r.read_to_end(&mut out).map_err(Error::io)?;
    }
    Ok(out)
}

/// `data.pkl`'s bytes.
pub(crate) fn read_pickle(file: &File, c: &ZipCheckpoint) -> Result<Vec<u8>> {
    read_member(file, &c.pickle.0, c.pickle.1, c.max_pickle)
}

/// Locates the pickle, byte order and storages of the archive `file`.
pub(crate) fn open(file: &File, entries: &[ZipEntry], dir_start: u64) -> Result<ZipCheckpoint> {
    open_within(file, entries, dir_start, MAX_PICKLE)
}

/// [`open`], with a `data.pkl` of at most `max_pickle` bytes (the
/// caller's `pickle-bytes` limit).
pub(crate) fn open_within(
    file: &File,
    entries: &[ZipEntry],
    dir_start: u64,
    max_pickle: u64,
) -> Result<ZipCheckpoint> {
    let pickles: Vec<&ZipEntry> = entries
        .iter()
        .filter(|e| e.name == "data.pkl" || e.name.ends_with("/data.pkl"))
        .collect();
    let torchscript = entries
        .iter()
        .any(|e| e.name.ends_with("constants.pkl") || e.name.contains("/code/"));
    if torchscript {
        return Err(bad(PyTorchError::TorchScript));
    }
    let [pkl] = pickles.as_slice() else {
        return Err(bad(PyTorchError::DataPklCount(pickles.len())));
    };
    let root = pkl.name.strip_suffix("data.pkl").unwrap_or("");
    // Local headers, member after member, read a block at a time. Each
    // member read is located by `data_start_via`, which checks its local
    // header against the directory and a stored member's two sizes (one
    // that claimed more bytes than it holds would be read past its end);
    // its span is kept for the overlap check.
    let mut cache = BlockCache::default();
    let start = data_start_via(&mut cache, file, pkl, dir_start)?;
    check_size(pkl, max_pickle)?;
    let mut big_endian = false;
    let data_prefix = format!("{root}data/");
    // Sized first: a million storages take 48 MB, not a doubling's 64 MB.
    let count = entries
        .iter()
        .filter(|e| e.name.starts_with(&data_prefix))
        .count();
    let mut storages = Vec::with_capacity(count);
    // The members read: `data.pkl`, `byteorder` and the storages.
    let mut spans = Vec::with_capacity(count + 2);
    spans.push(span(pkl, start));
    for e in entries {
        if e.name == format!("{root}byteorder") {
            let start = data_start_via(&mut cache, file, e, dir_start)?;
            spans.push(span(e, start));
            big_endian = match read_member(file, e, start, 16)?.as_slice() {
                b"little" => false,
                b"big" => true,
                other => {
                    return Err(bad(PyTorchError::Byteorder(
                        String::from_utf8_lossy(other).into_owned(),
                    )))
                }
            };
        } else if let Some(key) = e.name.strip_prefix(&data_prefix) {
            if e.method != Method::Stored {
                return Err(bad(PyTorchError::CompressedStorage(e.name.clone())));
            }
            let start = data_start_via(&mut cache, file, e, dir_start)?;
            spans.push(span(e, start));
            let located = Located {
                start,
                // Its compressed size too: `data_start_via` checked.
                len: e.uncompressed,
                // torch writes CRC 0 when it was told not to compute them.
                crc: (e.crc32 != 0).then_some(e.crc32),
            };
            storages.push((key.into(), located));
        }
    }
    // Members that share bytes (a zip bomb's trick: a thousand storages
    // over one run of bytes, each a valid member) are refused before any
    // storage is read; the spans are freed before the storages' table is
    // built.
    check_overlaps(spans)?;
    Ok(ZipCheckpoint {
        pickle: ((*pkl).clone(), start),
        big_endian,
        // Member names are unique (the directory refuses twins).
        storages: Storages::new(storages)?,
        data_prefix,
        max_pickle,
    })
}
