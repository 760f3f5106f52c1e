//! A plan written to object storage: each file one object. A set's shards
//! are all uploaded before any is completed, and the index is written
//! last: the index is the set's commit point. One file under
//! [`MIN_PART`](super::upload::MIN_PART) bytes is a single PUT.

use std::path::Path;
use std::sync::Mutex;

use super::upload::{abort_uploads, PartUpload, MIN_PART};
use super::{store_error, Location};
use crate::convert::{check_unchanged, write_observed, ConvertOptions, ShardCtx, WrittenFile};
use crate::observe::{sha256_hex, ObservedWriter};
use crate::plan::layout::{check_shard_len, index_json, shard_paths, Part};
use crate::plan::Plan;
use crate::source::Source;
use crate::Result;
use object_store::{ObjectStoreExt, PutPayload};

/// Writes the files of `plan` that `options.part` selects to the objects
/// named from `url` (the set's base name, as for files).
pub(crate) async fn write_objects(
    url: &str,
    plan: &Plan,
    sources: &mut [Box<dyn Source + '_>],
    options: &ConvertOptions,
    overflows: &Mutex<Vec<String>>,
) -> Result<Vec<WrittenFile>> {
    let base = Location::parse(url)?;
    let (paths, index_path) = shard_paths(Path::new(url), plan.shards.len());
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let objects: Vec<Location> = match index_path {
        None => vec![base.clone()],
        Some(_) => paths.iter().map(|p| base.sibling(&name(p))).collect(),
    };
    if options.part == Part::IndexOnly {
        check_shard_objects(plan, &objects).await?;
    }
    let mut keys = Vec::new();
    let written = upload_shards(plan, &objects, sources, options, overflows, &mut keys).await;
    let (uploads, mut written) = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = abort_uploads(&keys).await;
            return Err(e);
        }
    };
    if let Err(e) = check_unchanged(sources) {
        let _ = abort_uploads(&keys).await;
        return Err(e);
    }
    let mut uploads = uploads.into_iter();
    while let Some((upload, planned)) = uploads.next() {
        if let Err(e) = upload.complete(planned).await {
            let rest: Vec<u64> = uploads.map(|(u, _)| u.key()).collect();
            let _ = abort_uploads(&rest).await;
            return Err(e);
        }
    }
    if let (Some(index_path), true) = (index_path, options.part.writes_index()) {
        let bytes = index_json(plan, &paths);
        let index = base.sibling(&name(&index_path));
        let len = bytes.len() as u64;
        let sha256 = options.checksum.then(|| sha256_hex(&bytes));
        index
            .store
            .put(&index.path, PutPayload::from(bytes))
            .await
            .map_err(|e| store_error(e, &index.url))?;
        written.push(WrittenFile {
            path: index.url,
            bytes: len,
            tensors: 0,
            sha256,
        });
    }
    Ok(written)
}

/// An upload ready to complete, and its planned length.
type Ready = (PartUpload, u64);

/// Uploads every selected shard's bytes, completing none (but a single PUT
/// of one small file, which is atomic by itself).
async fn upload_shards(
    plan: &Plan,
    objects: &[Location],
    sources: &mut [Box<dyn Source + '_>],
    options: &ConvertOptions,
    overflows: &Mutex<Vec<String>>,
    keys: &mut Vec<u64>,
) -> Result<(Vec<Ready>, Vec<WrittenFile>)> {
    let mut ready = Vec::new();
    let mut written = Vec::new();
    let count = plan.shards.len();
    for (index, (shard, object)) in plan.shards.iter().zip(objects).enumerate() {
        if !options.part.writes_shard(index) {
            continue;
        }
        let ctx = ShardCtx {
            index,
            count,
            options,
            overflows,
        };
        let len = shard.file_len();
        let sha256 = if count == 1 && len < MIN_PART {
            let buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
            let w = ObservedWriter::new(buf, options.checksum, options.progress.clone());
            let (bytes, sha256) = write_observed(w, shard, sources, &object.url, &ctx, None)
                .await?
                .into_parts();
            check_unchanged(sources)?;
            object
                .store
                .put(&object.path, PutPayload::from(bytes))
                .await
                .map_err(|e| store_error(e, &object.url))?;
            sha256
        } else {
            let upload =
                PartUpload::start(object.writable()?, object.path.clone(), &object.url, len)
                    .await?;
            keys.push(upload.key());
            let w = ObservedWriter::new(upload, options.checksum, options.progress.clone());
            let (upload, sha256) = write_observed(w, shard, sources, &object.url, &ctx, None)
                .await?
                .into_parts();
            ready.push((upload, len));
            sha256
        };
        written.push(WrittenFile {
            path: object.url.clone(),
            bytes: len,
            tensors: shard.refs.len(),
            sha256,
        });
    }
    Ok((ready, written))
}

/// `--index-only` on objects: a HEAD for each planned shard.
async fn check_shard_objects(plan: &Plan, objects: &[Location]) -> Result<()> {
    for (shard, object) in plan.shards.iter().zip(objects) {
        let found = match object.store.head(&object.path).await {
            Ok(meta) => Some(meta.size),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(store_error(e, &object.url)),
        };
        check_shard_len(&object.url, found, shard.file_len())?;
    }
    Ok(())
}
