//! A zip reader, shared by every format in a zip container (.npz, PyTorch
//! checkpoints): its records here (the central directory, with zip64, and
//! each member's local header checked against it), each member's bytes (a
//! positional, bounded, CRC-checked reader) in [`member`].
//!
//! Layer: source, a reader below the formats: imports the error layer,
//! `block_cache` and `io_util`, and no format.
//!
//! Every number read from the archive is checked against the file's real
//! length before it is used to seek or allocate.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;

use crate::error::zip::{Directory, ZipError, ZipFeature};
use crate::header::names::NameIndex;
use crate::{Error, ErrorKind, Result};

mod member;

use crate::block_cache::BlockCache;
use crate::io_util::PositionalReader;
pub(crate) use member::{check_overlaps, check_overlaps_of, span, MemberReader};

const EOCD_SIG: u32 = 0x0605_4b50;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;
const EOCD_LEN: u64 = 22;
const CENTRAL_LEN: u64 = 46;
const LOCAL_LEN: u64 = 30;

/// Members are stored (0) or deflated (8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// No compression.
    Stored,
    /// Raw deflate.
    Deflated,
}

/// One member, as the central directory records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZipEntry {
    /// Its name, decoded (UTF-8 when flagged, else CP437).
    pub name: String,
    /// Its compression.
    pub method: Method,
    /// General-purpose flags.
    pub flags: u16,
    /// CRC-32 of the uncompressed bytes.
    pub crc32: u32,
    /// Bytes in the archive.
    pub compressed: u64,
    /// Bytes once inflated.
    pub uncompressed: u64,
    /// Offset of its local header.
    pub local_offset: u64,
}

impl ZipEntry {
    /// A directory entry (name ends with `/`).
    pub fn is_dir(&self) -> bool {
        self.name.ends_with('/')
    }
}

fn zip_err(e: ZipError) -> Error {
    Error::new(ErrorKind::Zip(e))
}

fn unsupported(feature: ZipFeature) -> Error {
    zip_err(ZipError::Unsupported(feature))
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

fn read_exact_at(file: &Based, buf: &mut [u8], at: u64) -> Result<()> {
    let from = at
        .checked_add(file.base)
        .ok_or_else(|| zip_err(ZipError::TooShort))?;
    (file.file.read_exact_at(buf, from)).map_err(|e| Error::io(e).at_offset(at))
}

/// Reads the central directory of the archive `file` of `len` bytes.
/// Returns the entries and the directory's offset, which every member's
/// bytes must end before.
pub fn read_directory(file: &File, len: u64) -> Result<(Vec<ZipEntry>, u64)> {
    read_directory_at(file, 0, len)
}

/// [`read_directory`] of an archive that starts at byte `base` of `file`
/// and is `len` bytes long (a distributed checkpoint's item, one archive
/// after another in a file). The archive's own offsets count from `base`;
/// the entries and the directory's offset returned count from the file's
/// start, as every other reader of members expects, and all lie inside
/// the archive. Error offsets count from `base`.
pub(crate) fn read_directory_at(file: &File, base: u64, len: u64) -> Result<(Vec<ZipEntry>, u64)> {
    let file = &Based { file, base };
    let (dir_end, dir) = find_directory(file, len)?;
    // The directory ends where the (zip64) end record begins: bytes between
    // them would be entries that one reader sees and another does not.
    if dir.offset.checked_add(dir.size) != Some(dir_end) {
        let e = ZipError::DirectoryMisplaced {
            directory: dir,
            end: dir_end,
        };
        return Err(zip_err(e).at_offset(dir_end));
    }
    if dir.entries > dir.size / CENTRAL_LEN {
        return Err(zip_err(ZipError::TooManyEntries(dir)).at_offset(dir_end));
    }
    // The lists are reserved for the entries the directory's bytes really
    // hold (counted in a first pass that keeps nothing), never from the
    // record's claim: a lying count costs nothing, and a million members'
    // list is made once, not grown by doubling (each step's copy left its
    // predecessor's pages with the allocator: 60 MiB more at the peak).
    let present = count_entries(file, dir);
    let range = PositionalReader::new(file.file, base + dir.offset, dir.size);
    let mut r = BufReader::with_capacity(64 * 1024, range);
    let mut entries: Vec<ZipEntry> = Vec::with_capacity(present);
    // Two members of one name are two answers to "what is NAME?" (Python's
    // zipfile takes the last, others the first): refused in every reader.
    // Checked through indices, no copy of each name.
    let mut seen = NameIndex::with_capacity(present);
    let mut at = dir.offset;
    for _ in 0..dir.entries {
        let (entry, used) = read_central_entry(&mut r, at)?;
        check_member_bounds(&entry, dir.offset)?;
        if seen
            .insert(entries.len(), &entry.name, |k| &entries[k].name)
            .is_some()
        {
            return Err(zip_err(ZipError::DuplicateMember(entry.name)).at_offset(at));
        }
        entries.push(entry);
        at += used;
    }
    // Members end before the directory, inside the archive: no sum overflows.
    for e in &mut entries {
        e.local_offset += base;
    }
    // The count and the size must describe the same entries: Python's
    // zipfile (numpy) reads entries until the size is used up, so a count
    // that stops early would drop tensors numpy sees.
    if at != dir_end {
        let e = ZipError::EntryCount {
            entries: dir.entries,
            end: at,
            directory_end: dir_end,
        };
        return Err(zip_err(e).at_offset(at));
    }
    // Growth left up to half the room unused; the entries live on as the
    // listing is built, so they are kept at their size.
    entries.shrink_to_fit();
    Ok((entries, base + dir.offset))
}

/// How many of the directory's claimed entries its bytes hold, each a
/// central header with its signature whose name, extra and comment end
/// inside the directory: at most the claim, and at most one per 46 bytes
/// that are there. Nothing is kept; the reading pass that follows reports
/// what is wrong with an entry, at its offset.
fn count_entries(file: &Based, dir: Directory) -> usize {
    let range = PositionalReader::new(file.file, file.base + dir.offset, dir.size);
    let mut r = BufReader::with_capacity(64 * 1024, range);
    let (mut at, mut count) = (0u64, 0usize);
    let mut h = [0u8; CENTRAL_LEN as usize];
    while (count as u64) < dir.entries {
        if r.read_exact(&mut h).is_err() || u32_at(&h, 0) != CENTRAL_SIG {
            break;
        }
        let var = u16_at(&h, 28) as u64 + u16_at(&h, 30) as u64 + u16_at(&h, 32) as u64;
        at += CENTRAL_LEN + var;
        if at > dir.size {
            break;
        }
        if !matches!(io::copy(&mut r.by_ref().take(var), &mut io::sink()), Ok(n) if n == var) {
            break;
        }
        count += 1;
    }
    count
}

/// A file read from `base` on: offsets given to it count from there.
struct Based<'a> {
    file: &'a File,
    base: u64,
}

/// Finds the end-of-central-directory record (and its zip64 twin if
/// needed); returns where the directory must end (where the first end record
/// begins) and the directory's place and count. Every field given twice
/// (per disk and in all, in the classic and in the zip64 record) must agree.
fn find_directory(file: &Based, len: u64) -> Result<(u64, Directory)> {
    if len < EOCD_LEN {
        return Err(zip_err(ZipError::TooShort).at_offset(0));
    }
    let tail_len = len.min(EOCD_LEN + u16::MAX as u64);
    let mut tail = vec![0u8; tail_len as usize];
    read_exact_at(file, &mut tail, len - tail_len)?;
    // The last record whose comment runs exactly to the end of the file.
    let pos = (0..=tail.len() - EOCD_LEN as usize)
        .rev()
        .find(|&i| {
            u32_at(&tail, i) == EOCD_SIG
                && i + EOCD_LEN as usize + u16_at(&tail, i + 20) as usize == tail.len()
        })
        .ok_or_else(|| {
            // A zip's directory is at its end: a cut download is the usual cause.
            zip_err(ZipError::NoEndRecord { searched: tail_len })
        })?;
    let e = &tail[pos..];
    let eocd_at = len - tail_len + pos as u64;
    if u16_at(e, 4) != 0 || u16_at(e, 6) != 0 {
        return Err(unsupported(ZipFeature::MultiDisk).at_offset(eocd_at));
    }
    let (on_disk, total) = (u16_at(e, 8), u16_at(e, 10));
    if on_disk != total {
        let e = ZipError::DiskCounts {
            zip64: false,
            on_disk: on_disk as u64,
            total: total as u64,
        };
        return Err(zip_err(e).at_offset(eocd_at));
    }
    let classic = Directory {
        entries: total as u64,
        size: u32_at(e, 12) as u64,
        offset: u32_at(e, 16) as u64,
    };
    let wide =
        classic.entries == 0xFFFF || classic.size == 0xFFFF_FFFF || classic.offset == 0xFFFF_FFFF;
    if !wide && !has_zip64_locator(file, eocd_at)? {
        return Ok((eocd_at, classic));
    }
    let (at, dir) = read_zip64_eocd(file, eocd_at)?;
    // A classic field that is not the "see zip64" marker must say what the
    // zip64 record says.
    let agree = |classic: u64, marker: u64, wide: u64| classic == marker || classic == wide;
    if !agree(classic.entries, 0xFFFF, dir.entries)
        || !agree(classic.size, 0xFFFF_FFFF, dir.size)
        || !agree(classic.offset, 0xFFFF_FFFF, dir.offset)
    {
        let e = ZipError::EndRecordsDisagree {
            classic,
            zip64: dir,
        };
        return Err(zip_err(e).at_offset(eocd_at));
    }
    Ok((at, dir))
}

fn has_zip64_locator(file: &Based, eocd_at: u64) -> Result<bool> {
    if eocd_at < 20 {
        return Ok(false);
    }
    let mut sig = [0u8; 4];
    read_exact_at(file, &mut sig, eocd_at - 20)?;
    Ok(u32::from_le_bytes(sig) == ZIP64_LOCATOR_SIG)
}

fn read_zip64_eocd(file: &Based, eocd_at: u64) -> Result<(u64, Directory)> {
    if eocd_at < 20 {
        return Err(zip_err(ZipError::Zip64WithoutLocator).at_offset(eocd_at));
    }
    let locator_at = eocd_at - 20;
    let mut loc = [0u8; 20];
    read_exact_at(file, &mut loc, locator_at)?;
    if u32_at(&loc, 0) != ZIP64_LOCATOR_SIG {
        return Err(zip_err(ZipError::Zip64WithoutLocator).at_offset(locator_at));
    }
    if u32_at(&loc, 4) != 0 || u32_at(&loc, 16) > 1 {
        return Err(unsupported(ZipFeature::MultiDisk).at_offset(locator_at));
    }
    let at = u64_at(&loc, 8);
    if at.checked_add(56).is_none_or(|end| end > locator_at) {
        return Err(zip_err(ZipError::Zip64Outside(at)).at_offset(locator_at));
    }
    let mut rec = [0u8; 56];
    read_exact_at(file, &mut rec, at)?;
    if u32_at(&rec, 0) != ZIP64_EOCD_SIG {
        return Err(zip_err(ZipError::Zip64Signature).at_offset(at));
    }
    // The record (12 bytes plus its own size field) ends at the locator.
    if u64_at(&rec, 4)
        .checked_add(12)
        .and_then(|n| n.checked_add(at))
        != Some(locator_at)
    {
        let e = ZipError::Zip64Misplaced {
            at,
            locator: locator_at,
        };
        return Err(zip_err(e).at_offset(at));
    }
    if u32_at(&rec, 16) != 0 || u32_at(&rec, 20) != 0 {
        return Err(unsupported(ZipFeature::MultiDisk).at_offset(at));
    }
    let (on_disk, total) = (u64_at(&rec, 24), u64_at(&rec, 32));
    if on_disk != total {
        let e = ZipError::DiskCounts {
            zip64: true,
            on_disk,
            total,
        };
        return Err(zip_err(e).at_offset(at));
    }
    let dir = Directory {
        entries: total,
        size: u64_at(&rec, 40),
        offset: u64_at(&rec, 48),
    };
    Ok((at, dir))
}

fn read_central_entry(r: &mut impl Read, at: u64) -> Result<(ZipEntry, u64)> {
    let mut h = [0u8; CENTRAL_LEN as usize];
    r.read_exact(&mut h).map_err(|e| short_dir(e, at))?;
    if u32_at(&h, 0) != CENTRAL_SIG {
        return Err(zip_err(ZipError::EntrySignature).at_offset(at));
    }
    let flags = u16_at(&h, 8);
    let method = match u16_at(&h, 10) {
        0 => Method::Stored,
        8 => Method::Deflated,
        m => return Err(unsupported(ZipFeature::Method(m)).at_offset(at)),
    };
    let (name_len, extra_len, comment_len) = (
        u16_at(&h, 28) as usize,
        u16_at(&h, 30) as usize,
        u16_at(&h, 32) as usize,
    );
    let mut var = vec![0u8; name_len + extra_len + comment_len];
    r.read_exact(&mut var).map_err(|e| short_dir(e, at))?;
    let name = decode_name(&var[..name_len], flags & (1 << 11) != 0);
    if flags & 1 != 0 {
        return Err(unsupported(ZipFeature::Encryption(name)).at_offset(at));
    }
    let mut entry = ZipEntry {
        name,
        method,
        flags,
        crc32: u32_at(&h, 16),
        compressed: u32_at(&h, 20) as u64,
        uncompressed: u32_at(&h, 24) as u64,
        local_offset: u32_at(&h, 42) as u64,
    };
    apply_zip64_extra(&mut entry, &var[name_len..name_len + extra_len])
        .map_err(|e| e.at_offset(at))?;
    Ok((entry, CENTRAL_LEN + var.len() as u64))
}

fn short_dir(e: io::Error, at: u64) -> Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        zip_err(ZipError::DirectoryTruncated).at_offset(at)
    } else {
        Error::io(e)
    }
}

/// The zip64 extra holds only the fields that overflowed, in this order.
fn apply_zip64_extra(e: &mut ZipEntry, mut extra: &[u8]) -> Result<()> {
    while extra.len() >= 4 {
        let (id, size) = (u16_at(extra, 0), u16_at(extra, 2) as usize);
        let Some(body) = extra.get(4..4 + size) else {
            return Err(zip_err(ZipError::ExtraOverrun(e.name.clone())));
        };
        if id == 0x0001 {
            let mut fields = body
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8")));
            for slot in [&mut e.uncompressed, &mut e.compressed, &mut e.local_offset] {
                if *slot == 0xFFFF_FFFF {
                    *slot = fields
                        .next()
                        .ok_or_else(|| zip_err(ZipError::Zip64ExtraShort(e.name.clone())))?;
                }
            }
        }
        extra = &extra[4 + size..];
    }
    Ok(())
}

fn check_member_bounds(e: &ZipEntry, dir_offset: u64) -> Result<()> {
    let end = e
        .local_offset
        .checked_add(LOCAL_LEN)
        .and_then(|x| x.checked_add(e.compressed));
    if end.is_none_or(|end| end > dir_offset) {
        let past = ZipError::PastDirectory {
            member: e.name.clone(),
            offset: e.local_offset,
            len: e.compressed,
        };
        return Err(zip_err(past).at_offset(e.local_offset));
    }
    Ok(())
}

/// Names without the UTF-8 flag are CP437, as zip says and Python decodes them.
fn decode_name(raw: &[u8], utf8: bool) -> String {
    if utf8 || raw.is_ascii() {
        return String::from_utf8_lossy(raw).into_owned();
    }
    const HIGH: &str = "ÇüéâäàåçêëèïîìÄÅÉæÆôöòûùÿÖÜ¢£¥₧ƒáíóúñÑªº¿⌐¬½¼¡«»░▒▓│┤╡╢╖╕╣║╗╝╜╛┐└┴┬├─┼╞╟╚╔╩╦╠═╬╧╨╤╥╙╘╒╓╫╪┘┌█▄▌▐▀αßΓπΣσµτΦΘΩδ∞φε∩≡±≥≤⌠⌡÷≈°∙·√ⁿ²■\u{a0}";
    let high: Vec<char> = HIGH.chars().collect();
    raw.iter()
        .map(|&b| {
            if b < 0x80 {
                b as char
            } else {
                high[(b - 0x80) as usize]
            }
        })
        .collect()
}

/// Where a member's bytes start: after its local header, whose name and
/// extra lengths may differ from the central directory's. The local header
/// must otherwise describe the same member as the directory: same name,
/// method, CRC and sizes (a reader that walks local headers would see
/// another file, or another length, than one that reads the directory);
/// and a stored member's two sizes must agree ([`check_stored_sizes`]).
#[cfg(any(test, feature = "internals"))]
pub fn data_start(file: &File, e: &ZipEntry, dir_offset_limit: u64) -> Result<u64> {
    data_start_via(&mut BlockCache::default(), file, e, dir_offset_limit)
}

/// [`data_start`] with reads through `cache`: members one after the other
/// cost a read per block, not two per member.
pub(crate) fn data_start_via(
    cache: &mut BlockCache,
    file: &File,
    e: &ZipEntry,
    dir_offset_limit: u64,
) -> Result<u64> {
    let mut h = [0u8; LOCAL_LEN as usize];
    let mut read_exact_at = |buf: &mut [u8], at: u64| {
        cache
            .read_exact_at(file, buf, at)
            .map_err(|e| Error::io(e).at_offset(at))
    };
    read_exact_at(&mut h, e.local_offset)?;
    if u32_at(&h, 0) != LOCAL_SIG {
        let bad = ZipError::LocalSignature(e.name.clone());
        return Err(zip_err(bad).at_offset(e.local_offset));
    }
    let (name_len, extra_len) = (u16_at(&h, 26) as u64, u16_at(&h, 28) as u64);
    let start = e.local_offset + LOCAL_LEN + name_len + extra_len;
    if start
        .checked_add(e.compressed)
        .is_none_or(|end| end > dir_offset_limit)
    {
        let past = ZipError::PastEnd(e.name.clone());
        return Err(zip_err(past).at_offset(e.local_offset));
    }
    // Both lengths are u16 and lie before the member's bytes, inside the file.
    let mut var = vec![0u8; (name_len + extra_len) as usize];
    read_exact_at(&mut var, e.local_offset + LOCAL_LEN)?;
    check_local_header(e, &h, &var).map_err(|err| err.at_offset(e.local_offset))?;
    check_stored_sizes(e).map_err(|err| err.at_offset(e.local_offset))?;
    Ok(start)
}

/// A stored member is its bytes: both of its sizes must agree. One whose
/// uncompressed size is the larger would be read past its end, from bytes
/// that belong to another member or to none. A deflated member's sizes
/// differ, as they should.
pub(crate) fn check_stored_sizes(e: &ZipEntry) -> Result<()> {
    if e.method != Method::Stored || e.compressed == e.uncompressed {
        return Ok(());
    }
    Err(zip_err(ZipError::StoredSizes {
        member: e.name.clone(),
        compressed: e.compressed,
        uncompressed: e.uncompressed,
    }))
}

/// The local header `h` (its fixed part) and `var` (name, extra) against
/// the directory's entry `e`.
fn check_local_header(e: &ZipEntry, h: &[u8], var: &[u8]) -> Result<()> {
    let flags = u16_at(h, 6);
    let name_len = u16_at(h, 26) as usize;
    let local_name = decode_name(&var[..name_len], flags & (1 << 11) != 0);
    if local_name != e.name {
        return Err(zip_err(ZipError::LocalName {
            member: e.name.clone(),
            local: local_name,
        }));
    }
    let method = u16_at(h, 8);
    let dir_method = match e.method {
        Method::Stored => 0,
        Method::Deflated => 8,
    };
    if method != dir_method {
        return Err(zip_err(ZipError::LocalMethod {
            member: e.name.clone(),
            directory: dir_method,
            local: method,
        }));
    }
    let mut local = ZipEntry {
        name: local_name,
        method: e.method,
        flags,
        crc32: u32_at(h, 14),
        compressed: u32_at(h, 18) as u64,
        uncompressed: u32_at(h, 22) as u64,
        local_offset: e.local_offset,
    };
    apply_zip64_extra(&mut local, &var[name_len..])?;
    // With a data descriptor (flag bit 3) the local fields may be left 0,
    // the real values following the data; any other value must agree.
    let deferred = flags & (1 << 3) != 0;
    let differs = |local: u64, dir: u64| local != dir && !(deferred && local == 0);
    if differs(local.compressed, e.compressed) || differs(local.uncompressed, e.uncompressed) {
        return Err(zip_err(ZipError::LocalSizes {
            member: e.name.clone(),
            directory: (e.compressed, e.uncompressed),
            local: (local.compressed, local.uncompressed),
        }));
    }
    if differs(local.crc32 as u64, e.crc32 as u64) {
        return Err(zip_err(ZipError::LocalCrc {
            member: e.name.clone(),
            directory: e.crc32,
            local: local.crc32,
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cp437_names() {
        assert_eq!(decode_name(b"abc", false), "abc");
        assert_eq!(decode_name(&[0x80, 0xE1], false), "Çß");
        assert_eq!(decode_name("ünï".as_bytes(), true), "ünï");
    }

    #[test]
    fn zip64_extra_fills_only_overflowed_fields() {
        let mut e = ZipEntry {
            name: "a".into(),
            method: Method::Stored,
            flags: 0,
            crc32: 0,
            compressed: 10,
            uncompressed: 0xFFFF_FFFF,
            local_offset: 0xFFFF_FFFF,
        };
        let mut extra = vec![1, 0, 16, 0];
        extra.extend_from_slice(&(5u64 << 32).to_le_bytes());
        extra.extend_from_slice(&7u64.to_le_bytes());
        apply_zip64_extra(&mut e, &extra).unwrap();
        assert_eq!(
            (e.uncompressed, e.compressed, e.local_offset),
            (5 << 32, 10, 7)
        );
    }
}
