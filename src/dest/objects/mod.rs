//! A plan written to object storage: each file one object. A set's shards
//! are all uploaded before any is completed, and the index is written
//! last: the index is the set's commit point. One file under
//! [`MIN_PART`] bytes is a single PUT, sent at the commit.
//!
//! A shard written to its end is sealed in the background (its last part
//! sent, every part acknowledged) while the next one fills, so that no
//! shard's bytes wait for the commit, and completed there too when its key
//! holds no object ([`early`]); the commit then completes the others, four
//! at a time.
//!
//! - [`upload`]: one object written as a multipart upload;
//! - [`early`]: a new shard completed as soon as it is sealed;
//! - [`open_uploads`]: the uploads left open in a bucket, listed (and
//!   aborted) by `convert uploads`.

mod early;
mod open_uploads;
pub(crate) mod upload;

pub use open_uploads::open_uploads;
pub use upload::PendingUploads;

use std::path::Path;

use super::record;
use super::writer::{DestOptions, OutWriter, Staged};
use super::WrittenFile;
use crate::observe::sha256_hex;
use crate::plan::layout::{check_shard_len, index_json, shard_paths, Part};
use crate::plan::{Plan, ShardPlan};
use crate::store::{store_output_error, Object, ObjectUrl, Side, UploadConfig, MIN_PART};
use crate::Result;
use early::{Early, Outcome};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use object_store::{
    Attribute, Attributes, GetOptions, ObjectStore, ObjectStoreExt, PutOptions, PutPayload,
};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use upload::{undo_all, PartUpload, Sealed, Undo};

/// Uploads completed at once at the commit (and early, by the shards
/// whose key was free): 4 rather than 2 took the small scale preset's 7
/// shards from 63.5 to 51.4 s S3 -> S3 on s3s-fs (medians of 2,
/// benches/scale/README.md); 7 did not do better than 4.
const COMPLETES_AT_ONCE: usize = 4;

/// A shard's upload written to its end, being sealed (and completed, when
/// early) in the background.
struct Finishing {
    task: JoinHandle<Result<Outcome>>,
    /// Its early completion, for a shard of a set.
    early: Option<Arc<Early>>,
}

/// The objects of a plan being written.
pub(crate) struct ObjectSet {
    /// The shards' objects (one: the base itself).
    objects: Vec<Object>,
    /// The index's object, when this run writes one.
    index: Option<Object>,
    /// The shards' names, for the index.
    names: Vec<std::path::PathBuf>,
    options: DestOptions,
    /// Part size and parts in flight.
    upload: UploadConfig,
    /// Every upload started, to abort on failure.
    keys: Vec<u64>,
    /// Uploads written to their end, being sealed.
    finishing: Vec<Finishing>,
    /// The client that completes uploads (on S3 one whose requests may
    /// take longer: [`Object::completer`]); `None`: the parts' own.
    completer: Option<Arc<dyn object_store::multipart::MultipartStore>>,
    /// Early completions at once, for a set with an index; `None` for one
    /// object, which is the output itself and appears only at the commit.
    early: Option<Arc<Semaphore>>,
    /// The bytes of the one object, when small.
    whole: Option<Vec<u8>>,
}

impl ObjectSet {
    /// Names the set's objects from `url` (the set's base name, as for
    /// files); with `--index-only`, checks every shard is there first.
    pub(crate) async fn open(
        url: &ObjectUrl,
        plan: &Plan,
        options: DestOptions,
    ) -> Result<ObjectSet> {
        let upload = UploadConfig::from_env().map_err(|e| e.with_output(url.as_str()))?;
        let base = Object::open(url, Side::Output).await?;
        // Names only (the URL's last segment): the objects are its siblings.
        let (paths, index_path) = shard_paths(Path::new(url.name()), plan.shards.len());
        let sibling = |p: &Path| base.sibling(&p.file_name().unwrap_or_default().to_string_lossy());
        let objects: Vec<Object> = match index_path {
            None => vec![base.clone()],
            Some(_) => paths.iter().map(|p| sibling(p)).collect(),
        };
        if options.part == Part::IndexOnly {
            check_shard_objects(plan, &objects, options.plan_id.as_deref()).await?;
        }
        let early = index_path
            .is_some()
            .then(|| Arc::new(Semaphore::new(COMPLETES_AT_ONCE)));
        let index = index_path
            .filter(|_| options.part.writes_index())
            .map(|p| sibling(&p));
        let completer = base.completer()?;
        Ok(ObjectSet {
            objects,
            index,
            names: paths,
            options,
            upload,
            keys: Vec::new(),
            finishing: Vec::new(),
            completer,
            early,
            whole: None,
        })
    }

    /// A multipart upload, or for one file under [`MIN_PART`] bytes a
    /// buffer sent whole at the commit.
    pub(crate) async fn stage(&mut self, index: usize, shard: &ShardPlan) -> Result<Staged> {
        let object = &self.objects[index];
        let len = shard.file_len();
        let writer = if self.objects.len() == 1 && len < MIN_PART {
            OutWriter::Buffer(Vec::with_capacity(usize::try_from(len).unwrap_or(0)))
        } else {
            let store = object.writable()?;
            // An earlier attempt at this shard (killed, its node lost)
            // left its upload open: a shard key belongs to one task, so it
            // is a dead one. Best effort: a store that refuses the listing
            // leaves it to the bucket's lifecycle rule.
            if let Some(uploads) = &object.uploads {
                let _ = uploads.abort_key(&object.path).await;
            }
            let (path, url) = (object.path.clone(), &object.url);
            let config = self.upload;
            let attributes = self.attributes();
            let registry = &self.options.uploads;
            let upload =
                PartUpload::start(store, path, url, len, attributes, config, registry).await?;
            self.keys.push(upload.key());
            OutWriter::Upload(Box::new(upload))
        };
        Ok(Staged {
            writer,
            file: None,
            name: object.url.clone(),
        })
    }

    /// What each shard records besides its bytes: the plan id, when the
    /// run has one (see [`crate::dest::record`]).
    fn attributes(&self) -> Attributes {
        let mut attributes = Attributes::new();
        if let Some(id) = &self.options.plan_id {
            let key = Attribute::Metadata(record::METADATA_KEY.into());
            attributes.insert(key, id.clone().into());
        }
        attributes
    }

    pub(crate) fn finish(&mut self, writer: OutWriter, written: &WrittenFile) {
        match writer {
            OutWriter::Buffer(bytes) => self.whole = Some(bytes),
            OutWriter::Upload(upload) => {
                let early = self.early_completion(&written.path);
                let then = early.clone();
                let bytes = written.bytes;
                let task = tokio::spawn(async move {
                    let sealed = (*upload).seal(bytes).await?;
                    match then {
                        Some(early) => early.complete_if_free(sealed).await,
                        None => Ok(Outcome::Sealed(sealed)),
                    }
                });
                self.finishing.push(Finishing { task, early });
            }
            _ => unreachable!("an object set stages buffers and uploads"),
        }
    }

    /// The early completion of the shard at `url`, in a set.
    fn early_completion(&self, url: &str) -> Option<Arc<Early>> {
        let at_once = self.early.clone()?;
        let object = self.objects.iter().find(|o| o.url == url)?.clone();
        let early = Early::new(object, self.completer.clone(), at_once);
        // A signal drops the set without its abort: the registry undoes it.
        self.options.uploads.add_early(early.clone());
        Some(early)
    }

    /// Sends the small object, completes every upload not completed early,
    /// then writes the index; on a failure, aborts every upload not
    /// completed and deletes the shards completed early.
    pub(crate) async fn commit(mut self, plan: &Plan) -> Result<Option<WrittenFile>> {
        if let Some(bytes) = self.whole.take() {
            let object = &self.objects[0];
            let options = PutOptions::from(self.attributes());
            let put = object
                .store
                .put_opts(&object.path, PutPayload::from(bytes), options);
            put.await.map_err(|e| store_output_error(e, &object.url))?;
        }
        let early = match self.complete_all().await {
            Ok(early) => early,
            Err(e) => {
                // Those completed are off the pending list: only the rest go.
                let _ = self.options.uploads.abort(&self.keys).await;
                return Err(e);
            }
        };
        let Some(index) = self.index.take() else {
            self.options.uploads.committed(&early);
            return Ok(None);
        };
        let bytes = index_json(plan, &self.names);
        let len = bytes.len() as u64;
        let sha256 = self.options.checksum.then(|| sha256_hex(&bytes));
        let put = index.store.put(&index.path, PutPayload::from(bytes));
        if let Err(e) = put.await {
            // No index, no set: the shards that appeared early go too.
            undo_all(early).await;
            return Err(store_output_error(e, &index.url));
        }
        self.options.uploads.committed(&early);
        Ok(Some(WrittenFile {
            path: index.url,
            bytes: len,
            tensors: 0,
            sha256,
        }))
    }

    /// Waits for every upload to be sealed (or completed early), then
    /// completes the others, [`COMPLETES_AT_ONCE`] at a time: the shards'
    /// early completions. The first error is told, and then the objects
    /// completed early are deleted.
    async fn complete_all(&mut self) -> Result<Vec<Arc<Early>>> {
        let mut sealed = Vec::with_capacity(self.finishing.len());
        let mut early = Vec::new();
        let mut first = None;
        for finishing in std::mem::take(&mut self.finishing) {
            early.extend(finishing.early);
            match finishing.task.await {
                Ok(Ok(Outcome::Sealed(s))) => sealed.push(s),
                Ok(Ok(Outcome::Completed)) => {}
                Ok(Err(e)) => _ = first.get_or_insert(e),
                Err(join) => _ = first.get_or_insert(crate::Error::io(join.into())),
            }
        }
        if first.is_none() {
            first = self.complete_sealed(sealed).await.err();
        }
        let Some(e) = first else {
            return Ok(early);
        };
        undo_all(early).await;
        Err(e)
    }

    /// Completes `sealed`, [`COMPLETES_AT_ONCE`] at a time.
    async fn complete_sealed(&self, sealed: Vec<Sealed>) -> Result<()> {
        // A few at a time: a server may take seconds over each (s3s-fs
        // concatenates the parts: 1.4 s for 477 MiB, two at once 2.4 s),
        // S3 minutes for a large object. On S3 they go through a client
        // whose requests may take 15 minutes (`Object::completer`): with
        // the usual 30 s, 8 sent at once to s3s-fs timed out, and the
        // retry of a completion done meanwhile was refused. Each is
        // waited for, so that the first error is told with none left
        // half-sent; after one, none more is sent (those left stay on the
        // pending list, which the caller aborts).
        let each = sealed.into_iter().map(|s| match &self.completer {
            Some(store) => s.completed_by(store.clone()).complete(),
            None => s.complete(),
        });
        at_most(COMPLETES_AT_ONCE, each).await
    }

    /// Aborts every upload started, and deletes the objects completed
    /// early: nothing of the set appears.
    pub(crate) async fn abort(self) {
        let mut sent = Vec::new();
        for finishing in &self.finishing {
            match &finishing.early {
                // Its completion may be on the server: waited for, undone.
                Some(early) if early.abandon() => sent.push(early.clone()),
                _ => finishing.task.abort(),
            }
        }
        for finishing in self.finishing {
            let _ = finishing.task.await;
        }
        for early in sent {
            early.undo().await;
        }
        // (The registry's shards are this set's: abandoned, undone above.)
        let _ = self.options.uploads.abort(&self.keys).await;
    }
}

/// Runs the futures of `each`, `n` at a time, each to its end; after the
/// first error none more is started (a future never polled has done
/// nothing). The first error is returned.
async fn at_most<F>(n: usize, each: impl IntoIterator<Item = F>) -> Result<()>
where
    F: std::future::Future<Output = Result<()>>,
{
    let mut left = each.into_iter();
    let mut running = FuturesUnordered::new();
    let mut first = None;
    loop {
        while first.is_none() && running.len() < n.max(1) {
            let Some(next) = left.next() else { break };
            running.push(next);
        }
        match running.next().await {
            Some(Err(e)) => _ = first.get_or_insert(e),
            Some(Ok(())) => {}
            None => return first.map_or(Ok(()), Err),
        }
    }
}

/// `--index-only` on objects: a HEAD for each planned shard, its length
/// checked; with an expected plan id, the ids the shards record too.
async fn check_shard_objects(
    plan: &Plan,
    objects: &[Object],
    expected: Option<&str>,
) -> Result<()> {
    let mut records = Vec::with_capacity(objects.len());
    for (shard, object) in plan.shards.iter().zip(objects) {
        let head = GetOptions::default().with_head(true);
        let found = match object.store.get_opts(&object.path, head).await {
            Ok(got) => {
                let key = Attribute::Metadata(record::METADATA_KEY.into());
                let id = got.attributes.get(&key).map(|v| v.to_string());
                records.push((object.url.clone(), id));
                Some(got.meta.size)
            }
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(store_output_error(e, &object.url)),
        };
        check_shard_len(&object.url, found, shard.file_len())?;
    }
    match expected {
        Some(expected) => record::check_records(expected, &records),
        None => Ok(()),
    }
}

impl crate::dest::writer::Destination for ObjectSet {
    fn stage<'a>(
        &'a mut self,
        index: usize,
        shard: &'a ShardPlan,
    ) -> BoxFuture<'a, Result<Staged>> {
        Box::pin(ObjectSet::stage(self, index, shard))
    }

    fn finish(&mut self, writer: OutWriter, written: &WrittenFile) {
        ObjectSet::finish(self, writer, written)
    }

    fn commit<'a>(self: Box<Self>, plan: &'a Plan) -> BoxFuture<'a, Result<Option<WrittenFile>>> {
        Box::pin(ObjectSet::commit(*self, plan))
    }

    fn abort(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(ObjectSet::abort(*self))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::at_most;
    use crate::{Error, ErrorKind};

    /// Runs 5 completions 2 at a time, `failing` (if any) failing at
    /// once, the others after a few turns: (result, started, most at once).
    async fn run(failing: Option<usize>) -> (crate::Result<()>, usize, usize) {
        let (started, running, most) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let each = (0..5).map(|k| {
            let (started, running, most) = (&started, &running, &most);
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                if failing != Some(k) {
                    for _ in 0..3 {
                        tokio::task::yield_now().await;
                    }
                }
                running.fetch_sub(1, Ordering::SeqCst);
                match failing == Some(k) {
                    true => Err(Error::new(ErrorKind::Usage(format!("upload {k}")))),
                    false => Ok(()),
                }
            }
        });
        let result = at_most(2, each).await;
        assert_eq!(running.load(Ordering::SeqCst), 0, "each ran to its end");
        (result, started.into_inner(), most.into_inner())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn completions_run_two_at_a_time_and_none_starts_after_an_error() {
        let (result, started, most) = run(None).await;
        assert!(result.is_ok());
        assert_eq!((started, most), (5, 2));
        // The second fails while the first still runs: that one ends, and
        // none of the three left starts.
        let (result, started, most) = run(Some(1)).await;
        let e = result.unwrap_err();
        assert!(e.to_string().contains("upload 1"), "{e}");
        assert_eq!((started, most), (2, 2));
    }
}
