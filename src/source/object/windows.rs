//! Reads of an object's small ranges coalesced: one ranged GET brings a
//! window of [`WINDOW`] bytes, and every read that falls in a window held
//! is served from it: a checkpoint of many small tensors (an expert's
//! weight and its block scales, side by side) is then not one GET each.
//!
//! A window is read ahead only while reads go on forward (a read that
//! starts where the last one ended): a jump reads just what was asked for,
//! as [`crate::block_cache`] does for files, so that tensors visited out of
//! the objects' order (F32 scales first, in name order) cost one small GET
//! each rather than a window each.
//!
//! When the copy says which tensors it reads next, in order
//! ([`Windows::expect`]), a read among them sends for the reads after it
//! at once: their ranges, object by object, merged where less than [`GAP`]
//! lies between them into spans of at most [`WINDOW`] bytes, up to
//! [`BATCH`] bytes a batch, each span one GET, all in flight together; the
//! next batch goes out as soon as the first read of this one comes, with
//! the room the budget has then, the span read soonest first (a batch on
//! its way while one is read: sent at half of one, the reading thread
//! waited on a GET with no other in flight 2-3 times as often,
//! benches/scale/README.md, session 11). Tensors are written in the
//! output's order (by dtype, then name), not the objects': `experts.1`, `experts.10`, `experts.100`
//! lie far apart, so reading forward alone cost one small GET per tensor
//! (2,671 GETs of ~590 KB for 163 objects dequantized; 92k, one at a time,
//! for a plain reshard, whose F32 scales come first).
//!
//! Memory is bounded: at most [`WINDOWS`] windows are held, the least
//! recently used dropped first, and every window held or on its way holds
//! a lease of its bytes from the process's [`Budget`] (shared with shard
//! headers and upload parts): a window is read ahead only when its lease
//! is free at once, a window a read waits for takes the least recently
//! used windows' leases first, and the least recently used windows held
//! are dropped, one every few milliseconds, while another lease waits
//! ([`Reclaim`]); read ahead leaves an upload's share of the budget free
//! ([`Budget::try_lease_spare`]). Reads of more than [`WINDOW`] bytes
//! go to the server as they are (a large tensor streams from its own GET;
//! a dequantized piece is leased as a window is).

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures::future::{BoxFuture, Shared};
use futures::FutureExt;

use super::Pinned;
use crate::source::span::ReadAt;
use crate::store::{Budget, Lease, Reclaim};
use crate::{Error, Result};

/// Bytes fetched per window, at most: two fit in the budget's
/// [`READ_RESERVE`](crate::store::READ_RESERVE). Smaller than `aws s3
/// cp`'s 8 MiB parts, for the peak memory of a whole S3 -> S3 run
/// (benches/scale/README.md has the trade measured).
pub(super) const WINDOW: u64 = 4 << 20;

/// Windows held at once, over all the objects of an input (their bytes are
/// bounded by the budget: many are small spans of expected reads).
pub(super) const WINDOWS: usize = 64;

/// Bytes sent for at once for the reads expected next: two windows.
pub(super) const BATCH: u64 = 2 * WINDOW;

/// Bytes between two expected reads of an object fetched rather than asked
/// for by another GET: a request costs more than a MiB of transfer, on a
/// local server as on S3 (tens of ms to the first byte).
pub(super) const GAP: u64 = 1 << 20;

/// Windows read ahead, in flight at once, while reads go on forward: the
/// next ones are on their way while this one is used. Memory, all told:
/// at most what the budget leases, plus slices still being written.
pub(super) const AHEAD: usize = 3;

/// A window on its way: its bytes and their lease, or `None` if its GET
/// failed (the read that needs it then asks again, and reports the error).
type Fetch = Shared<BoxFuture<'static, Option<(Bytes, Arc<Lease>)>>>;

/// A window held: (object, first byte, bytes, the lease of its bytes).
type Held = (usize, u64, Bytes, Arc<Lease>);

/// The reads the copy said come next ([`Windows::expect`]).
#[derive(Default)]
struct Schedule {
    /// The objects they read.
    objects: Vec<Arc<Pinned>>,
    /// (object, first byte, end), in the order they will be read.
    order: Vec<(usize, u64, u64)>,
    /// The positions in `order`, sorted by (object, first byte).
    by_place: Vec<usize>,
    /// Positions before this one have been sent for.
    sent_to: usize,
    /// A read at or past this position sends for the next batch: the
    /// first read of the batch last sent.
    refill_at: usize,
    /// The position of the last expected read.
    cursor: usize,
}

impl Schedule {
    /// The position of an expected read that covers `start..end` of object `id`.
    fn position(&self, id: usize, start: u64, end: u64) -> Option<usize> {
        let after = self.by_place.partition_point(|&p| {
            let (o, s, _) = self.order[p];
            (o, s) <= (id, start)
        });
        let p = *self.by_place.get(after.checked_sub(1)?)?;
        let (o, s, e) = self.order[p];
        (o == id && s <= start && end <= e).then_some(p)
    }

    /// Whether no expected read from position `p` on starts in
    /// `start..end` of object `o`: a window there is spent.
    fn spent(&self, p: usize, o: usize, start: u64, end: u64) -> bool {
        let place = |q: usize| (self.order[q].0, self.order[q].1);
        let from = self.by_place.partition_point(|&q| place(q) < (o, start));
        let within = self.by_place[from..]
            .iter()
            .take_while(|&&q| place(q) < (o, end));
        within.into_iter().all(|&q| q < p)
    }
}

/// Spans to fetch, by (object, first byte): their ends.
type Spans = BTreeMap<(usize, u64), u64>;

/// Adds `start..end` of object `o` to `spans`, merged with those less than
/// [`GAP`] away while the span stays within [`WINDOW`], if that adds at
/// most `room` bytes: the bytes it adds; `None` (and nothing added) if more.
fn add_span(spans: &mut Spans, o: usize, start: u64, end: u64, room: u64) -> Option<u64> {
    use std::ops::Bound::{Excluded, Unbounded};
    let before = spans.range(..=(o, start)).next_back();
    let before = before.filter(|((po, _), pe)| *po == o && **pe + GAP >= start);
    if before.is_some_and(|(_, pe)| *pe >= end) {
        return Some(0);
    }
    let (mut lo, mut hi) = (start, end);
    let mut joined: Vec<(u64, u64)> = Vec::new();
    if let Some((&(_, ps), &pe)) = before {
        (lo, hi) = (ps, hi.max(pe));
        joined.push((ps, pe));
    }
    for (&(no, ns), &ne) in spans.range((Excluded((o, start)), Unbounded)) {
        if no != o || ns > hi + GAP {
            break;
        }
        hi = hi.max(ne);
        joined.push((ns, ne));
    }
    if hi - lo > WINDOW {
        // Too long merged: a span of its own (tensors never overlap).
        (lo, hi) = (start, end);
        joined.clear();
    }
    let added = (hi - lo) - joined.iter().map(|(s, e)| e - s).sum::<u64>();
    if added > room {
        return None;
    }
    for (s, _) in &joined {
        spans.remove(&(o, *s));
    }
    spans.insert((o, lo), hi);
    Some(added)
}

/// `spans`, the batch of expected reads `reads` of `s`, in the order
/// their first read comes.
fn soonest_first(
    s: &Schedule,
    reads: std::ops::Range<usize>,
    spans: Spans,
) -> Vec<((usize, u64), u64)> {
    let mut firsts: BTreeMap<(usize, u64), usize> = BTreeMap::new();
    for q in reads {
        let (o, start, _) = s.order[q];
        let span = spans.range(..=(o, start)).next_back();
        if let Some((&key, _)) = span.filter(|((so, _), &e)| *so == o && start < e) {
            firsts.entry(key).or_insert(q);
        }
    }
    let mut ordered: Vec<_> = spans.into_iter().collect();
    ordered.sort_by_key(|(key, _)| firsts.get(key).copied().unwrap_or(usize::MAX));
    ordered
}

/// The windows of one input's objects.
pub(super) struct Windows {
    /// The bytes every window held or on its way is leased from.
    budget: Arc<Budget>,
    /// The windows held, the most recently used first.
    held: Mutex<VecDeque<Held>>,
    /// Windows read ahead and not yet here: (object, first byte, end, fetch).
    coming: Mutex<Vec<(usize, u64, u64, Fetch)>>,
    /// Where the last read ended (object, byte): a read starting there goes on forward.
    last_end: Mutex<Option<(usize, u64)>>,
    /// The reads expected next. Locks are taken in this order: schedule,
    /// held, coming.
    schedule: Mutex<Schedule>,
}

/// A lock that a panic elsewhere leaves usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Reclaim for Windows {
    /// Drops the least recently used window held (asked again every few
    /// milliseconds while a lease waits): the batch just read ahead stays.
    fn reclaim(&self) {
        lock(&self.held).pop_back();
    }
}

impl Windows {
    /// No window yet; each will be leased from `budget`, which may take
    /// back those held.
    pub(super) fn new(budget: Arc<Budget>) -> Arc<Windows> {
        let windows = Arc::new(Windows {
            budget: Arc::clone(&budget),
            held: Mutex::default(),
            coming: Mutex::default(),
            last_end: Mutex::default(),
            schedule: Mutex::default(),
        });
        let weak = Arc::downgrade(&windows);
        budget.register(weak);
        windows
    }

    /// A lease of `bytes` for a window a read waits for: the windows held
    /// give theirs back first, those no expected read needs any more
    /// before the least recently used.
    async fn lease(&self, bytes: u64) -> Lease {
        loop {
            if let Some(lease) = self.budget.try_lease(bytes) {
                return lease;
            }
            let dropped = {
                let s = lock(&self.schedule);
                let mut held = lock(&self.held);
                let spent = held.iter().rposition(|(o, first, window, _)| {
                    s.spent(s.cursor, *o, *first, first + window.len() as u64)
                });
                match spent {
                    Some(at) => held.remove(at),
                    None => held.pop_back(),
                }
            };
            if dropped.is_none() {
                return self.budget.lease(bytes).await;
            }
        }
    }

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
        let expected = self.send_expected(id, start, end);
        let forward = self.went_to(id, start, end) && !expected;
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
                let lease = self.lease(last - start).await;
                // Exactly `last - start` bytes (`range_bytes` refuses a body of any other length).
                let window = object.range_bytes(start, last).await?;
                let bytes = window.slice(0..(end - start) as usize);
                self.hold((id, start, window, Arc::new(lease)));
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

    fn hold(&self, window: Held) {
        let mut held = lock(&self.held);
        held.push_front(window);
        held.truncate(WINDOWS);
    }

    fn find(&self, id: usize, start: u64, end: u64) -> Option<Bytes> {
        let mut held = lock(&self.held);
        let at = held
            .iter()
            .position(|(o, s, b, _)| *o == id && *s <= start && end <= *s + b.len() as u64)?;
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
        let (window, _lease) = fetch.await?;
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
            // Read ahead only with bytes to spare.
            let Some(lease) = self.budget.try_lease_spare(last - next) else {
                return;
            };
            self.send(&mut coming, id, object, next, last, Some(lease));
            drop(coming);
            next = last;
        }
    }

    /// Sends for `first..last` of object `id`: with `lease`, or else once
    /// one is had (the held windows giving theirs back first). It lands
    /// among the windows held when it arrives.
    fn send(
        self: &Arc<Self>,
        coming: &mut Vec<(usize, u64, u64, Fetch)>,
        id: usize,
        object: &Arc<Pinned>,
        first: u64,
        last: u64,
        lease: Option<Lease>,
    ) {
        let (obj, me) = (Arc::clone(object), Arc::clone(self));
        let fetch = async move {
            let lease = match lease {
                Some(lease) => lease,
                None => me.lease(last - first).await,
            };
            let bytes = obj.range_bytes(first, last).await.ok()?;
            Some((bytes, Arc::new(lease)))
        };
        let fetch = fetch.boxed().shared();
        coming.push((id, first, last, fetch.clone()));
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let window = fetch.await;
            // Held and no longer coming at once (locks taken in this
            // order everywhere): never counted twice, nor read twice.
            let mut held = lock(&me.held);
            if let Some((window, lease)) = window.filter(|w| w.0.len() as u64 == last - first) {
                held.push_front((id, first, window, lease));
                held.truncate(WINDOWS);
            }
            lock(&me.coming).retain(|(o, s, _, _)| (*o, *s) != (id, first));
        });
    }

    /// Says which reads come next, in order: (object number, first byte,
    /// end) of `objects`, each at most [`WINDOW`] bytes. Replaces what was
    /// said before.
    pub(super) fn expect(&self, objects: &[Arc<Pinned>], order: Vec<(usize, u64, u64)>) {
        let mut by_place: Vec<usize> = (0..order.len()).collect();
        by_place.sort_unstable_by_key(|&p| (order[p].0, order[p].1));
        *lock(&self.schedule) = Schedule {
            objects: objects.to_vec(),
            order,
            by_place,
            sent_to: 0,
            refill_at: 0,
            cursor: 0,
        };
    }

    /// For a read of `start..end` of object `id` among those expected:
    /// sends for the batch from it when no window has its bytes (its own
    /// span waiting for a lease), and for the next batch once the first
    /// read of this one comes (only with bytes to spare). Whether the read
    /// was expected.
    fn send_expected(self: &Arc<Self>, id: usize, start: u64, end: u64) -> bool {
        let mut s = lock(&self.schedule);
        let Some(p) = s.position(id, start, end) else {
            return false;
        };
        s.cursor = p;
        let needed = self.covered_to(id, start).is_none_or(|e| e < end);
        let from = match needed {
            true => p,
            false if p >= s.refill_at && s.sent_to < s.order.len() => s.sent_to.max(p),
            false => return true,
        };
        let (spans, next) = self.batch(&s, from);
        s.sent_to = s.sent_to.max(next);
        s.refill_at = from;
        // Leased first (held, then coming: the order of the locks), the
        // span read soonest first: with little room, it is the one to get it.
        let mut leased = Vec::with_capacity(spans.len());
        for ((o, first), last) in soonest_first(&s, from..next, spans) {
            let mine = o == id && first <= start && end <= last;
            if mine && needed {
                leased.push((o, first, last, None));
            } else if let Some(lease) = self.lease_now(last - first, &s, p) {
                leased.push((o, first, last, Some(lease)));
            }
        }
        let mut coming = lock(&self.coming);
        for (o, first, last, lease) in leased {
            self.send(&mut coming, o, &s.objects[o], first, last, lease);
        }
        true
    }

    /// A lease of `bytes` for reading ahead, if one can be had without
    /// waiting: the least recently used windows held that no read expected
    /// from position `p` of `s` on needs give theirs back first (giving
    /// back those still needed cost each its bytes read again).
    fn lease_now(&self, bytes: u64, s: &Schedule, p: usize) -> Option<Lease> {
        loop {
            if let Some(lease) = self.budget.try_lease_spare(bytes) {
                return Some(lease);
            }
            let mut held = lock(&self.held);
            let spent = held.iter().rposition(|(o, first, window, _)| {
                s.spent(p, *o, *first, first + window.len() as u64)
            })?;
            held.remove(spent);
        }
    }

    /// The spans to fetch for the expected reads from position `from` not
    /// held nor on their way, at most [`BATCH`] bytes (at least one read's),
    /// and the position after the last read they cover.
    fn batch(&self, s: &Schedule, from: usize) -> (Spans, usize) {
        let (mut spans, mut bytes) = (Spans::new(), 0);
        let mut p = from;
        while let Some(&(o, start, end)) = s.order.get(p) {
            if self.covered_to(o, start).is_some_and(|e| e >= end) {
                p += 1;
                continue;
            }
            // At least one read's span, however long.
            let room = match spans.is_empty() {
                true => u64::MAX,
                false => BATCH.saturating_sub(bytes),
            };
            let Some(added) = add_span(&mut spans, o, start, end, room) else {
                break;
            };
            bytes += added;
            p += 1;
        }
        (spans, p)
    }

    /// Windows held and on their way, for the tests' bound on memory.
    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, usize) {
        (lock(&self.held).len(), lock(&self.coming).len())
    }

    /// Bytes of the windows held and on their way, for the tests' bound.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> u64 {
        let held = lock(&self.held);
        let coming = lock(&self.coming);
        let held: u64 = held.iter().map(|w| w.2.len() as u64).sum();
        held + coming.iter().map(|w| w.2 - w.1).sum::<u64>()
    }

    /// The first byte of the first window of object `id` held or on its
    /// way that begins after byte `after`.
    fn next_known(&self, id: usize, after: u64) -> Option<u64> {
        let held = lock(&self.held);
        let here = held
            .iter()
            .filter(|(o, s, ..)| *o == id && *s > after)
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
            .find(|(o, s, b, _)| *o == id && *s <= at && at < *s + b.len() as u64);
        if let Some((_, s, b, _)) = here {
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
                let _lease = self.windows.budget.lease(end - offset).await;
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
