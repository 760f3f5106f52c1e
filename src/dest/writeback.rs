//! Writeback started while the output grows, for a run that fsyncs it at
//! the end: the disk writes while the copy goes on, instead of all of it
//! in the final `fsync`, which then has little left to wait for. `cp`
//! followed by `sync` leaves everything to the end.
//!
//! `sync_file_range(SYNC_FILE_RANGE_WRITE)` only starts the writing: it
//! waits for nothing and makes no promise; the `fsync` at the end still
//! makes the file durable and reports any error, so errors here are
//! ignored. Other Unixes have no such call: there this does nothing.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes written between two starts of writeback.
const STRIDE: u64 = 32 << 20;

/// Starts writeback of `file` each time another [`STRIDE`] bytes landed.
#[derive(Debug)]
pub(crate) struct Writeback {
    file: Arc<File>,
    since: AtomicU64,
}

impl Writeback {
    pub(crate) fn new(file: Arc<File>) -> Self {
        Writeback {
            file,
            since: AtomicU64::new(0),
        }
    }

    /// The copy's "bytes landed" callback for `file`: [`Writeback::landed`].
    pub(crate) fn on_landed(file: Arc<File>) -> Arc<dyn Fn(u64) + Send + Sync> {
        let writeback = Writeback::new(file);
        Arc::new(move |n| writeback.landed(n))
    }

    /// `n` more bytes are in the file (from any thread).
    pub(crate) fn landed(&self, n: u64) {
        let since = self.since.fetch_add(n, Ordering::Relaxed) + n;
        if since >= STRIDE && self.since.swap(0, Ordering::Relaxed) >= STRIDE {
            start_writeback(&self.file);
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn start_writeback(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on an open descriptor; offset 0 and length 0
    // mean the whole file. It touches no memory of ours.
    unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn start_writeback(_: &File) {}
