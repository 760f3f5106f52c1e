//! A member of a zip archive once its start is known: the span it covers
//! (no two may share bytes), and its bytes as a reader that inflates,
//! bounds and checks them.

use std::fs::File;
use std::io::{self, BufReader, Read};

use flate2::read::DeflateDecoder;

use super::{check_stored_sizes, zip_err, Method, ZipEntry};
use crate::error::zip::ZipError;
use crate::io_util::PositionalReader;
use crate::{Error, ErrorKind, Result};

/// Member `e`'s bytes in the archive, from its local header to the end of
/// its data (which starts at `start`, as [`super::data_start_via`] found it), and
/// its name: what [`check_overlaps`] compares. Even an empty member has
/// its local header.
pub(crate) fn span(e: &ZipEntry, start: u64) -> (u64, u64, &str) {
    // `super::data_start_via` checked that the end is inside the archive.
    (e.local_offset, start + e.compressed, e.name.as_str())
}

/// Two members sharing bytes is the trick of non-recursive zip bombs (one
/// compressed run, many names, a huge output): refused, in every reader of
/// an archive, over the [`span`]s of the members it reads.
pub(crate) fn check_overlaps(spans: Vec<(u64, u64, &str)>) -> Result<()> {
    check_overlaps_of(spans.len(), |k| spans[k], "")
}

/// [`check_overlaps`] of `n` members whose spans `span` gives by index,
/// each name followed by `suffix` (an npz keeps its tensors' names, the
/// members' without `.npy`): members are sorted as indices, with no list
/// of spans, and the same pair is named as [`check_overlaps`] would.
pub(crate) fn check_overlaps_of<'a>(
    n: usize,
    span: impl Fn(usize) -> (u64, u64, &'a str),
    suffix: &str,
) -> Result<()> {
    let named = |k: usize| {
        let (start, end, name) = span(k);
        (start, end, name.bytes().chain(suffix.bytes()))
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| {
        let ((sa, ea, na), (sb, eb, nb)) = (named(a), named(b));
        (sa, ea).cmp(&(sb, eb)).then_with(|| na.cmp(nb))
    });
    for w in order.windows(2) {
        let ((_, end, a), (next, _, b)) = (span(w[0]), span(w[1]));
        if next < end {
            let e = ZipError::Overlap(format!("{a}{suffix}"), format!("{b}{suffix}"));
            return Err(zip_err(e).at_offset(next));
        }
    }
    Ok(())
}

/// A member's uncompressed bytes: inflated if need be, never more than the
/// declared size (a zip bomb stops at once), and checked against the
/// declared size and CRC-32 when it ends.
pub(crate) struct MemberReader<F: std::borrow::Borrow<File>> {
    inner: Inner<F>,
    name: String,
    compressed: u64,
    declared: u64,
    produced: u64,
    crc: crc32fast::Hasher,
    want_crc: u32,
    verified: bool,
    /// Bytes to read and discard (counted in the CRC) before the first byte returned.
    pub(crate) skip: u64,
}

enum Inner<F: std::borrow::Borrow<File>> {
    Stored(PositionalReader<F>),
    Deflated(Box<DeflateDecoder<BufReader<PositionalReader<F>>>>),
}

impl<F: std::borrow::Borrow<File>> MemberReader<F> {
    pub(crate) fn new(file: F, e: &ZipEntry, start: u64, buf: usize) -> Result<Self> {
        let raw = PositionalReader::new(file, start, e.compressed);
        let inner = match e.method {
            Method::Stored => {
                check_stored_sizes(e)?;
                Inner::Stored(raw)
            }
            Method::Deflated => Inner::Deflated(Box::new(DeflateDecoder::new(
                BufReader::with_capacity(buf, raw),
            ))),
        };
        Ok(MemberReader {
            inner,
            name: e.name.clone(),
            compressed: e.compressed,
            declared: e.uncompressed,
            produced: 0,
            crc: crc32fast::Hasher::new(),
            want_crc: e.crc32,
            verified: false,
            skip: 0,
        })
    }

    fn read_inner(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.inner {
            Inner::Stored(r) => r.read(buf),
            // flate2 reports bad data as InvalidInput and data that stops
            // before the end marker as UnexpectedEof: the archive is bad,
            // not the environment.
            Inner::Deflated(r) => r.read(buf).map_err(|source| {
                let member = self.name.clone();
                invalid(match source.kind() {
                    io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => {
                        ZipError::CorruptDeflate { member, source }
                    }
                    io::ErrorKind::UnexpectedEof => ZipError::DeflateTruncated {
                        member,
                        compressed: self.compressed,
                        source,
                    },
                    _ => return source,
                })
            }),
        }
    }

    /// One read of at most `buf.len()` bytes, with the bounds and the final checks.
    fn checked_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.declared - self.produced;
        // One byte past the declared size is enough to catch a bomb.
        let cap = buf
            .len()
            .min(usize::try_from(left.saturating_add(1)).unwrap_or(usize::MAX));
        let n = self.read_inner(&mut buf[..cap])?;
        if n as u64 > left {
            return Err(invalid(ZipError::InflatesPast {
                member: self.name.clone(),
                declared: self.declared,
            }));
        }
        if n == 0 && !self.verified {
            if self.produced != self.declared {
                return Err(invalid(ZipError::EndsEarly {
                    member: self.name.clone(),
                    produced: self.produced,
                    declared: self.declared,
                }));
            }
            let crc = self.crc.clone().finalize();
            if crc != self.want_crc {
                return Err(crate::error::crc_mismatch(crc, self.want_crc).into_io());
            }
            self.verified = true;
        }
        if n == 0 {
            return Ok(0);
        }
        self.crc.update(&buf[..n]);
        self.produced += n as u64;
        Ok(n)
    }
}

/// A member's bad bytes as the I/O error a reader returns ([`Error::io`]
/// gives the zip error back).
fn invalid(e: ZipError) -> io::Error {
    Error::new(ErrorKind::Zip(e)).into_io()
}

impl<F: std::borrow::Borrow<File>> Read for MemberReader<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut scratch = [0u8; 8192];
        while self.skip > 0 {
            let want = scratch
                .len()
                .min(usize::try_from(self.skip).unwrap_or(usize::MAX));
            let n = self.checked_read(&mut scratch[..want])?;
            if n == 0 {
                return Ok(0);
            }
            self.skip -= n as u64;
        }
        if buf.is_empty() {
            return Ok(0);
        }
        self.checked_read(buf)
    }
}
