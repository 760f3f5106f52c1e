//! Reading until a buffer is full: the one loop every reader here needs,
//! once for blocking readers and once for async ones; and a bounded range
//! of a file read with positional reads, which every source shares; and
//! the non-blocking open of a file an input names; and whether another
//! thread writing the same output is inside a write ([`Writing`]).

use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Fills `buf` by calling `read(rest, filled_so_far)` until it is full or a
/// read returns 0 (the end); returns the bytes read. `Interrupted` is retried.
/// The second argument lets positional readers read at `start + filled`.
pub(crate) fn fill_with(
    buf: &mut [u8],
    mut read: impl FnMut(&mut [u8], usize) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match read(&mut buf[got..], got) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads `file` from `at` until `buf` is full or the file ends, by
/// positional reads; returns the bytes read.
pub(crate) fn fill_at(file: &std::fs::File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    fill_with(buf, |rest, done| file.read_at(rest, at + done as u64))
}

/// Reads `r` until `buf` is full or `r` ends; returns the bytes read.
pub(crate) fn fill<R: io::Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    fill_with(buf, |rest, _| r.read(rest))
}

/// The async twin of [`fill`].
pub(crate) async fn fill_async<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]).await {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// `len` bytes of `file` from `offset`, read with positional reads: many
/// readers can share one file handle.
pub(crate) struct PositionalReader<F> {
    file: F,
    pos: u64,
    end: u64,
}

impl<F: std::borrow::Borrow<std::fs::File>> PositionalReader<F> {
    /// Bytes `[offset, offset + len)` of `file` (a `File` or a `&File`).
    pub(crate) fn new(file: F, offset: u64, len: u64) -> Self {
        PositionalReader {
            file,
            pos: offset,
            end: offset.saturating_add(len),
        }
    }
}

impl<F: std::borrow::Borrow<std::fs::File>> io::Read for PositionalReader<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let want = (self.end - self.pos).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.borrow().read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "archive shrank while being read",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// Opens `path` for reading: the file when it is a regular file (links
/// followed), else what it is (`"a FIFO"`, ...) for the caller's refusal.
/// A FIFO would block the open (and every read) forever, a device never
/// ends: the open is non-blocking and the type taken from the open handle
/// (no race with a swap between a look and the open), then reads are made
/// blocking again.
pub(crate) fn open_if_regular(
    path: &std::path::Path,
) -> std::io::Result<std::result::Result<std::fs::File, &'static str>> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let ty = file.metadata()?.file_type();
    let what = if ty.is_file() {
        let flags = rustix::fs::fcntl_getfl(&file)?;
        rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)?;
        return Ok(Ok(file));
    } else if ty.is_fifo() {
        "a FIFO"
    } else if ty.is_char_device() {
        "a character device"
    } else if ty.is_block_device() {
        "a block device"
    } else if ty.is_socket() {
        "a socket"
    } else if ty.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    };
    Ok(Err(what))
}

/// The threads that write one output side by side (the copy engine's
/// blocking readers), counted while each is inside a write. ext4 takes a
/// file's inode lock for each `pwrite`: a thread whose chunk is ready
/// while another writes waits (spinning) for that write, and a reader on
/// one of these threads may spend the wait on work it needs later
/// ([`another_writes`]).
#[derive(Default)]
pub(crate) struct Writing(Arc<AtomicUsize>);

thread_local! {
    /// The [`Writing`] this thread is one of, while it watches it.
    static WATCHED: RefCell<Option<Arc<AtomicUsize>>> = const { RefCell::new(None) };
}

impl Writing {
    /// Runs `write` counted among this output's writes.
    pub(crate) fn during<T>(&self, write: impl FnOnce() -> T) -> T {
        self.0.fetch_add(1, Ordering::Relaxed);
        let done = write();
        self.0.fetch_sub(1, Ordering::Relaxed);
        done
    }

    /// Makes these the writes [`another_writes`] asks about on this
    /// thread, for as long as the answer lives.
    pub(crate) fn watch(&self) -> Watching {
        WATCHED.with(|w| *w.borrow_mut() = Some(self.0.clone()));
        Watching(())
    }
}

/// A thread's watch of a [`Writing`], until dropped.
pub(crate) struct Watching(());

impl Drop for Watching {
    fn drop(&mut self) {
        WATCHED.with(|w| *w.borrow_mut() = None);
    }
}

/// Whether, on a thread watching a [`Writing`] and not writing now (one
/// making its next chunk), another of its threads is inside a write: a
/// chunk ready now would wait for it, so a reader may first do work it
/// needs later, a little at a time, asking again between. Always `false`
/// on other threads.
pub(crate) fn another_writes() -> bool {
    WATCHED.with(|w| {
        w.borrow()
            .as_ref()
            .is_some_and(|n| n.load(Ordering::Relaxed) > 0)
    })
}

/// Runs `f` with [`another_writes`] true on this thread: a reader's work
/// done in the wait for another's write, whatever the timing.
#[cfg(test)]
pub(crate) fn while_another_writes<T>(f: impl FnOnce() -> T) -> T {
    let writing = Writing::default();
    writing.0.fetch_add(1, Ordering::Relaxed);
    let _watching = writing.watch();
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out at most 3 bytes a call, with an interruption between calls.
    struct Trickle<'a>(&'a [u8], bool);

    impl io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 = !self.1;
            if self.1 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(3).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn fills_across_short_and_interrupted_reads() {
        let data: Vec<u8> = (0..20).collect();
        let mut buf = [0u8; 16];
        assert_eq!(fill(&mut Trickle(&data, false), &mut buf).unwrap(), 16);
        assert_eq!(&buf[..], &data[..16]);
        let mut big = [0u8; 32];
        assert_eq!(fill(&mut Trickle(&data, false), &mut big).unwrap(), 20);
    }

    #[tokio::test]
    async fn async_fill_stops_at_the_end() {
        let data: Vec<u8> = (0..20).collect();
        let mut buf = [0u8; 32];
        assert_eq!(fill_async(&mut &data[..], &mut buf).await.unwrap(), 20);
    }
}
