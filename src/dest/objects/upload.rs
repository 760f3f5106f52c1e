//! One object written as a multipart upload: the object store's own atomic
//! commit. Nothing is visible until [`PartUpload::complete`]; on any error
//! the upload is aborted exactly once, and an upload whose writer was
//! dropped (a signal ended the run) stays registered until
//! [`abort_pending`] aborts it.
//!
//! Memory: one part being filled plus at most `in flight` parts being
//! sent, each [`part_size`](crate::store::part_size) bytes:
//! `part_size x (in flight + 1)`, with the defaults
//! ([`PART_SIZE`](crate::store::PART_SIZE), [`IN_FLIGHT`](crate::store::IN_FLIGHT))
//! 72 MiB for any file up to 83 GB (8 MiB x 10,000 parts; a larger file has
//! larger parts). Both are set by `SAFETENSORS_STREAM_PART_SIZE` and
//! `SAFETENSORS_STREAM_PARTS_IN_FLIGHT` ([`UploadConfig::from_env`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{Attributes, MultipartId, PutPayload};
use tokio::io::AsyncWrite;
use tokio::task::JoinSet;

use crate::error::store::{one_line, StoreError};
use crate::store::{store_output_error, UploadConfig};
use crate::{ErrorKind, Result};

/// An upload still open: aborted by [`abort_pending`] unless completed or
/// aborted first.
#[derive(Clone)]
struct Pending {
    key: u64,
    store: Arc<dyn MultipartStore>,
    path: ObjectPath,
    id: MultipartId,
    url: String,
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The pending list (a panic while it was held leaves it usable).
fn pending() -> std::sync::MutexGuard<'static, Vec<Pending>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

fn take_pending(key: u64) -> Option<Pending> {
    let mut pending = pending();
    let at = pending.iter().position(|p| p.key == key)?;
    Some(pending.swap_remove(at))
}

impl Pending {
    async fn abort(self) -> Result<()> {
        let aborted = self.store.abort_multipart(&self.path, &self.id).await;
        aborted.map_err(|e| store_output_error(e, &self.url))
    }
}

/// Aborts each of `uploads` (taken off the pending list); the first error
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

/// Aborts every upload this process started and has neither completed nor
/// aborted: the binary calls it after a signal ended the run (the run's
/// futures were dropped mid-upload). Each upload is aborted once; errors
/// are returned, first one first, after trying them all.
pub async fn abort_pending() -> Result<()> {
    let all = std::mem::take(&mut *pending());
    abort_each(all).await
}

/// Aborts the uploads started with these keys that are still open (each
/// once); the first error is returned after trying them all.
pub(crate) async fn abort_uploads(keys: &[u64]) -> Result<()> {
    let open: Vec<Pending> = keys.iter().filter_map(|&key| take_pending(key)).collect();
    abort_each(open).await
}

/// An object being written: an [`AsyncWrite`] that sends each full part
/// while the next one fills.
pub(crate) struct PartUpload {
    /// Where it goes, as the pending list holds it.
    up: Pending,
    part_size: usize,
    in_flight: usize,
    filling: BytesMut,
    sending: JoinSet<(usize, object_store::Result<PartId>)>,
    sent: Vec<Option<PartId>>,
    written: u64,
    failed: Option<object_store::Error>,
}

impl PartUpload {
    /// Starts the multipart upload of an object planned to be `len` bytes,
    /// with these attributes (a plan id: [`crate::dest::record`]), parts
    /// and parts in flight as `config` says.
    pub(crate) async fn start(
        store: Arc<dyn MultipartStore>,
        path: ObjectPath,
        url: &str,
        len: u64,
        attributes: Attributes,
        config: UploadConfig,
    ) -> Result<PartUpload> {
        let id = store
            .create_multipart_opts(&path, attributes.into())
            .await
            .map_err(|e| store_output_error(e, url))?;
        let up = Pending {
            key: NEXT_KEY.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            store,
            path,
            id,
            url: url.to_string(),
        };
        pending().push(up.clone());
        let part_size = usize::try_from(config.part_size(len)).unwrap_or(usize::MAX);
        Ok(PartUpload {
            up,
            part_size,
            in_flight: config.in_flight,
            filling: BytesMut::new(),
            sending: JoinSet::new(),
            sent: Vec::new(),
            written: 0,
            failed: None,
        })
    }

    /// This upload's key, for [`abort_uploads`].
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
        self.sending.spawn(async move {
            let r = store
                .put_part(&path, &id, idx, PutPayload::from_bytes(data))
                .await;
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
    pub(crate) async fn complete(mut self, planned: u64) -> Result<()> {
        let failed = match self.finish_parts(planned).await {
            Ok(parts) => {
                // Off the pending list first: once complete is sent, a late
                // abort must not race it.
                let taken = take_pending(self.up.key);
                let up = &self.up;
                let Err(e) = up.store.complete_multipart(&up.path, &up.id, parts).await else {
                    return Ok(());
                };
                // Not completed: back on the list, to be aborted once.
                pending().extend(taken);
                store_output_error(e, &self.up.url)
            }
            Err(e) => e,
        };
        // The abort's own failure is secondary: the first error is told.
        let _ = self.abort().await;
        Err(failed)
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
        match take_pending(self.up.key) {
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    use crate::store::MIN_PART;

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
        let path = ObjectPath::from("x.safetensors");
        let (url, attributes) = ("memory:///x", Attributes::new());
        PartUpload::start(store, path, url, len as u64, attributes, SMALL).await
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
    async fn a_dropped_upload_is_aborted_by_abort_pending() {
        let s = store(usize::MAX);
        let up = start(s.clone(), 10).await.unwrap();
        let key = up.key();
        drop(up);
        // (abort_pending would also abort the other tests' uploads.)
        abort_uploads(&[key]).await.unwrap();
        abort_uploads(&[key]).await.unwrap();
        assert_eq!(s.aborts.load(Ordering::SeqCst), 1);
    }
}
