//! A shard of a set completed as soon as it is sealed, while the next one
//! fills, when that replaces nothing: its key held no object. The set's
//! commit point is still the index, written after every shard is
//! complete, and an existing object (a shard of an earlier set, which its
//! index may name) is still replaced only at the commit. What changes is
//! when a new object appears: a server's completion can take seconds (s3s-fs
//! concatenates and hashes the parts: 1.4 s for 477 MiB), and done at the
//! commit those seconds follow the copy, done here they overlap it.
//!
//! A run that fails, or ends on a signal, deletes the objects it completed
//! early ([`Undo::undo`], from the set's abort and from
//! [`PendingUploads::abort_all`](super::PendingUploads::abort_all)), so it
//! leaves what was there before, as when every completion waited for the
//! commit; only a killed run (SIGKILL) can leave them: whole shards without
//! an index, as a failure in the commit already could.

use std::sync::{Arc, Mutex};

use object_store::multipart::MultipartStore;
use object_store::{GetOptions, ObjectStoreExt};
use tokio::sync::Semaphore;

use super::upload::{Sealed, Undo};
use crate::store::Object;
use crate::Result;

/// One shard's early completion: whether it was sent, or is refused
/// because the run is being abandoned.
pub(crate) struct Early {
    object: Object,
    /// The client that completes (the object's `completer`, or its own).
    completer: Option<Arc<dyn MultipartStore>>,
    /// Completions at once, shared by the set's shards.
    at_once: Arc<Semaphore>,
    state: Mutex<State>,
    /// Held while the completion is on its way: [`Early::undo`] waits for
    /// it to end before deleting.
    completing: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// The completion was (or is being) sent: the object may exist.
    sent: bool,
    /// The run is abandoned: no completion may be sent any more.
    abandoned: bool,
}

/// What became of a sealed shard.
pub(crate) enum Outcome {
    /// Completed already: nothing left for the commit.
    Completed,
    /// Left for the commit (its key held an object, or the run ended).
    Sealed(Sealed),
}

impl Early {
    pub(crate) fn new(
        object: Object,
        completer: Option<Arc<dyn MultipartStore>>,
        at_once: Arc<Semaphore>,
    ) -> Arc<Early> {
        Arc::new(Early {
            object,
            completer,
            at_once,
            state: Mutex::new(State::default()),
            completing: tokio::sync::Mutex::new(()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Completes `sealed` now when its key holds no object and the run
    /// is not abandoned; otherwise hands it back for the commit.
    pub(crate) async fn complete_if_free(&self, sealed: Sealed) -> Result<Outcome> {
        let _turn = self.at_once.acquire().await;
        if !self.key_is_free().await {
            return Ok(Outcome::Sealed(sealed));
        }
        let _completing = self.completing.lock().await;
        if !self.claim() {
            return Ok(Outcome::Sealed(sealed));
        }
        let sealed = match &self.completer {
            Some(store) => sealed.completed_by(store.clone()),
            None => sealed,
        };
        sealed.complete().await?;
        Ok(Outcome::Completed)
    }

    /// No object at the key (any other answer, an error included, leaves
    /// the completion to the commit).
    async fn key_is_free(&self) -> bool {
        let head = GetOptions::default().with_head(true);
        let found = self.object.store.get_opts(&self.object.path, head).await;
        matches!(found, Err(object_store::Error::NotFound { .. }))
    }

    /// Marks the completion sent, unless the run was abandoned first.
    fn claim(&self) -> bool {
        let mut state = self.state();
        state.sent = !state.abandoned;
        state.sent
    }
}

impl Undo for Early {
    /// Refuses any completion from now on; true when one was sent already
    /// (then the caller [`Undo::undo`]es it).
    fn abandon(&self) -> bool {
        let mut state = self.state();
        state.abandoned = true;
        state.sent
    }

    /// Once the completion sent has ended, deletes the object it made
    /// (best effort: the run's own error is the one told). Its key held
    /// nothing before.
    fn undo(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ended = self.completing.lock().await;
            let _ = self.object.store.delete(&self.object.path).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dest::objects::upload::{PartUpload, PendingUploads};
    use crate::store::{ObjectUrl, UploadConfig, MIN_PART};
    use object_store::memory::InMemory;
    use object_store::path::Path as ObjectPath;
    use object_store::Attributes;
    use tokio::io::AsyncWriteExt;

    /// The object `key` of a bucket held in memory.
    fn object(store: &Arc<InMemory>, key: &str) -> Object {
        let url = format!("s3://bucket/{key}");
        Object {
            at: ObjectUrl::parse(&url).unwrap(),
            url,
            store: store.clone(),
            multipart: Some(store.clone()),
            path: ObjectPath::from(key),
            uploads: None,
        }
    }

    /// `bytes` uploaded to `object` and sealed: ready to complete.
    async fn sealed(object: &Object, bytes: &[u8]) -> Sealed {
        let config = UploadConfig {
            part_size: MIN_PART,
            in_flight: 2,
        };
        let (store, path) = (object.writable().unwrap(), object.path.clone());
        let registry = PendingUploads::default();
        let len = bytes.len() as u64;
        let started = PartUpload::start(
            store,
            path,
            &object.url,
            len,
            Attributes::new(),
            config,
            &registry,
        );
        let mut up = started.await.unwrap();
        up.write_all(bytes).await.unwrap();
        up.seal(len).await.unwrap()
    }

    async fn read(store: &InMemory, key: &str) -> Option<Vec<u8>> {
        let got = store.get(&ObjectPath::from(key)).await.ok()?;
        Some(got.bytes().await.unwrap().to_vec())
    }

    fn early(object: &Object) -> Arc<Early> {
        Early::new(object.clone(), None, Arc::new(Semaphore::new(1)))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_free_key_is_completed_at_once_an_existing_object_waits_for_the_commit() {
        let store = Arc::new(InMemory::new());
        let (new, old) = (object(&store, "new"), object(&store, "old"));
        store
            .put(&old.path, b"before".to_vec().into())
            .await
            .unwrap();

        let sealed_new = sealed(&new, b"shard 1").await;
        let done = early(&new).complete_if_free(sealed_new).await;
        assert!(matches!(done.unwrap(), Outcome::Completed));
        assert_eq!(read(&store, "new").await.unwrap(), b"shard 1");

        let sealed_old = sealed(&old, b"shard 2").await;
        let left = early(&old).complete_if_free(sealed_old).await;
        let Outcome::Sealed(left) = left.unwrap() else {
            panic!("an existing object was replaced before the commit");
        };
        assert_eq!(read(&store, "old").await.unwrap(), b"before");
        left.complete().await.unwrap();
        assert_eq!(read(&store, "old").await.unwrap(), b"shard 2");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abandoned_run_completes_nothing_more_and_undoes_what_it_completed() {
        let store = Arc::new(InMemory::new());
        let (first, second) = (object(&store, "first"), object(&store, "second"));

        let completed = early(&first);
        let done = completed.complete_if_free(sealed(&first, b"one").await);
        assert!(matches!(done.await.unwrap(), Outcome::Completed));
        // Abandoned after its completion was sent: the caller undoes it.
        assert!(completed.abandon());
        completed.undo().await;
        assert_eq!(read(&store, "first").await, None);

        // A conversion dropped on a signal: its registry undoes the shard.
        let registry = PendingUploads::default();
        let dropped = early(&first);
        registry.add_early(dropped.clone());
        let done = dropped.complete_if_free(sealed(&first, b"one").await);
        assert!(matches!(done.await.unwrap(), Outcome::Completed));
        registry.abort_all().await.unwrap();
        assert_eq!(read(&store, "first").await, None);

        // Abandoned before: the completion is never sent.
        let refused = early(&second);
        assert!(!refused.abandon());
        let left = refused.complete_if_free(sealed(&second, b"two").await);
        assert!(matches!(left.await.unwrap(), Outcome::Sealed(_)));
        assert_eq!(read(&store, "second").await, None);
    }
}
