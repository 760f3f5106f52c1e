//! `.npz` archives: each `NAME.npy` member is a tensor called `NAME`.
//!
//! The central directory and each member's npy header are read to plan;
//! members are then streamed in plan order, deflated ones inflated on the
//! way, every member's size and CRC-32 checked against the archive.

use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::blocking::{BlockingReader, ReadAhead};
use super::format::{FileInput, FormatRow, Stream};
use super::pytorch::{self, row::ARCHIVE_SPOOLED};
use super::zip::{self, data_start_via, MemberReader, Method, ZipEntry};
use crate::block_cache::BlockCache;

/// Inflated bytes a deflated member runs ahead of the writer: chunk x depth.
const AHEAD_CHUNK: usize = 1 << 20;
const AHEAD_DEPTH: usize = 2;
use super::npy::fortran::FortranReader;
use super::npy::header::{read_header_as, NpyHeader};
use super::{
    BlockingRead, CrcCheck, FileSpan, Listing, OpenBlocking, Source, SourceOptions, TensorData,
    TensorReader,
};
use crate::error::zip::ZipError;
use crate::header::TensorMeta;
use crate::limits::Limit;
use crate::transform::Transform;
use crate::{Error, ErrorKind, Result};

/// One member: where its bytes are and how to read them. Its dtype and
/// shape are kept once, in the source's [`TensorMeta`] of the same index,
/// and so is its name: the member is the tensor's name and `.npy` (only
/// such members are listed), rebuilt when a reader or an error needs it.
/// 48 bytes: a million members' listing was most of the process's peak
/// when each kept its directory entry (a name of its own, its flags).
#[derive(Debug)]
struct Member {
    /// Its local header's offset (where its bytes begin, for the overlap check).
    local_offset: u64,
    /// Where its (compressed) bytes start, after the local header.
    start: u64,
    compressed: u64,
    uncompressed: u64,
    /// Offset of the array data inside the member's (inflated) bytes.
    data_offset: u64,
    crc32: u32,
    method: Method,
    /// The byte swap's width, 0 for none: a [`Transform`] in one byte.
    swap: u8,
    /// Fortran-order data whose bytes differ from C order's: read reordered.
    reorder: bool,
}

impl Member {
    /// The directory entry this member was planned from, named `name`
    /// (its tensor's): what [`MemberReader`] reads and its errors name.
    fn entry(&self, tensor: &str) -> ZipEntry {
        ZipEntry {
            name: format!("{tensor}.npy"),
            method: self.method,
            // Read by no reader of a member: only the directory's checks use them.
            flags: 0,
            crc32: self.crc32,
            compressed: self.compressed,
            uncompressed: self.uncompressed,
            local_offset: self.local_offset,
        }
    }

    fn transform(&self) -> Transform {
        match self.swap {
            0 => Transform::Identity,
            width => Transform::SwapBytes {
                width: width as usize,
            },
        }
    }
}

/// An `.npz` archive as a source.
#[derive(Debug)]
pub struct NpzSource {
    /// The location it was opened from, reported first by `opened`.
    origin: Option<crate::location::Opened>,
    listing: Listing,
    file: Arc<File>,
    /// The archive as it was when opened.
    opened: super::Stamp,
    members: Vec<Member>,
}

impl NpzSource {
    /// Reads the directory and every member's npy header from `file` (`len` bytes).
    #[cfg(any(test, feature = "internals"))]
    pub fn open(file: File, len: u64, input: &str, options: &SourceOptions) -> Result<Self> {
        let directory = zip::read_directory(&file, len).map_err(|e| e.with_input(input))?;
        Self::open_listed(file, len, directory, input, options)
    }

    /// As [`NpzSource::open`], from the directory already read (by a caller
    /// that looked at it to tell an npz from a PyTorch checkpoint): a
    /// directory of 20,000 members is not read twice.
    pub(crate) fn open_listed(
        file: File,
        len: u64,
        (mut entries, dir_start): (Vec<ZipEntry>, u64),
        input: &str,
        options: &SourceOptions,
    ) -> Result<Self> {
        let on_input = |e: Error| e.with_input(input);
        // Member names are unique: `read_directory` refused any twice.
        let opened = super::Stamp::of(&file, len);
        let file = Arc::new(file);
        // The arrays, up to the first member that is not one (an error,
        // reported once the arrays before it are known to be good); kept
        // in place, not copied.
        let mut not_an_array = None;
        entries.retain(|entry| {
            let array = entry.name.ends_with(".npy");
            if not_an_array.is_some() || entry.is_dir() || (!array && options.npy.skip_non_npy) {
                return false;
            }
            if !array {
                let e = ZipError::NotAnArray(entry.name.clone());
                not_an_array = Some(on_input(Error::new(ErrorKind::Zip(e))));
            }
            array
        });
        let large = entries.len() >= LARGE_DIRECTORY;
        let arrays =
            plan_members(&file, entries, dir_start, options.npy.void_as).map_err(on_input)?;
        // The directory's list and names are freed now, some by the
        // listing's helper thread: the caller may hand them back before
        // planning allocates as much again.
        if large {
            options.freed_memory.call();
        }
        if let Some(e) = not_an_array {
            return Err(e);
        }
        let src = NpzSource {
            origin: None,
            listing: Listing {
                input: input.to_string(),
                tensors: arrays.tensors,
                metadata: None,
            },
            opened,
            file,
            members: arrays.members,
        };
        // Two members sharing bytes: refused (see [`zip::check_overlaps`]).
        // Compared through indices: no list of a span and a name per member.
        let span = |k: usize| {
            let m = &src.members[k];
            // `data_start_via` checked that the end is inside the archive.
            (
                m.local_offset,
                m.start + m.compressed,
                src.listing.tensors[k].name.as_str(),
            )
        };
        zip::check_overlaps_of(src.members.len(), span, ".npy").map_err(on_input)?;
        Ok(src)
    }
}

fn plan_member(
    file: &File,
    cache: &mut BlockCache,
    entry: &ZipEntry,
    limit: u64,
    void_as: Option<crate::Dtype>,
) -> Result<(TensorMeta, Member)> {
    let start = data_start_via(cache, file, entry, limit)?;
    let probed = match entry.method {
        // The npy header of a stored member is its first bytes, as they
        // lie in the file (`data_start_via` checked that its two sizes agree).
        Method::Stored => read_header_as(&mut cache.range(file, start, entry.compressed), void_as),
        Method::Deflated => {
            let mut probe = MemberReader::new(file, entry, start, 4096)?;
            read_header_as(&mut probe, void_as)
        }
    };
    let (prelude, header) = probed.map_err(|e| e.at_offset(start))?;
    let data_offset = prelude.data_start();
    let NpyHeader {
        dtype,
        transform,
        fortran_order,
        shape,
        ..
    } = header;
    let name = entry.name.strip_suffix(".npy").unwrap_or(&entry.name);
    let tensor = TensorMeta::new(name, dtype, shape);
    let expected = tensor.byte_len()?;
    let actual = entry.uncompressed.saturating_sub(data_offset);
    if actual != expected {
        return Err(Error::new(ErrorKind::DataLength { expected, actual }));
    }
    let reorder = fortran_order && !super::npy::fortran::same_as_c_order(&tensor.shape);
    let swap = match transform {
        Transform::Identity => 0,
        // 2, 4 or 8.
        Transform::SwapBytes { width } => width as u8,
    };
    let member = Member {
        local_offset: entry.local_offset,
        start,
        compressed: entry.compressed,
        uncompressed: entry.uncompressed,
        data_offset,
        crc32: entry.crc32,
        method: entry.method,
        swap,
        reorder,
    };
    Ok((tensor, member))
}

/// The arrays of an archive, listed: tensor `k` is read through member `k`.
#[derive(Default)]
struct Arrays {
    tensors: Vec<TensorMeta>,
    members: Vec<Member>,
}

impl Arrays {
    fn with_capacity(n: usize) -> Self {
        Arrays {
            tensors: Vec::with_capacity(n),
            members: Vec::with_capacity(n),
        }
    }
}

/// Members at least this many are listed on two threads.
const LIST_IN_TWO: usize = 2048;

/// Members from which the freed directory is worth handing back at once
/// (the binary's own threshold between phases).
const LARGE_DIRECTORY: usize = 100_000;

/// Each member's local and npy headers read and checked, in directory
/// order; the first error, in that order, names its tensor. Many members
/// are listed on two threads, each half of them through a block cache of
/// its own: parsing 20,000 npy headers is most of the time of an npz of
/// small arrays. Each tensor and member is built once, in its place: the
/// first half's vectors have room for the second's.
fn plan_members(
    file: &File,
    mut entries: Vec<ZipEntry>,
    limit: u64,
    void_as: Option<crate::Dtype>,
) -> Result<Arrays> {
    let total = entries.len();
    // Each half is listed in place, through a slice, and every list is
    // freed by the thread that made it: memory freed across threads stayed
    // mapped in the allocator while the plan was built. `listing` has room
    // for `entries` (and, in the first half's, for the second's).
    let plan_all = |entries: &mut [ZipEntry], mut listing: Arrays| -> Result<Arrays> {
        // Local and npy headers, member after member, read a block at a time.
        let mut cache = BlockCache::default();
        for entry in entries {
            let (tensor, member) =
                plan_member(file, &mut cache, entry, limit, void_as).map_err(|e| {
                    let name = entry.name.strip_suffix(".npy").unwrap_or_default();
                    e.with_tensor(name.to_string())
                })?;
            // The tensor holds the name now: the entry's goes as it is read.
            drop(std::mem::take(&mut entry.name));
            listing.tensors.push(tensor);
            listing.members.push(member);
        }
        Ok(listing)
    };
    if total < LIST_IN_TWO {
        return plan_all(&mut entries, Arrays::with_capacity(total));
    }
    let (first, second) = entries.split_at_mut(total / 2);
    let rooms = (
        Arrays::with_capacity(total),
        Arrays::with_capacity(second.len()),
    );
    let second = std::sync::Mutex::new(Some((second, rooms.1)));
    let take = || {
        second
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default()
    };
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("npz-listing".into())
            .spawn_scoped(s, || {
                let (entries, room) = take();
                plan_all(entries, room)
            });
        let first = plan_all(first, rooms.0);
        // Joined here, not left to the scope: the thread is gone when we return.
        let rest = match helper {
            Ok(h) => h
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => {
                let (entries, room) = take();
                plan_all(entries, room)
            }
        };
        let (mut listing, rest) = (first?, rest?);
        listing.tensors.extend(rest.tensors);
        listing.members.extend(rest.members);
        Ok(listing)
    })
}

/// Every deflated member's declared inflation against the caller's
/// `decompression-ratio` (its reader refuses a byte past the declared
/// size, so the declaration is what it writes): refused before any is
/// read. Stored members write what they hold.
fn check_ratios(entries: &[ZipEntry], limits: &crate::Limits) -> Result<()> {
    let ratio = limits.get(Limit::DecompressionRatio);
    for e in entries {
        let inflated = e.uncompressed;
        if matches!(e.method, Method::Deflated)
            && inflated > crate::limits::RATIO_ALLOWANCE
            && inflated > e.compressed.saturating_mul(ratio)
        {
            let what = format!(
                "member {} inflates {} bytes to {inflated}",
                e.name, e.compressed
            );
            let refused = limits.refuse(Limit::DecompressionRatio, what);
            return Err(refused.at_offset(e.local_offset));
        }
    }
    Ok(())
}

/// The zip row of the format table: an .npz, or a PyTorch checkpoint,
/// told apart by their members (archives are spooled from a stream).
pub(crate) const ROW: FormatRow = FormatRow {
    magic: Some(|first| first.starts_with(b"PK\x03\x04") || first.starts_with(b"PK\x05\x06")),
    ..FormatRow::new(
        "zip",
        "an .npz (zip) archive",
        open_zip,
        Stream::Spool(ARCHIVE_SPOOLED),
    )
};

/// Whether the archive is what Keras 3's `model.save("m.keras")` writes:
/// `config.json`, `metadata.json` and the weights as `model.weights.h5`.
fn is_keras_archive(entries: &[ZipEntry]) -> bool {
    let has = |name: &str| entries.iter().any(|e| e.name == name);
    has("model.weights.h5") && has("config.json")
}

fn open_zip(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    // Read once: its names tell an npz from a PyTorch checkpoint.
    let directory = zip::read_directory(&o.file, o.len).map_err(|e| e.with_input(o.input))?;
    // Each member may be a tensor: the caller's count, before any is listed.
    let members = directory.0.len() as u64;
    let limits = &o.options.limits;
    if members > limits.get(Limit::TensorCount) {
        let what = format!("the archive holds {members} members");
        return Err(limits.refuse(Limit::TensorCount, what).with_input(o.input));
    }
    check_ratios(&directory.0, limits).map_err(|e| e.with_input(o.input))?;
    if is_keras_archive(&directory.0) {
        let e = Error::new(ErrorKind::Zip(ZipError::KerasArchive));
        return Err(e.with_input(o.input));
    }
    if !pytorch::is_torch_directory(&directory.0) {
        let mut npz = NpzSource::open_listed(o.file, o.len, directory, o.input, o.options)?;
        npz.origin = o.origin;
        return Ok(Box::new(npz));
    }
    // Freed first: the checkpoint reads its own, and frees it before its pickle.
    drop(directory);
    pytorch::row::open_checkpoint(o)
}

impl Source for NpzSource {
    fn opened(&self) -> Vec<crate::location::Opened> {
        self.origin.iter().cloned().collect()
    }

    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn identity(&self) -> Option<String> {
        Some(self.opened.identity())
    }

    fn check_unchanged(&self) -> Result<()> {
        super::unchanged(&self.file, &self.opened, &self.listing.input)
    }

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        let m = &self.members[k];
        if m.reorder || m.method != Method::Stored {
            return None;
        }
        let offset = m.start + m.data_offset;
        Some(FileSpan {
            file: self.file.clone(),
            offset,
            len: m.uncompressed - m.data_offset,
            transform: m.transform(),
            // The member's CRC covers its npy header too.
            crc: Some(CrcCheck {
                expected: m.crc32,
                from: m.start,
            }),
        })
    }

    fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
        let m = &self.members[k];
        if m.reorder || m.method != Method::Deflated {
            return None;
        }
        let (file, entry, start) = (
            self.file.clone(),
            m.entry(&self.listing.tensors[k].name),
            m.start,
        );
        let (skip, transform) = (m.data_offset, m.transform());
        Some(Box::new(move || {
            let mut r = MemberReader::new(file, &entry, start, 256 * 1024)?;
            r.skip = skip;
            Ok((Box::new(r) as BlockingRead, transform))
        }))
    }

    fn open_ahead(&self, k: usize) -> Option<Result<TensorData<'static>>> {
        let open = self.open_blocking(k)?;
        Some(open().map(|(r, transform)| TensorData {
            reader: Box::pin(ReadAhead::spawn(r, AHEAD_CHUNK, AHEAD_DEPTH)),
            transform,
        }))
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        if let Some(opened) = self.open_ahead(k) {
            return Box::pin(async move { opened });
        }
        async move {
            let m = &self.members[k];
            let (transform, reorder) = (m.transform(), m.reorder);
            let entry = m.entry(&self.listing.tensors[k].name);
            let shape = &self.listing.tensors[k].shape;
            let width = self.listing.tensors[k].dtype.byte_width().unwrap_or(1) as usize;
            let file = self.file.try_clone()?;
            let reader: TensorReader<'_> = if !reorder {
                let mut r = MemberReader::new(file, &entry, m.start, 256 * 1024)?;
                r.skip = m.data_offset;
                Box::pin(BlockingReader::new(r))
            } else if m.method == Method::Stored {
                // The reorder reads the member out of order, past the CRC
                // check: check it first, in one forward pass.
                let start = m.start;
                let check = file.try_clone()?;
                tokio::task::spawn_blocking(move || -> Result<()> {
                    let mut r = MemberReader::new(check, &entry, start, 0)?;
                    let mut buf = vec![0u8; 256 * 1024];
                    while r.read(&mut buf)? > 0 {}
                    Ok(())
                })
                .await
                .map_err(io::Error::other)??;
                let base = m.start + m.data_offset;
                Box::pin(BlockingReader::new(FortranReader::new(
                    file, base, shape, width,
                )))
            } else {
                // Reordering needs random access: inflate the member to a temp file first.
                let (start, data_offset, shape) = (m.start, m.data_offset, shape.clone());
                let spooled = tokio::task::spawn_blocking(move || -> Result<File> {
                    let mut r = MemberReader::new(file, &entry, start, 256 * 1024)?;
                    let mut tmp = tempfile::tempfile()?;
                    io::copy(&mut r, &mut tmp)?;
                    Ok(tmp)
                })
                .await
                .map_err(io::Error::other)??;
                Box::pin(BlockingReader::new(FortranReader::new(
                    spooled,
                    data_offset,
                    &shape,
                    width,
                )))
            };
            Ok(TensorData { reader, transform })
        }
        .boxed()
    }
}
