//! One memory budget for the bytes object storage holds in flight: the
//! read windows of object inputs (held and read ahead), the first ranges
//! of shard headers being fetched, and the parts of multipart uploads
//! (filling and being sent). Each takes a [`Lease`] of its bytes before
//! the GET is sent or the part starts filling, and gives it back when the
//! bytes are dropped (a window evicted, a header parsed, a part
//! acknowledged).
//!
//! The bound is deterministic: at any moment the bytes leased are at most
//! [`Budget::total`] — by default [`DEFAULT_BUDGET`] (48 MiB) per process,
//! `SAFETENSORS_STREAM_MEMORY` (a size, at least [`MIN_BUDGET`]) otherwise.
//! What is optional waits for nothing: a window read ahead is sent only
//! when its lease is free at once ([`Budget::try_lease`]). What a reader
//! needs waits for bytes to come back ([`Budget::lease`]); the windows
//! held are given back first (they are a cache: each holder of one is a
//! [`Reclaim`], asked to drop what it holds while a lease waits), and an
//! upload's parts in flight always come back (they need no more memory to
//! finish), so a conversion progresses with [`MIN_BUDGET`]: one part
//! filling and one window read. Parts take at most the budget less its
//! reads' share ([`read_share`]: 18 MiB of the default 48), and a part is
//! leased at most that much (a part larger than that, from a
//! `SAFETENSORS_STREAM_PART_SIZE` near the budget, is counted as that
//! much), so that reads always find room beside them.
//!
//! One per process ([`Budget::process`]): the target is a process's peak
//! memory, whatever it converts. Tests make their own ([`Budget::new`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bytes in flight a process holds for object storage, by default:
/// three 8 MiB upload parts and 18 MiB for reads ([`read_share`]). Sized
/// so that a process converting S3 -> S3 stays under 128 MiB at
/// DeepSeek-V3's tensor count (the scale benchmark, benches/scale/README.md,
/// session 13: 115-118 MiB, where 32 MiB peaked at 104 MiB and took
/// 1.05-1.14 x the time: on its server a GET's speed is bounded by its
/// small writes, so the copy goes as fast as the bytes in flight allow).
pub const DEFAULT_BUDGET: u64 = 48 << 20;

/// The parts' share when the budget is smaller than [`READ_RESERVE`] and a
/// part (a budget of at least [`MIN_BUDGET`] never is).
const PART_FLOOR: u64 = 1 << 20;

/// How often a waiting lease asks the caches again.
const RECLAIM_EVERY: Duration = Duration::from_millis(5);

/// The smallest budget: one upload part of the default size filling, and
/// read windows (`source::object`'s 4 MiB).
pub const MIN_BUDGET: u64 = 16 << 20;

/// The least of the budget that upload parts never take: room for the
/// reads that fill them (two 4 MiB windows).
pub const READ_RESERVE: u64 = 8 << 20;

/// The share of a budget of `total` bytes that upload parts never take:
/// three eighths of it, at least [`READ_RESERVE`]; 18 MiB of the default
/// 48 (four 4 MiB windows and a header's range), three 8 MiB parts beside
/// it (two parts beside 28 MiB of reads were no faster, session 13).
///
/// Why not less: S3 -> S3 on the scale benchmark, the copy's one reading
/// thread waited on GETs for three quarters of the copy, often with no
/// other GET in flight, while the parts' share sat mostly unleased
/// (benches/scale/README.md, session 10): reads ahead are what the
/// conversion waits on, and the parts keep up with two or three in flight.
///
/// ```
/// use safetensors_stream::store::{read_share, DEFAULT_BUDGET, MIN_BUDGET, READ_RESERVE};
/// assert_eq!(read_share(DEFAULT_BUDGET), 18 << 20);
/// assert_eq!(read_share(MIN_BUDGET), READ_RESERVE);
/// ```
pub fn read_share(total: u64) -> u64 {
    (total / 8 * 3).max(READ_RESERVE)
}

/// A holder of leases it can give back on demand (a cache).
pub trait Reclaim: Send + Sync {
    /// Drops what it holds that nobody waits for.
    fn reclaim(&self);
}

/// A budget of bytes shared by every reader and writer of objects.
pub struct Budget {
    permits: Arc<Semaphore>,
    /// Upload parts' share, the budget less [`read_share`], as permits.
    part_room: Arc<Semaphore>,
    /// The same share in bytes: the most one part is leased.
    part_share: u64,
    total: u32,
    /// The most bytes leased at once so far (for tests and reports).
    peak: AtomicUsize,
    /// Caches asked to give back their leases while a lease waits.
    caches: Mutex<Vec<Weak<dyn Reclaim>>>,
    /// Whether an upload part was ever leased: read-ahead then leaves the
    /// parts' share free ([`Budget::try_lease_spare`]).
    uploading: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Budget({} of {} bytes leased)",
            self.in_use(),
            self.total
        )
    }
}

/// Bytes leased from a [`Budget`], given back when dropped.
#[derive(Debug)]
pub struct Lease {
    _permit: Option<OwnedSemaphorePermit>,
    /// An upload part's, of its share.
    _part: Option<OwnedSemaphorePermit>,
    bytes: u64,
}

impl Lease {
    /// The bytes it holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Budget {
    /// A budget of `total` bytes (at most 4 GiB - 1).
    pub fn new(total: u64) -> Arc<Budget> {
        let total = u32::try_from(total).unwrap_or(u32::MAX);
        let parts = u64::from(total)
            .saturating_sub(read_share(total.into()))
            .max(PART_FLOOR);
        Arc::new(Budget {
            permits: Arc::new(Semaphore::new(total as usize)),
            part_room: Arc::new(Semaphore::new(parts as usize)),
            part_share: parts,
            total,
            peak: AtomicUsize::new(0),
            caches: Mutex::default(),
            uploading: Default::default(),
        })
    }

    /// The process's budget: `SAFETENSORS_STREAM_MEMORY` if set to a size
    /// of at least [`MIN_BUDGET`], else [`DEFAULT_BUDGET`].
    pub fn process() -> Arc<Budget> {
        static PROCESS: OnceLock<Arc<Budget>> = OnceLock::new();
        let budget = PROCESS.get_or_init(|| {
            let set = std::env::var("SAFETENSORS_STREAM_MEMORY").ok();
            let size = set.and_then(|v| crate::units::parse_size(&v).ok());
            let size = size.filter(|&s| s >= MIN_BUDGET);
            Budget::new(size.unwrap_or(DEFAULT_BUDGET))
        });
        Arc::clone(budget)
    }

    /// Its size in bytes.
    pub fn total(&self) -> u64 {
        u64::from(self.total)
    }

    /// Bytes leased now.
    pub fn in_use(&self) -> u64 {
        (self.total as usize - self.permits.available_permits()) as u64
    }

    /// The most bytes leased at once so far.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed) as u64
    }

    /// What a lease of `bytes` takes: all of it, or the whole budget for
    /// more (such a lease waits until nothing else is leased).
    fn clamp(&self, bytes: u64) -> u32 {
        u32::try_from(bytes).unwrap_or(u32::MAX).min(self.total)
    }

    fn leased(&self, permit: OwnedSemaphorePermit, bytes: u64) -> Lease {
        self.peak
            .fetch_max(self.in_use() as usize, Ordering::Relaxed);
        Lease {
            _permit: Some(permit),
            _part: None,
            bytes,
        }
    }

    /// Registers `cache`: while a lease waits, it is asked to give back
    /// what it holds.
    pub fn register(&self, cache: Weak<dyn Reclaim>) {
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        caches.retain(|c| c.strong_count() > 0);
        caches.push(cache);
    }

    fn reclaim(&self) {
        let caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        let live: Vec<_> = caches.iter().filter_map(Weak::upgrade).collect();
        drop(caches);
        live.iter().for_each(|c| c.reclaim());
    }

    /// `bytes` leased, once they are free: the caches registered are asked
    /// for theirs while it waits (again every few milliseconds, as caches
    /// fill again from reads already under way).
    pub async fn lease(&self, bytes: u64) -> Lease {
        let n = self.clamp(bytes);
        if n == 0 {
            return Lease {
                _permit: None,
                _part: None,
                bytes,
            };
        }
        loop {
            if let Some(lease) = self.try_lease(bytes) {
                return lease;
            }
            self.reclaim();
            let permits = Arc::clone(&self.permits);
            let wait = tokio::time::timeout(RECLAIM_EVERY, permits.acquire_many_owned(n));
            // The semaphore is never closed.
            if let Ok(permit) = wait.await {
                return self.leased(permit.expect("never closed"), bytes);
            }
        }
    }

    /// A lease for an upload part of `bytes`: the parts leased at once
    /// take at most the budget less [`read_share`] (a part larger than
    /// that is leased as that much).
    pub async fn lease_part(&self, bytes: u64) -> Lease {
        let n = bytes.min(self.part_share).min(u64::from(u32::MAX)) as u32;
        self.uploading.store(true, Ordering::Relaxed);
        let part_room = Arc::clone(&self.part_room);
        // The semaphore is never closed.
        let part = part_room.acquire_many_owned(n).await.expect("never closed");
        let mut lease = self.lease(u64::from(n)).await;
        lease._part = Some(part);
        lease.bytes = bytes;
        lease
    }

    /// `bytes` leased for what is optional (reading ahead) if they are free
    /// now and, once an upload is under way, the parts' share not leased
    /// yet stays free: reads ahead never make a part wait (a waiting part
    /// takes windows back, which were then read again).
    pub fn try_lease_spare(&self, bytes: u64) -> Option<Lease> {
        if self.uploading.load(Ordering::Relaxed) {
            let free = self.permits.available_permits() as u64;
            let parts_free = self.part_room.available_permits() as u64;
            if free < u64::from(self.clamp(bytes)) + parts_free {
                return None;
            }
        }
        self.try_lease(bytes)
    }

    /// `bytes` leased if they are free now.
    pub fn try_lease(&self, bytes: u64) -> Option<Lease> {
        let n = self.clamp(bytes);
        let permits = Arc::clone(&self.permits);
        let permit = permits.try_acquire_many_owned(n).ok()?;
        Some(self.leased(permit, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn leases_never_exceed_the_budget_and_come_back_when_dropped() {
        let budget = Budget::new(10);
        let a = budget.lease(6).await;
        assert!(budget.try_lease(5).is_none());
        let b = budget.try_lease(4).expect("4 of 10 free");
        assert_eq!(budget.in_use(), 10);
        drop(a);
        assert_eq!(budget.in_use(), 4);
        // More than the whole budget waits until nothing else is leased.
        let waiting = tokio::spawn({
            let budget = Arc::clone(&budget);
            async move { budget.lease(100).await.bytes() }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(b);
        assert_eq!(waiting.await.unwrap(), 100);
        assert_eq!(budget.peak(), 10);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn the_default_budget_leases_three_parts_and_keeps_the_rest_for_reads() {
        use crate::store::PART_SIZE;
        use futures::FutureExt;
        let budget = Budget::new(DEFAULT_BUDGET);
        let mut parts = Vec::new();
        for _ in 0..3 {
            parts.push(budget.lease_part(PART_SIZE).await);
        }
        let fourth = tokio::time::timeout(Duration::from_millis(50), budget.lease_part(PART_SIZE));
        assert!(fourth.await.is_err(), "a fourth part leased");
        // Reads find their share free beside the parts.
        let reads = budget.try_lease(read_share(DEFAULT_BUDGET));
        assert!(reads.is_some(), "{budget:?}");
        drop(parts.pop());
        assert!(budget.lease_part(PART_SIZE).now_or_never().is_some());
    }
}
