//! Reads of an object's small ranges coalesced: one ranged GET brings a
//! window of [`WINDOW`] bytes, and every read that falls in a window held
//! is served from it. A DeepSeek-V3 checkpoint is 92k tensors in 163
//! objects, most of them small (an expert's weight and its block scales,
//! side by side): read one GET per tensor, and per dequantized piece, it
//! was 92k requests at 17-40 ms each, one at a time.
//!
//! A window is read ahead only while reads go on forward (a read that
//! starts where the last one ended): a jump reads just what was asked for,
//! as [`crate::block_cache`] does for files, so that tensors visited out of
//! the objects' order (F32 scales first, in name order) cost one small GET
//! each rather than a window each.
//!
//! Memory is bounded: at most [`WINDOWS`] windows are held, the least
//! recently used dropped first. Reads of more than [`WINDOW`] bytes go to
//! the server as they are (a large tensor streams from its own GET).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures::future::{BoxFuture, Shared};
use futures::FutureExt;

use super::Pinned;
use crate::source::span::ReadAt;
use crate::{Error, ErrorKind, Result};

/// Bytes fetched per window.
pub(super) const WINDOW: u64 = 4 << 20;

/// Windows held at once, over all the objects of an input.
pub(super) const WINDOWS: usize = 8;

/// Windows read ahead, in flight at once, while reads go on forward: the
/// next ones are on their way while this one is used. Memory, all told:
/// `(WINDOWS + AHEAD) x WINDOW` (44 MiB), plus slices still being written.
pub(super) const AHEAD: usize = 3;

/// A window on its way: its bytes, or `None` if its GET failed (the read
/// that needs it then asks again, and reports the error).
type Fetch = Shared<BoxFuture<'static, Option<Bytes>>>;

/// The windows of one input's objects.
#[derive(Default)]
pub(super) struct Windows {
    /// (object, first byte, bytes), the most recently used first.
    held: Mutex<VecDeque<(usize, u64, Bytes)>>,
    /// Windows read ahead and not yet here: (object, first byte, end, fetch).
    coming: Mutex<Vec<(usize, u64, u64, Fetch)>>,
    /// Where the last read ended (object, byte): a read starting there goes on forward.
    last_end: Mutex<Option<(usize, u64)>>,
}

/// A lock that a panic elsewhere leaves usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Windows {
    /// Bytes `start..end` of `object` (number `id` of its input), `end - start`
    /// at most [`WINDOW`]: from a window held or on its way, else from a new
    /// one. Reading forward, the next [`AHEAD`] windows are sent for too.
    pub(super) async fn read(
        self: &Arc<Self>,
        id: usize,
        object: &Arc<Pinned>,
        start: u64,
        end: u64,
    ) -> Result<Bytes> {
        let forward = self.went_to(id, start, end);
        let bytes = match self.find(id, start, end) {
            Some(bytes) => Some(bytes),
            None => self.arrival(id, start, end).await,
        };
        let bytes = match bytes {
            Some(bytes) => bytes,
            None => {
                // Up to where a window held or on its way begins: no byte twice.
                let ahead = if forward { WINDOW } else { 0 };
                let last = (start + ahead).min(object.size);
                let last = self.next_known(id, start).map_or(last, |s| last.min(s));
                let last = last.max(end);
                let window = object.range_bytes(start, last).await?;
                if (window.len() as u64) < end - start {
                    let changed = ErrorKind::InputChanged {
                        opened: object.size,
                        now: start + window.len() as u64,
                    };
                    return Err(Error::new(changed).with_input(&object.loc.url));
                }
                let bytes = window.slice(0..(end - start) as usize);
                self.hold(id, start, window);
                bytes
            }
        };
        if forward {
            self.send_ahead(id, object, end);
        }
        Ok(bytes)
    }

    /// Records a read of `start..end` of object `id` (a large tensor's own
    /// GET, too): whether it goes on from where the last one ended.
    pub(super) fn went_to(&self, id: usize, start: u64, end: u64) -> bool {
        lock(&self.last_end).replace((id, end)) == Some((id, start))
    }

    fn hold(&self, id: usize, start: u64, window: Bytes) {
        let mut held = lock(&self.held);
        held.push_front((id, start, window));
        held.truncate(WINDOWS);
    }

    fn find(&self, id: usize, start: u64, end: u64) -> Option<Bytes> {
        let mut held = lock(&self.held);
        let at = held
            .iter()
            .position(|(o, s, b)| *o == id && *s <= start && end <= *s + b.len() as u64)?;
        let w = held.remove(at).expect("found");
        let bytes = w.2.slice((start - w.1) as usize..(end - w.1) as usize);
        held.push_front(w);
        Some(bytes)
    }

    /// The bytes from a window on its way that covers `start..end`, once it
    /// is here; `None` if none does, or its GET failed.
    async fn arrival(&self, id: usize, start: u64, end: u64) -> Option<Bytes> {
        let fetch = lock(&self.coming)
            .iter()
            .find(|(o, s, e, _)| *o == id && *s <= start && end <= *e)
            .map(|(_, s, _, f)| (*s, f.clone()));
        let (first, fetch) = fetch?;
        let window = fetch.await?;
        let (from, to) = ((start - first) as usize, (end - first) as usize);
        window.get(from..to).map(|_| window.slice(from..to))
    }

    /// Sends for the windows after byte `from` of object `id`, up to
    /// [`AHEAD`] of them past what is held or on its way: each lands among
    /// the windows held when it arrives.
    fn send_ahead(self: &Arc<Self>, id: usize, object: &Arc<Pinned>, from: u64) {
        let mut next = from;
        for _ in 0..AHEAD {
            if next >= object.size {
                return;
            }
            // Past the window that holds `next` (here or coming), if any.
            if let Some(end) = self.covered_to(id, next) {
                next = end;
                continue;
            }
            let mut coming = lock(&self.coming);
            if coming.len() >= AHEAD {
                return;
            }
            let last = (next + WINDOW).min(object.size);
            let (obj, first) = (Arc::clone(object), next);
            let fetch = async move { obj.range_bytes(first, last).await.ok() }
                .boxed()
                .shared();
            coming.push((id, next, last, fetch.clone()));
            drop(coming);
            let me = Arc::clone(self);
            tokio::spawn(async move {
                if let Some(window) = fetch.await {
                    if window.len() as u64 == last - first {
                        me.hold(id, first, window);
                    }
                }
                lock(&me.coming).retain(|(o, s, _, _)| (*o, *s) != (id, first));
            });
            next = last;
        }
    }

    /// Windows held and on their way, for the tests' bound on memory.
    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, usize) {
        (lock(&self.held).len(), lock(&self.coming).len())
    }

    /// The first byte of the first window of object `id` held or on its
    /// way that begins after byte `after`.
    fn next_known(&self, id: usize, after: u64) -> Option<u64> {
        let held = lock(&self.held);
        let here = held
            .iter()
            .filter(|(o, s, _)| *o == id && *s > after)
            .map(|w| w.1)
            .min();
        drop(held);
        let coming = lock(&self.coming);
        let on_way = coming
            .iter()
            .filter(|(o, s, ..)| *o == id && *s > after)
            .map(|w| w.1)
            .min();
        here.into_iter().chain(on_way).min()
    }

    /// Where the window holding byte `at` of object `id` ends, if one is
    /// held or on its way.
    fn covered_to(&self, id: usize, at: u64) -> Option<u64> {
        let held = lock(&self.held);
        let here = held
            .iter()
            .find(|(o, s, b)| *o == id && *s <= at && at < *s + b.len() as u64);
        if let Some((_, s, b)) = here {
            return Some(s + b.len() as u64);
        }
        drop(held);
        let coming = lock(&self.coming);
        let on_way = coming
            .iter()
            .find(|(o, s, e, _)| *o == id && *s <= at && at < *e);
        on_way.map(|(_, _, e, _)| *e)
    }
}
/// An object's bytes for positional reads from a blocking thread: each read
/// is run on the runtime (`runtime`) the object was opened on.
pub(super) struct ObjectBytes {
    pub(super) id: usize,
    pub(super) object: Arc<Pinned>,
    pub(super) windows: Arc<Windows>,
    pub(super) runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for ObjectBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBytes")
            .field("url", &self.object.loc.url)
            .finish()
    }
}

impl ReadAt for ObjectBytes {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.object.size)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        if offset == end {
            return Ok(());
        }
        let got = self.runtime.block_on(async {
            if end - offset > WINDOW {
                self.object.range_bytes(offset, end).await
            } else {
                self.windows.read(self.id, &self.object, offset, end).await
            }
        });
        let got = got.map_err(Error::into_io)?;
        if got.len() != buf.len() {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        buf.copy_from_slice(&got);
        Ok(())
    }

    fn waits_on_runtime(&self) -> bool {
        true
    }
}
