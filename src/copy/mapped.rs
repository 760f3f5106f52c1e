//! Verbatim bytes copied with one memory copy: a read-only mapping of a
//! window of the source is handed to `write`, so the kernel copies from
//! the source's page cache straight into the output's.
//!
//! Why not `copy_file_range`, and why [`super::verbatim`] times this
//! against `cp`'s way: `docs/internals.md`, "The copy path".
//!
//! Safety of the mapping: our code never reads it. Only the kernel does,
//! inside `write`, so a source truncated under us makes `write` fail with
//! `EFAULT` (reported as a tensor too short), never a `SIGBUS`. The window
//! is unmapped before the next is made, which keeps the mapped pages (they
//! count in the resident set) to one window.
//!
//! Nothing that computes reads a mapping: casts, byte swaps and
//! dequantization use positional reads, which fail with an error on a
//! shrunk file ([`super::pipelined`] says why a cast does not map).

use std::fs::File;
use std::io::{self, Seek};
use std::os::fd::AsRawFd;

use crate::sink::elements::too_short;
use crate::Error;

/// Bytes mapped at a time: large enough that mapping costs vanish, small
/// enough to keep the resident set flat.
const WINDOW: u64 = 8 << 20;

/// Where windows start, but for the first of a copy: the size of a huge
/// page. A mapping whose file offset is a multiple of it gets an address
/// that is one too, and the page cache's large folios are then mapped
/// whole, a page-table entry each; at any other offset every 4 KiB page
/// takes an entry, which made mapping, unmapping and the copy itself cost
/// half as much again for a checkpoint whose data starts at an odd place
/// (benches/README.md, "Copy path").
const ALIGN: u64 = 2 << 20;

/// Bytes handed to one `write`: cp's size. The kernel gives the output
/// page-cache folios as large as the write, and on a VM whose large free
/// blocks are handed back to the host (free page reporting) the first
/// touch of a large folio can fault on the host: larger writes were now and
/// then several times slower (benches/README.md, "Copy path"). Pieces end
/// on multiples of it in the output, whatever the source's offset: the
/// output's folios are then whole pieces, and an npy's GiB (data from byte
/// 128 in, from byte 88 out) costs what `cp` does (benches/README.md,
/// "Copy path").
pub(super) const WRITE_PIECE: usize = 128 * 1024;

/// Copies `len` bytes of `src` from `offset` to `out` at its offset.
/// Returns `Ok(false)` without writing anything when the source cannot be
/// mapped (a special file), so the caller copies another way. Why a copy
/// stopped is the error and how many bytes were done.
pub(crate) fn copy_mapped(
    src: &File,
    offset: u64,
    len: u64,
    out: &File,
    progress: &mut impl FnMut(u64),
) -> Result<bool, (Error, u64)> {
    let size = src.metadata().map_err(|e| (Error::io(e), 0))?.len();
    let there = size.saturating_sub(offset).min(len);
    let mut done = 0u64;
    // Where the kernel writes: pieces are cut to end on multiples of
    // WRITE_PIECE there (any error only costs that alignment).
    let out_start = (&*out).stream_position().unwrap_or(0);
    let page = rustix::param::page_size() as u64;
    while done < there {
        let at = offset + done;
        let (base, map_len) = window(at, offset + there, page);
        let window = match Window::map(src, base, map_len) {
            Ok(w) => w,
            Err(_) if done == 0 => return Ok(false),
            Err(e) => return Err((Error::io(e), done)),
        };
        let mut from = (at - base) as usize;
        while from < map_len {
            let piece = WRITE_PIECE - ((out_start + done) % WRITE_PIECE as u64) as usize;
            // The first piece short, and the one before each new window.
            let n = window
                .write_to(out, from, (map_len - from).min(piece))
                .map_err(|e| (stopped(e, len, done), done))?;
            from += n;
            done += n as u64;
            progress(n as u64);
        }
    }
    match done < len {
        true => Err((too_short(len, done), done)),
        false => Ok(true),
    }
}

/// The window to map for bytes from `at` to `stop`: its page-aligned start
/// and its length. The first window of a copy ends on a multiple of
/// [`ALIGN`], so every later one starts on one (a window is at least
/// twice `ALIGN`, so it always ends past `at`).
fn window(at: u64, stop: u64, page: u64) -> (u64, usize) {
    let base = at - at % page;
    let end = ((base + WINDOW) / ALIGN * ALIGN).min(stop);
    (base, (end - base) as usize)
}

/// A write's error: `EFAULT` means the mapped source shrank under us.
fn stopped(e: io::Error, len: u64, done: u64) -> Error {
    match e.raw_os_error() == Some(libc::EFAULT) {
        true => too_short(len, done),
        false => Error::io(e),
    }
}

/// The window's pages are mapped up front. `write` copies from its source
/// with page faults disabled and, at a page not yet mapped, gives up part
/// way, zeroes what it had prepared of the output's (large) folio, faults
/// the page in and starts again: `perf` found much of the time in that
/// `memset` (benches/README.md, "Copy path").
#[cfg(any(target_os = "linux", target_os = "android"))]
const POPULATE: libc::c_int = libc::MAP_POPULATE;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const POPULATE: libc::c_int = 0;

/// A read-only shared mapping of part of a file, unmapped on drop. It is
/// only ever passed to the kernel, never read through a Rust reference.
struct Window {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Window {
    /// Maps `len` bytes from `offset`, which must be page aligned.
    fn map(file: &File, offset: u64, len: usize) -> io::Result<Window> {
        let at = libc::off_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: a fresh read-only mapping at an address the kernel picks;
        // it aliases nothing of ours.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | POPULATE,
                file.as_raw_fd(),
                at,
            )
        };
        match ptr == libc::MAP_FAILED {
            true => Err(io::Error::last_os_error()),
            false => Ok(Window { ptr, len }),
        }
    }

    /// Writes up to `n` mapped bytes from `from` to `out` at its offset;
    /// retries an interrupted call and never returns 0 for `n > 0`.
    fn write_to(&self, out: &File, from: usize, n: usize) -> io::Result<usize> {
        debug_assert!(from + n <= self.len);
        loop {
            // SAFETY: the range lies inside the mapping, which lives as long
            // as `self`; the kernel reads it, we never do.
            let written =
                unsafe { libc::write(out.as_raw_fd(), self.ptr.cast::<u8>().add(from).cast(), n) };
            match written {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                w if w > 0 => return Ok(w as usize),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly what mmap returned and took.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copy::job::testing::{contents, source};
    use crate::ErrorKind;
    use std::io::Write;

    #[test]
    fn windows_after_the_first_start_on_a_huge_page() {
        let (start, stop) = (413_696 + 100, 3 * WINDOW + 5);
        let mut at = start;
        let mut bases = Vec::new();
        while at < stop {
            let (base, len) = window(at, stop, 4096);
            assert!(base <= at && base + len as u64 > at && len as u64 <= WINDOW);
            bases.push(base);
            at = base + len as u64;
        }
        assert_eq!(at, stop);
        assert_eq!(bases[0], 413_696);
        assert!(bases[1..].iter().all(|b| b % ALIGN == 0), "{bases:?}");
    }

    #[test]
    fn copies_unaligned_ranges_across_windows() {
        let len = 2 * WINDOW as usize + 12_345;
        let (src, bytes) = source(len + 777);
        let mut out = tempfile::tempfile().unwrap();
        out.write_all(b"head").unwrap();
        let mut seen = 0;
        let copied = copy_mapped(&src, 777, len as u64, &out, &mut |n| seen += n).unwrap();
        assert!(copied);
        assert_eq!(seen, len as u64);
        let got = contents(&out);
        assert_eq!(&got[..4], b"head");
        assert_eq!(&got[4..], &bytes[777..]);
    }

    #[test]
    fn a_short_source_copies_what_is_there_and_says_how_much() {
        let (src, bytes) = source(5000);
        let out = tempfile::tempfile().unwrap();
        let (e, done) = copy_mapped(&src, 1000, 9000, &out, &mut |_| {}).unwrap_err();
        assert_eq!(done, 4000);
        assert!(
            matches!(
                e.kind(),
                ErrorKind::TensorTooShort {
                    expected: 9000,
                    actual: 4000
                }
            ),
            "{e}"
        );
        assert_eq!(contents(&out), &bytes[1000..]);
    }

    #[test]
    fn an_unmappable_source_is_left_to_the_caller() {
        // A file open for writing only cannot be mapped for reading.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("src");
        std::fs::write(&path, [7u8; 4096]).unwrap();
        let src = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let out = tempfile::tempfile().unwrap();
        assert!(!copy_mapped(&src, 0, 4096, &out, &mut |_| {}).unwrap());
        assert!(contents(&out).is_empty());
    }
}
