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
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::Pinned;
use crate::source::span::ReadAt;
use crate::{Error, ErrorKind, Result};

/// Bytes fetched per window.
pub(super) const WINDOW: u64 = 4 << 20;

/// Windows held at once, over all the objects of an input.
pub(super) const WINDOWS: usize = 8;

/// The windows of one input's objects.
#[derive(Default)]
pub(super) struct Windows {
    /// (object, first byte, bytes), the most recently used first.
    held: Mutex<VecDeque<(usize, u64, Bytes)>>,
    /// Where the last read ended (object, byte): a read starting there goes on forward.
    last_end: Mutex<Option<(usize, u64)>>,
}

impl Windows {
    /// Bytes `start..end` of `object` (number `id` of its input), `end - start`
    /// at most [`WINDOW`]: from a window held, else from a new one.
    pub(super) async fn read(
        &self,
        id: usize,
        object: &Pinned,
        start: u64,
        end: u64,
    ) -> Result<Bytes> {
        let forward = {
            let mut last = self.last_end.lock().unwrap_or_else(|p| p.into_inner());
            last.replace((id, end)) == Some((id, start))
        };
        if let Some(bytes) = self.find(id, start, end) {
            return Ok(bytes);
        }
        let ahead = if forward { WINDOW } else { 0 };
        let last = (start + ahead).min(object.size).max(end);
        let window = object.range_bytes(start, last).await?;
        if (window.len() as u64) < end - start {
            let changed = ErrorKind::InputChanged {
                opened: object.size,
                now: start + window.len() as u64,
            };
            return Err(Error::new(changed).with_input(&object.loc.url));
        }
        let bytes = window.slice(0..(end - start) as usize);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.push_front((id, start, window));
        held.truncate(WINDOWS);
        Ok(bytes)
    }

    fn find(&self, id: usize, start: u64, end: u64) -> Option<Bytes> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let at = held
            .iter()
            .position(|(o, s, b)| *o == id && *s <= start && end <= *s + b.len() as u64)?;
        let w = held.remove(at).expect("found");
        let bytes = w.2.slice((start - w.1) as usize..(end - w.1) as usize);
        held.push_front(w);
        Some(bytes)
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
