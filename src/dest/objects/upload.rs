//! One object written as a multipart upload: the object store's own atomic
//! commit. Nothing is visible until [`PartUpload::complete`]; on any error
//! the upload is aborted exactly once, and an upload whose writer was
//! dropped (a signal ended the run) stays registered with the conversion's
//! [`PendingUploads`] until [`PendingUploads::abort_all`] aborts it.
//!
//! Memory: one part being filled plus at most `in flight` parts being
//! sent, each [`part_size`](crate::store::part_size) bytes, and each leased
//! from the process's [`Budget`] (shared with the read windows and header
//! fetches) before it starts filling and given back once acknowledged: at
//! most `part_size x (in flight + 1)`, and at most what the budget leases
//! ([`DEFAULT_BUDGET`](crate::store::DEFAULT_BUDGET) in all). With the
//! defaults ([`PART_SIZE`](crate::store::PART_SIZE),
//! [`IN_FLIGHT`](crate::store::IN_FLIGHT)) parts are 8 MiB for any file up
//! to 83 GB (8 MiB x 10,000 parts; a larger file has larger parts). Both
//! are set by `SAFETENSORS_STREAM_PART_SIZE` and
//! `SAFETENSORS_STREAM_PARTS_IN_FLIGHT` ([`UploadConfig::from_env`]).
//!
//! An upload written to its end is sealed ([`PartUpload::seal`]): its last
//! part sent and every part acknowledged, so that what waits for the
//! commit is a list of part ids, not bytes ([`Sealed`]).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{Attributes, MultipartId, PutPayload};
use tokio::io::AsyncWrite;
use tokio::task::JoinSet;

use crate::error::store::{one_line, StoreError};
use crate::store::{store_output_error, Budget, Lease, UploadConfig};
use crate::{ErrorKind, Result};

/// An upload still open: aborted by [`PendingUploads::abort_all`] unless
/// completed or aborted first.
#[derive(Clone)]
struct Pending {
    key: u64,
    store: Arc<dyn MultipartStore>,
    path: ObjectPath,
    id: MultipartId,
    url: String,
}

impl Pending {
    async fn abort(self) -> Result<()> {
        let aborted = self.store.abort_multipart(&self.path, &self.id).await;
        aborted.map_err(|e| store_output_error(e, &self.url))
    }
}

/// The multipart uploads started for a conversion (each of its clones
/// shares them) and neither completed nor aborted yet: what its caller
/// aborts when the conversion was dropped part-way, as the binary does
/// after a signal. Handed down by
/// [`ConvertOptions::uploads`](crate::convert::ConvertOptions::uploads),
/// never kept for the whole process: two conversions abort each their own.
#[derive(Clone, Default)]
pub struct PendingUploads(Arc<Registry>);

#[derive(Default)]
struct Registry {
    open: Mutex<Vec<Pending>>,
    next_key: AtomicU64,
    /// Shards that may be completed before the commit: undone on abort.
    early: Mutex<Vec<Arc<dyn Undo>>>,
}

/// A shard that may be completed before its set's commit (the set's
/// `early` completion): what [`PendingUploads::abort_all`] undoes.
pub(crate) trait Undo: Send + Sync {
    /// Refuses any completion from now on; true when one was sent already.
    fn abandon(&self) -> bool;

    /// Once the completion sent has ended, deletes the object it made.
    fn undo(&self) -> futures::future::BoxFuture<'_, ()>;
}

/// Refuses any completion still to come of each shard, and deletes the
/// objects of those already sent (each once its completion has ended): a
/// set that fails leaves none of its new objects.
pub(crate) async fn undo_all<T: Undo + ?Sized>(shards: Vec<Arc<T>>) {
    for shard in shards {
        if shard.abandon() {
            shard.undo().await;
        }
    }
}

impl std::fmt::Debug for PendingUploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PendingUploads({} open)", self.open().len())
    }
}

impl PendingUploads {
    /// The open list (a panic while it was held leaves it usable).
    fn open(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.0.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers an upload started: its key.
    fn add(&self, mut up: Pending) -> Pending {
        up.key = self.0.next_key.fetch_add(1, Ordering::Relaxed);
        self.open().push(up.clone());
        up
    }

    fn take(&self, key: u64) -> Option<Pending> {
        let mut open = self.open();
        let at = open.iter().position(|p| p.key == key)?;
        Some(open.swap_remove(at))
    }

    fn early(&self) -> MutexGuard<'_, Vec<Arc<dyn Undo>>> {
        self.0.early.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a shard that may be completed before the commit.
    pub(crate) fn add_early(&self, early: Arc<dyn Undo>) {
        self.early().push(early);
    }

    /// Forgets the shards of a set now committed: no abort undoes them.
    pub(crate) fn committed<T: Undo>(&self, set: &[Arc<T>]) {
        let of_set = |e: &Arc<dyn Undo>| {
            set.iter()
                .any(|s| std::ptr::addr_eq(Arc::as_ptr(e), Arc::as_ptr(s)))
        };
        self.early().retain(|e| !of_set(e));
    }

    /// Aborts every upload registered and neither completed nor aborted
    /// (each once), and deletes the objects of shards completed before a
    /// commit that did not come; errors are returned, first one first,
    /// after trying them all.
    pub async fn abort_all(&self) -> Result<()> {
        let early = std::mem::take(&mut *self.early());
        undo_all(early).await;
        let all = std::mem::take(&mut *self.open());
        abort_each(all).await
    }

    /// Aborts the uploads started with these keys that are still open (each
    /// once); the first error is returned after trying them all.
    pub(crate) async fn abort(&self, keys: &[u64]) -> Result<()> {
        let open: Vec<Pending> = keys.iter().filter_map(|&key| self.take(key)).collect();
        abort_each(open).await
    }
}

/// Aborts each of `uploads` (taken off the open list); the first error
/// is returned after trying them all.
async fn abort_each(uploads: Vec<Pending>) -> Result<()> {
    let mut first = None;
    for p in uploads {
        if let Err(e) = p.abort().await {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// An object being written: an [`AsyncWrite`] that sends each full part
/// while the next one fills.
pub(crate) struct PartUpload {
    /// Where it goes, as the open list holds it.
    up: Pending,
    /// The open list it is on until completed or aborted.
    registry: PendingUploads,
    part_size: usize,
    in_flight: usize,
    filling: BytesMut,
    sending: JoinSet<(usize, object_store::Result<PartId>)>,
    sent: Vec<Option<PartId>>,
    written: u64,
    failed: Option<object_store::Error>,
    /// Where parts lease their bytes.
    budget: Arc<Budget>,
    /// The lease of the part being filled.
    lease: Option<Lease>,
    /// The lease of the next part, while it waits.
    leasing: Option<futures::future::BoxFuture<'static, Lease>>,
}

/// An upload whose every part is acknowledged: completed at the commit.
pub(crate) struct Sealed {
    up: Pending,
    registry: PendingUploads,
    parts: Vec<PartId>,
    /// The client that completes it: the parts' own unless
    /// [`Sealed::completed_by`] says otherwise.
    completer: Arc<dyn MultipartStore>,
}

impl Sealed {
    /// Completed through `store` (the same store's client with a longer
    /// request timeout: the object's `completer`).
    pub(crate) fn completed_by(mut self, store: Arc<dyn MultipartStore>) -> Sealed {
        self.completer = store;
        self
    }

    /// Completes the upload: the object appears now, whole. On an error
    /// the upload is aborted.
    pub(crate) async fn complete(self) -> Result<()> {
        // Off the pending list first: once complete is sent, a late abort
        // must not race it.
        let taken = self.registry.take(self.up.key);
        let up = &self.up;
        let Err(e) = self
            .completer
            .complete_multipart(&up.path, &up.id, self.parts)
            .await
        else {
            return Ok(());
        };
        let failed = store_output_error(e, &self.up.url);
        // Not completed: aborted once (the abort's own failure is secondary).
        if let Some(p) = taken {
            let _ = p.abort().await;
        }
        Err(failed)
    }
}

impl PartUpload {
    /// Starts the multipart upload of an object planned to be `len` bytes,
    /// with these attributes (a plan id: [`crate::dest::record`]), parts
    /// and parts in flight as `config` says, registered with `registry`
    /// until completed or aborted.
    pub(crate) async fn start(
        store: Arc<dyn MultipartStore>,
        path: ObjectPath,
        url: &str,
        len: u64,
        attributes: Attributes,
        config: UploadConfig,
        registry: &PendingUploads,
    ) -> Result<PartUpload> {
        let id = store
            .create_multipart_opts(&path, attributes.into())
            .await
            .map_err(|e| store_output_error(e, url))?;
        let up = registry.add(Pending {
            key: 0,
            store,
            path,
            id,
            url: url.to_string(),
        });
        let part_size = usize::try_from(config.part_size(len)).unwrap_or(usize::MAX);
        Ok(PartUpload {
            up,
            registry: registry.clone(),
            part_size,
            in_flight: config.in_flight,
            filling: BytesMut::new(),
            sending: JoinSet::new(),
            sent: Vec::new(),
            written: 0,
            failed: None,
            budget: Budget::process(),
            lease: None,
            leasing: None,
        })
    }

    /// Its parts leased from `budget` rather than the process's.
    #[cfg(test)]
    fn with_budget(mut self, budget: Arc<Budget>) -> PartUpload {
        self.budget = budget;
        self
    }

    /// This upload's key, for [`PendingUploads::abort`].
    pub(crate) fn key(&self) -> u64 {
        self.up.key
    }

    /// Sends the part being filled (a last part may be short).
    fn send_filled(&mut self) {
        let data = std::mem::take(&mut self.filling).freeze();
        // Each part sent has its place, filled when it is acknowledged.
        let idx = self.sent.len();
        self.sent.push(None);
        let up = &self.up;
        let (store, path, id) = (up.store.clone(), up.path.clone(), up.id.clone());
        // Given back once the part is acknowledged.
        let lease = self.lease.take();
        self.sending.spawn(async move {
            let r = store
                .put_part(&path, &id, idx, PutPayload::from_bytes(data))
                .await;
            drop(lease);
            (idx, r)
        });
    }

    /// Records finished parts until fewer than `limit` are in flight.
    fn poll_in_flight(&mut self, cx: &mut Context<'_>, limit: usize) -> Poll<std::io::Result<()>> {
        while self.sending.len() >= limit.max(1) {
            match ready!(self.sending.poll_join_next(cx)) {
                Some(Ok((idx, Ok(part)))) => self.sent[idx] = Some(part),
                Some(Ok((_, Err(e)))) => return Poll::Ready(Err(self.fail(e))),
                Some(Err(join)) => {
                    let e = object_store::Error::Generic {
                        store: "upload",
                        source: Box::new(join),
                    };
                    return Poll::Ready(Err(self.fail(e)));
                }
                None => break,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn fail(&mut self, e: object_store::Error) -> std::io::Error {
        let io = std::io::Error::other(one_line(&e));
        self.failed.get_or_insert(e);
        io
    }

    /// Sends the last part, waits for every part, and completes the upload
    /// if exactly `planned` bytes were written: the object appears now,
    /// whole. Otherwise, or on any error, the upload is aborted.
    #[cfg(test)]
    pub(crate) async fn complete(self, planned: u64) -> Result<()> {
        self.seal(planned).await?.complete().await
    }

    /// Sends the last part and waits for every part, if exactly `planned`
    /// bytes were written: what is left is to complete it. Otherwise, or
    /// on any error, the upload is aborted.
    pub(crate) async fn seal(mut self, planned: u64) -> Result<Sealed> {
        match self.finish_parts(planned).await {
            Ok(parts) => Ok(Sealed {
                up: self.up.clone(),
                registry: self.registry.clone(),
                parts,
                completer: self.up.store.clone(),
            }),
            Err(failed) => {
                // The abort's own failure is secondary: the first error is told.
                let _ = self.abort().await;
                Err(failed)
            }
        }
    }

    /// Every part sent and acknowledged, and the length as planned.
    async fn finish_parts(&mut self, planned: u64) -> Result<Vec<PartId>> {
        // The last part, then every part in flight.
        if !self.filling.is_empty() || self.sent.is_empty() {
            self.send_filled();
        }
        std::future::poll_fn(|cx| self.poll_in_flight(cx, 1))
            .await
            .map_err(|_| self.failure())?;
        if self.written != planned {
            let kind = ErrorKind::ObjectStore(StoreError::UploadLength {
                written: self.written,
                planned,
            });
            return Err(crate::Error::new(kind).with_output(&self.up.url));
        }
        self.sent
            .iter_mut()
            .map(|p| p.take())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| self.failure())
    }

    fn failure(&mut self) -> crate::Error {
        match self.failed.take() {
            Some(e) => store_output_error(e, &self.up.url),
            None => crate::Error::new(ErrorKind::ObjectStore(StoreError::UploadFailed))
                .with_output(&self.up.url),
        }
    }

    /// Aborts the upload (once: a second call does nothing); parts in
    /// flight are cancelled first.
    pub(crate) async fn abort(mut self) -> Result<()> {
        self.sending.abort_all();
        while self.sending.join_next().await.is_some() {}
        match self.registry.take(self.up.key) {
            Some(p) => p.abort().await,
            None => Ok(()),
        }
    }
}

impl AsyncWrite for PartUpload {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if this.failed.is_some() {
            return Poll::Ready(Err(std::io::Error::other("an earlier part failed")));
        }
        if this.filling.len() >= this.part_size {
            ready!(this.poll_in_flight(cx, this.in_flight))?;
            this.send_filled();
        }
        if this.lease.is_none() {
            let (budget, bytes) = (Arc::clone(&this.budget), this.part_size as u64);
            let leasing = this
                .leasing
                .get_or_insert_with(|| Box::pin(async move { budget.lease_part(bytes).await }));
            this.lease = Some(ready!(leasing.as_mut().poll(cx)));
            this.leasing = None;
        }
        if this.filling.capacity() == 0 {
            this.filling.reserve(this.part_size);
        }
        let n = buf.len().min(this.part_size - this.filling.len());
        this.filling.extend_from_slice(&buf[..n]);
        this.written += n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // Parts go out when full; a short part would break the part sizes.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // Completing is explicit (`complete`), after the plan is checked.
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutResult};
    use std::sync::atomic::AtomicUsize;

    /// A multipart store over [`InMemory`] that fails part `fail_part` and
    /// counts aborts and completions.
    #[derive(Debug, Default)]
    struct FailingPart {
        inner: InMemory,
        fail_part: usize,
        aborts: AtomicUsize,
        completes: AtomicUsize,
        /// (part index, its length) of every part received.
        parts: std::sync::Mutex<Vec<(usize, usize)>>,
        /// Parts being received now, and the most at once.
        sending: AtomicUsize,
        most_sending: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl MultipartStore for FailingPart {
        async fn create_multipart(&self, path: &ObjectPath) -> object_store::Result<MultipartId> {
            self.inner.create_multipart(path).await
        }
        async fn put_part(
            &self,
            path: &ObjectPath,
            id: &MultipartId,
            part_idx: usize,
            data: PutPayload,
        ) -> object_store::Result<PartId> {
            if part_idx == self.fail_part {
                return Err(object_store::Error::Generic {
                    store: "test",
                    source: "part refused".into(),
                });
            }
            let len = data.content_length();
            self.parts.lock().unwrap().push((part_idx, len));
            let now = self.sending.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_sending.fetch_max(now, Ordering::SeqCst);
            // A server's time to take a part: parts in flight overlap.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            self.sending.fetch_sub(1, Ordering::SeqCst);
            self.inner.put_part(path, id, part_idx, data).await
        }
        async fn complete_multipart(
            &self,
            path: &ObjectPath,
            id: &MultipartId,
            parts: Vec<PartId>,
        ) -> object_store::Result<PutResult> {
            self.completes.fetch_add(1, Ordering::SeqCst);
            self.inner.complete_multipart(path, id, parts).await
        }
        async fn abort_multipart(
            &self,
            path: &ObjectPath,
            id: &MultipartId,
        ) -> object_store::Result<()> {
            self.aborts.fetch_add(1, Ordering::SeqCst);
            self.inner.abort_multipart(path, id).await
        }
    }

    use crate::store::{MIN_PART, READ_RESERVE};

    /// The smallest parts, two in flight: several parts from a few MiB.
    const SMALL: UploadConfig = UploadConfig {
        part_size: MIN_PART,
        in_flight: 2,
    };

    fn store(fail_part: usize) -> Arc<FailingPart> {
        let store = FailingPart {
            fail_part,
            ..Default::default()
        };
        Arc::new(store)
    }

    /// An upload of `x.safetensors`, planned at `len` bytes.
    async fn start(store: Arc<FailingPart>, len: usize) -> Result<PartUpload> {
        start_in(store, len, &PendingUploads::default()).await
    }

    async fn start_in(
        store: Arc<FailingPart>,
        len: usize,
        registry: &PendingUploads,
    ) -> Result<PartUpload> {
        let path = ObjectPath::from("x.safetensors");
        let (url, attributes) = ("memory:///x", Attributes::new());
        PartUpload::start(store, path, url, len as u64, attributes, SMALL, registry).await
    }

    async fn upload(store: Arc<FailingPart>, len: usize) -> Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut up = start(store, len).await?;
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        // Odd-sized writes: parts must still be exactly part_size.
        for chunk in data.chunks(1_000_003) {
            if let Err(e) = up.write_all(chunk).await {
                let _ = up.abort().await;
                return Err(crate::Error::io(e));
            }
        }
        up.complete(len as u64).await
    }

    /// The most parts sent at once for an upload of six parts, four
    /// allowed in flight, with parts leased from `budget`.
    async fn most_sent_at_once(budget: Arc<Budget>) -> usize {
        use tokio::io::AsyncWriteExt;
        let s = store(usize::MAX);
        let len = 6 * MIN_PART as usize + 1;
        let config = UploadConfig {
            part_size: MIN_PART,
            in_flight: 4,
        };
        let path = ObjectPath::from("x.safetensors");
        let registry = PendingUploads::default();
        let started = PartUpload::start(
            s.clone(),
            path,
            "memory:///x",
            len as u64,
            Attributes::new(),
            config,
            &registry,
        );
        let mut up = started.await.unwrap().with_budget(budget.clone());
        for chunk in vec![7u8; len].chunks(1 << 20) {
            up.write_all(chunk).await.unwrap();
            assert!(budget.in_use() <= budget.total());
        }
        up.complete(len as u64).await.unwrap();
        assert_eq!(budget.in_use(), 0, "every part's lease given back");
        s.most_sending.load(Ordering::SeqCst)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parts_filling_and_in_flight_stay_within_the_budget() {
        // Room for two parts beside the reads' reserve: one filling and
        // one sent, or two sent.
        let budget = Budget::new(READ_RESERVE + 2 * MIN_PART);
        assert!(most_sent_at_once(budget.clone()).await <= 2);
        assert!(budget.peak() <= READ_RESERVE + 2 * MIN_PART);
        assert!(budget.peak() >= 2 * MIN_PART);
        // The same upload with room: four parts in flight at once.
        assert!(most_sent_at_once(Budget::new(1 << 30)).await > 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parts_are_equal_but_the_last_and_the_object_appears_on_complete() {
        let s = store(usize::MAX);
        let len = 3 * MIN_PART as usize + 12345;
        upload(s.clone(), len).await.unwrap();
        let got = s.inner.get(&ObjectPath::from("x.safetensors")).await;
        let bytes = got.unwrap().bytes().await.unwrap();
        assert_eq!(bytes.len(), len);
        assert!(bytes.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
        assert_eq!(s.aborts.load(Ordering::SeqCst), 0);
        assert_eq!(s.completes.load(Ordering::SeqCst), 1);
        let mut parts = s.parts.lock().unwrap().clone();
        parts.sort();
        let p = MIN_PART as usize;
        assert_eq!(parts, [(0, p), (1, p), (2, p), (3, 12345)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_part_aborts_once_and_nothing_appears() {
        for fail in [0, 2, 3] {
            let s = store(fail);
            let e = upload(s.clone(), 3 * MIN_PART as usize + 1)
                .await
                .unwrap_err();
            assert!(
                matches!(e.kind(), ErrorKind::ObjectStore(_) | ErrorKind::Io(_)),
                "{e:?}"
            );
            assert_eq!(s.aborts.load(Ordering::SeqCst), 1, "part {fail}");
            assert_eq!(s.completes.load(Ordering::SeqCst), 0);
            let head = s.inner.head(&ObjectPath::from("x.safetensors")).await;
            assert!(head.is_err());
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_object_is_not_completed() {
        use tokio::io::AsyncWriteExt;
        let s = store(usize::MAX);
        let mut up = start(s.clone(), 10).await.unwrap();
        up.write_all(b"123456789").await.unwrap();
        let e = up.complete(10).await.unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::ObjectStore(_)), "{e:?}");
        assert_eq!(s.aborts.load(Ordering::SeqCst), 1);
        assert_eq!(s.completes.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_upload_is_aborted_by_its_registry_once() {
        let s = store(usize::MAX);
        let registry = PendingUploads::default();
        let up = start_in(s.clone(), 10, &registry).await.unwrap();
        let key = up.key();
        drop(up);
        registry.abort(&[key]).await.unwrap();
        registry.abort(&[key]).await.unwrap();
        assert_eq!(s.aborts.load(Ordering::SeqCst), 1);
        // Another conversion's registry holds only its own uploads.
        let (mine, other) = (PendingUploads::default(), PendingUploads::default());
        drop(start_in(s.clone(), 10, &mine).await.unwrap());
        drop(start_in(s.clone(), 10, &other).await.unwrap());
        mine.abort_all().await.unwrap();
        assert_eq!(s.aborts.load(Ordering::SeqCst), 2);
        mine.abort_all().await.unwrap();
        other.abort_all().await.unwrap();
        assert_eq!(s.aborts.load(Ordering::SeqCst), 3);
    }
}
