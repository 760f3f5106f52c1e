//! Atomic file output: a temp file in the target's folder, written, synced,
//! then renamed into place; the folder is synced after. Until the rename,
//! the target path holds its old bytes (or nothing); a failed or dropped
//! output deletes its temp file, and the output's missing parent folders,
//! made before writing, go again ([`CreatedFolders`]): a failed run leaves
//! the tree as it found it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use tempfile::{NamedTempFile, TempPath};
use tokio::io::AsyncWriteExt;

use super::record;
use super::target::replaced;
use super::writer::{DestOptions, OutWriter, Staged};
use super::WrittenFile;
use crate::observe::sha256_hex;
use crate::plan::layout::{check_shard_len, index_json, names_folder, Part};
use crate::plan::{Plan, ShardPlan};
use crate::{Error, Result};

/// Temp files are named `.TARGET.XXXXXX.convert-tmp` (TARGET cut to fit
/// NAME_MAX): recognisable if a `kill -9` leaves one behind.
pub(crate) const TEMP_SUFFIX: &str = ".convert-tmp";

/// One output file being written under a temporary name.
#[derive(Debug)]
pub(crate) struct StagedFile {
    temp: NamedTempFile,
    target: PathBuf,
}

impl StagedFile {
    /// Creates the temp file beside the file `target` leads to (links
    /// followed: see [`super::target`]) and opens it for async writing; it
    /// gets that file's mode and owner ([`keep_owner_and_mode`]).
    /// `out/` is refused: it would stage its temp file in the current folder.
    pub(crate) fn create(target: &Path) -> Result<(StagedFile, tokio::fs::File)> {
        if names_folder(target) {
            // Say what is there: `-o odir/` for a folder not made yet is not "a directory".
            let (kind, msg) = if target.is_dir() {
                let msg = "is a directory; the output must be a file name";
                (std::io::ErrorKind::IsADirectory, msg)
            } else {
                let msg = "names a folder (it ends in '/') that does not exist; \
                           the output must be a file name";
                (std::io::ErrorKind::NotFound, msg)
            };
            let e = Error::io(std::io::Error::new(kind, msg));
            return Err(e.with_output(target.display()));
        }
        Self::create_resolved(target, replaced(target)?)
    }

    /// [`StagedFile::create`] for `target` resolved already (by
    /// [`super::check`]) to the file `dest` it replaces.
    pub(crate) fn create_resolved(
        target: &Path,
        dest: PathBuf,
    ) -> Result<(StagedFile, tokio::fs::File)> {
        let on_target = |e: std::io::Error| Error::io(e).with_output(target.display());
        let dir = parent_dir(&dest);
        let existing = std::fs::metadata(&dest).ok().filter(|m| m.is_file());
        let temp = tempfile::Builder::new()
            .prefix(&temp_prefix(&dest))
            .suffix(TEMP_SUFFIX)
            .permissions(new_file_permissions())
            .tempfile_in(dir)
            .map_err(|e| {
                // tempfile's message names its random path; name the folder instead.
                let said = e.to_string();
                let reason = said.split(" at path ").next().unwrap_or_default();
                let msg = format!("cannot create a file in {}: {reason}", dir.display());
                on_target(std::io::Error::new(e.kind(), msg))
            })?;
        keep_owner_and_mode(temp.as_file(), existing.as_ref()).map_err(on_target)?;
        let file = temp.as_file().try_clone().map_err(on_target)?;
        let staged = StagedFile { temp, target: dest };
        Ok((staged, tokio::fs::File::from_std(file)))
    }

    /// Another handle to the file being written (its offset is shared).
    pub(crate) fn handle(&self) -> std::io::Result<std::fs::File> {
        self.temp.as_file().try_clone()
    }

    /// The path the file will have once committed (symbolic links followed).
    pub(crate) fn target(&self) -> &Path {
        &self.target
    }
}

/// The temp name's prefix, `.NAME.`, NAME cut at a character boundary: a
/// legal output name of 250 bytes must not fail for its temp name's sake.
fn temp_prefix(target: &Path) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    let name = target.file_name().unwrap_or_default().as_bytes();
    let room = super::NAME_MAX - 2 - RANDOM_LEN - TEMP_SUFFIX.len();
    let mut cut = name.len().min(room);
    if let Ok(text) = std::str::from_utf8(name) {
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
    }
    let mut prefix = OsString::from(".");
    prefix.push(std::ffi::OsStr::from_bytes(&name[..cut]));
    prefix.push(".");
    prefix
}

/// The random part of a temp name (tempfile's default length).
const RANDOM_LEN: usize = 6;

/// An existing output keeps its owner and mode (set-ID bits included), as
/// `cp` onto it would; a new one gets what `cp` or `>` would give it. Set
/// on the open file, so the umask plays no part. The owner first: giving a
/// file away clears its set-ID bits. Only root may give a file to another
/// user (and a user only to a group they are in): otherwise the file is
/// the runner's, as with any writer that replaces a file.
fn keep_owner_and_mode(
    file: &std::fs::File,
    existing: Option<&std::fs::Metadata>,
) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(old) = existing else {
        return file.set_permissions(new_file_permissions());
    };
    if std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid())).is_err() {
        let _ = std::os::unix::fs::fchown(file, None, Some(old.gid()));
    }
    file.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777))
}

/// Temp files are created 0600; the output should get what `cp` or `>`
/// would give a new file: 0666 less the umask.
fn new_file_permissions() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    // The umask, read without changing it (Linux reports it in /proc since 4.7).
    let umask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
        })
        .unwrap_or(0o022);
    std::fs::Permissions::from_mode(0o666 & !umask)
}

fn parent_dir(target: &Path) -> &Path {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Flushes `file` and, with `sync`, makes its bytes durable. Call before committing.
pub(crate) async fn close(mut file: tokio::fs::File, sync: bool, target: &Path) -> Result<()> {
    let on_target = |e: std::io::Error| Error::io(e).with_output(target.display());
    file.flush().await.map_err(on_target)?;
    if sync {
        file.sync_all().await.map_err(on_target)?;
    }
    Ok(())
}

/// Renames every staged file into place, then syncs their folders.
///
/// The set appears together as far as the filesystem allows: nothing is
/// renamed until all are written. If a rename fails, the files already
/// renamed are taken back: the old files they replaced are put back (they
/// are kept aside under temp names until the whole set is in place), and
/// new names are removed, so neither a partial set nor a hole remains.
pub(crate) fn commit_all(staged: Vec<StagedFile>, sync: bool) -> Result<()> {
    let set = staged.len() > 1;
    // Each target renamed, with the old file it replaced, if any.
    let mut done: Vec<(PathBuf, Option<TempPath>)> = Vec::with_capacity(staged.len());
    // Two runs writing the same set must not interleave their renames (the
    // index of one, the shards of the other): the set's renames are made
    // under an exclusive lock on its folder, so the last run wins whole.
    let lock = match (set, staged.first()) {
        (true, Some(first)) => Some(lock_folder(parent_dir(&first.target))?),
        _ => None,
    };
    for s in staged {
        let target = s.target.clone();
        // One file needs no copy aside: its rename happens or not.
        let old = if set { keep_aside(&target) } else { None };
        if let Err(e) = s.temp.persist(&target) {
            drop(old); // the target was not replaced: the copy aside goes
            for (path, old) in done.into_iter().rev() {
                match old {
                    // If it cannot go back, its bytes stay under their temp name.
                    Some(old) => {
                        let _ = old.persist(&path).map_err(|e| e.path.keep());
                    }
                    None => {
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
            return Err(Error::io(e.error).with_output(target.display()));
        }
        done.push((target, old));
    }
    drop(lock);
    // The whole set is in place: the old files go (their TempPaths drop).
    let done: Vec<PathBuf> = done.into_iter().map(|(path, _)| path).collect();
    if sync {
        let mut dirs: Vec<&Path> = done.iter().map(|p| parent_dir(p)).collect();
        dirs.dedup();
        for dir in dirs {
            let synced = std::fs::File::open(dir).and_then(|d| d.sync_all());
            synced.map_err(|e| Error::io(e).with_output(dir.display()))?;
        }
    }
    Ok(())
}

/// A second name for the file at `target` (a hard link beside it, named
/// like a temp file), so that it can be put back; `None` if there is no
/// file there or the link cannot be made.
fn keep_aside(target: &Path) -> Option<TempPath> {
    if !std::fs::symlink_metadata(target).is_ok_and(|m| m.is_file()) {
        return None;
    }
    tempfile::Builder::new()
        .prefix(&temp_prefix(target))
        .suffix(TEMP_SUFFIX)
        .make_in(parent_dir(target), |link| std::fs::hard_link(target, link))
        .ok()
        .map(NamedTempFile::into_temp_path)
}

/// An exclusive advisory lock (flock) on `dir`, held until dropped. Every
/// run of this crate takes it before renaming a set into `dir`.
fn lock_folder(dir: &Path) -> Result<std::fs::File> {
    let on_dir = |e: std::io::Error| Error::io(e).with_output(dir.display());
    let folder = std::fs::File::open(dir).map_err(on_dir)?;
    rustix::fs::flock(&folder, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| on_dir(e.into()))?;
    Ok(folder)
}

/// A set of files (the shards, then the index) staged beside their
/// targets and renamed into place together: see [`commit_all`].
pub(crate) struct FileSet {
    /// Each shard as (name given, file replaced); then the index.
    shards: Vec<(PathBuf, PathBuf)>,
    index: Option<(PathBuf, PathBuf)>,
    options: DestOptions,
    /// Declared before the folders, so dropped first on failure: temp
    /// files go first, then the folders made for them.
    staged: Vec<StagedFile>,
    /// Synced together at the end, as one `sync` would.
    unsynced: Vec<(tokio::fs::File, PathBuf)>,
    folders: Vec<CreatedFolders>,
}

impl FileSet {
    /// The folders for every file this run writes are made now.
    pub(crate) fn open(
        shards: Vec<(PathBuf, PathBuf)>,
        index: Option<(PathBuf, PathBuf)>,
        plan: &Plan,
        options: DestOptions,
    ) -> Result<FileSet> {
        let index = index.filter(|_| options.part.writes_index());
        if let Part::IndexOnly = options.part {
            check_shard_files(plan, &shards, options.plan_id.as_deref())?;
        }
        let written = shards.iter().enumerate();
        let written = written.filter(|(i, _)| options.part.writes_shard(*i));
        let dests = written.map(|(_, s)| s).chain(&index).map(|(_, dest)| dest);
        let folders = dests
            .map(|d| CreatedFolders::create_for(d))
            .collect::<Result<_>>()?;
        Ok(FileSet {
            staged: Vec::with_capacity(shards.len() + 1),
            unsynced: Vec::with_capacity(shards.len() + 1),
            shards,
            index,
            options,
            folders,
        })
    }

    pub(crate) fn stage(&mut self, index: usize) -> Result<Staged> {
        let (path, dest) = &self.shards[index];
        let (stage, file) = StagedFile::create_resolved(path, dest.clone())?;
        let name = path.display().to_string();
        let handle = stage
            .handle()
            .map_err(|e| Error::io(e).with_output(&name))?;
        if let Some(id) = &self.options.plan_id {
            record::record_file(&handle, id, &name)?;
        }
        self.staged.push(stage);
        Ok(Staged {
            writer: OutWriter::File(file),
            file: Some(std::sync::Arc::new(handle)),
            name,
        })
    }

    pub(crate) fn finish(&mut self, writer: OutWriter, written: &WrittenFile) {
        let OutWriter::File(file) = writer else {
            unreachable!("a file set stages files");
        };
        // Flushed by the copy; synced with the rest at the commit.
        self.unsynced.push((file, PathBuf::from(&written.path)));
    }

    pub(crate) async fn commit(mut self, plan: &Plan) -> Result<Option<WrittenFile>> {
        let mut written = None;
        if let Some((index_path, dest)) = self.index.take() {
            let paths: Vec<PathBuf> = self.shards.iter().map(|(p, _)| p.clone()).collect();
            let bytes = index_json(plan, &paths);
            let (stage, mut file) = StagedFile::create_resolved(&index_path, dest)?;
            let on_index = |e| Error::io(e).with_output(index_path.display());
            file.write_all(&bytes).await.map_err(on_index)?;
            file.flush().await.map_err(on_index)?;
            self.unsynced.push((file, index_path.clone()));
            self.staged.push(stage);
            let sha256 = self.options.checksum.then(|| sha256_hex(&bytes));
            written = Some(WrittenFile {
                path: index_path.display().to_string(),
                bytes: bytes.len() as u64,
                tensors: 0,
                sha256,
            });
        }
        if self.options.sync {
            // Every file's bytes made durable at once: the disk then writes
            // them together, as one `sync` would, not one file after another.
            use futures::{StreamExt, TryStreamExt};
            futures::stream::iter(std::mem::take(&mut self.unsynced))
                .map(|(f, path)| async move {
                    let synced = f.sync_all().await;
                    synced.map_err(|e| Error::io(e).with_output(path.display()))
                })
                .buffer_unordered(16)
                .try_collect::<()>()
                .await?;
        }
        commit_all(std::mem::take(&mut self.staged), self.options.sync)?;
        std::mem::take(&mut self.folders)
            .into_iter()
            .for_each(CreatedFolders::keep);
        Ok(written)
    }
}

/// `--index-only` on files: every shard exists as a regular file of its
/// planned length (a stat each), or the first that does not is named;
/// then, with an `expected` plan id, the ids they record are checked.
fn check_shard_files(
    plan: &Plan,
    shards: &[(PathBuf, PathBuf)],
    expected: Option<&str>,
) -> Result<()> {
    for (shard, (path, _)) in plan.shards.iter().zip(shards) {
        let found = match std::fs::metadata(path) {
            Ok(m) => m.is_file().then_some(m.len()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(e).with_output(path.display())),
        };
        check_shard_len(&path.display().to_string(), found, shard.file_len())?;
    }
    let Some(expected) = expected else {
        return Ok(());
    };
    let records = shards
        .iter()
        .map(|(p, _)| Ok((p.display().to_string(), record::read_file(p)?)))
        .collect::<Result<Vec<_>>>()?;
    record::check_records(expected, &records)
}

impl super::writer::Destination for FileSet {
    fn stage<'a>(&'a mut self, index: usize, _: &'a ShardPlan) -> BoxFuture<'a, Result<Staged>> {
        Box::pin(std::future::ready(FileSet::stage(self, index)))
    }

    fn finish(&mut self, writer: OutWriter, written: &WrittenFile) {
        FileSet::finish(self, writer, written)
    }

    fn commit<'a>(self: Box<Self>, plan: &'a Plan) -> BoxFuture<'a, Result<Option<WrittenFile>>> {
        Box::pin(FileSet::commit(*self, plan))
    }

    /// Dropped: the staged files are deleted, then the folders made for them.
    fn abort(self: Box<Self>) -> BoxFuture<'static, ()> {
        drop(self);
        Box::pin(std::future::ready(()))
    }
}

/// Folders this run created for its output, innermost last. Dropping it
/// without [`CreatedFolders::keep`] removes them (each only if still empty:
/// another run may have put something there meanwhile).
#[derive(Debug, Default)]
#[must_use = "dropping it removes the folders it created"]
pub(crate) struct CreatedFolders {
    created: Vec<PathBuf>,
}

impl CreatedFolders {
    /// Creates the missing folders above `file`, one level at a time, and
    /// remembers those this call made (a folder that another run makes at
    /// the same moment is theirs).
    pub(crate) fn create_for(file: &Path) -> Result<CreatedFolders> {
        let mut made = CreatedFolders::default();
        let missing = missing_ancestors(file.parent().unwrap_or(Path::new("")));
        for folder in missing.into_iter().rev() {
            match std::fs::create_dir(&folder) {
                Ok(()) => made.created.push(folder),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && folder.is_dir() => {}
                Err(e) => {
                    let msg = format!("cannot create the folder {}: {e}", folder.display());
                    let e = std::io::Error::new(e.kind(), msg);
                    return Err(Error::io(e).with_output(file.display()));
                }
            }
        }
        Ok(made)
    }

    /// The run succeeded: the folders stay.
    pub(crate) fn keep(mut self) {
        self.created.clear();
    }
}

impl Drop for CreatedFolders {
    fn drop(&mut self) {
        for folder in self.created.iter().rev() {
            // Fails, and so keeps the folder, if anything is in it now.
            let _ = std::fs::remove_dir(folder);
        }
    }
}

/// `dir` and its ancestors that do not exist, innermost first.
fn missing_ancestors(dir: &Path) -> Vec<PathBuf> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty()) {
        if std::fs::symlink_metadata(d).is_ok() {
            break;
        }
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    missing
}

/// The nearest folder above `file` that exists (`.` for a bare name).
pub(crate) fn nearest_existing(file: &Path) -> PathBuf {
    let missing = missing_ancestors(file.parent().unwrap_or(Path::new("")));
    parent_dir(missing.last().map_or(file, PathBuf::as_path)).to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_folders_go_unless_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a/b/c/out.safetensors");
        std::fs::create_dir(dir.path().join("a")).unwrap();
        assert_eq!(nearest_existing(&file), dir.path().join("a"));
        let made = CreatedFolders::create_for(&file).unwrap();
        assert!(dir.path().join("a/b/c").is_dir());
        drop(made);
        assert!(dir.path().join("a").is_dir(), "not ours: stays");
        assert!(!dir.path().join("a/b").exists());
        CreatedFolders::create_for(&file).unwrap().keep();
        assert!(dir.path().join("a/b/c").is_dir());
    }
}
