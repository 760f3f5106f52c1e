//! Where a conversion writes: what the output path names ([`target`]),
//! files staged and committed together, and the folders made for them
//! ([`files`]), and the checks made before a data byte is read, by the real
//! run and by `--dry-run` alike ([`check`]).

pub(crate) mod files;
#[cfg(feature = "object-store")]
pub(crate) mod objects;
pub(crate) mod record;
pub(crate) mod staged;
pub(crate) mod target;
#[allow(unsafe_code)]
pub(crate) mod writeback;
pub(crate) mod writer;

use std::io::IsTerminal;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::index::{is_index_path, ShardIndex};
use crate::plan::layout::{names_folder, shard_paths, Part};
use crate::plan::Plan;
use crate::{Error, ErrorKind, Result, Warning};
use target::{resolve, Target};

/// Where the output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A file, written atomically; with sharding, the base of the shard names.
    File(PathBuf),
    /// Standard output (`-o -`); no sharding.
    Stdout,
}

/// One file written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WrittenFile {
    /// Its path (`-` for standard output).
    pub path: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Tensors it holds (0 for an index).
    pub tensors: usize,
    /// Its SHA-256, hex, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The longest file name Linux filesystems take (NAME_MAX).
pub(crate) const NAME_MAX: usize = 255;

/// What an output resolves to, once, after [`check`]: the only place the
/// output path is looked at.
#[derive(Debug)]
pub(crate) enum Resolved {
    /// Standard output (`None`: by `-` or another name, named `-`), or a
    /// device, FIFO or socket, and its name as given.
    Stream(Option<PathBuf>, String),
    /// Regular files: each shard as (name given, file replaced; links
    /// followed), then the index if any.
    Files {
        shards: Vec<(PathBuf, PathBuf)>,
        index: Option<(PathBuf, PathBuf)>,
    },
    /// Objects: the URL the set's names derive from.
    #[cfg(feature = "object-store")]
    Objects(String),
}

/// Checks that `output` can take `plan` without harm, before anything is
/// written (the refusals [`dry_run`](crate::convert::dry_run) lists; an
/// object set that is one of the object URLs read is refused as a file
/// is); returns what the output resolved to, and warnings worth telling.
pub(crate) fn check(
    inputs: &[PathBuf],
    output: &Output,
    plan: &Plan,
    part: Part,
    overwrite_input: bool,
) -> Result<(Resolved, Vec<Warning>)> {
    part.check(plan)?;
    let shards = plan.shards.len();
    let stdout = |shown: &str| -> Result<(Resolved, Vec<Warning>)> {
        check_stream_output(shown, shards, std::io::stdout().is_terminal())?;
        Ok((Resolved::Stream(None, "-".into()), Vec::new()))
    };
    let Output::File(path) = output else {
        return stdout("-");
    };
    // Objects: written as a whole or not at all by the store itself.
    #[cfg(feature = "object-store")]
    if let Some(url) = path.to_str().filter(|_| crate::store::is_url(path)) {
        check_objects(inputs, url, shards, overwrite_input)?;
        return Ok((Resolved::Objects(url.to_string()), Vec::new()));
    }
    let shown = path.display().to_string();
    // A folder named as one (`out/`) is written into, and made if missing.
    if !names_folder(path) {
        match resolve(path)? {
            Target::Stdout => return stdout(&shown),
            // Whether a device is a terminal is known once it is open.
            Target::Stream(at) => {
                check_stream_output(&shown, shards, false)?;
                return Ok((Resolved::Stream(Some(at), shown), Vec::new()));
            }
            Target::Replace(_) => {}
        }
    }
    let (files, index) = shard_paths(path, shards);
    let mut warnings = check_file_names(&files, index.is_some())?;
    let read = input_files(inputs);
    let mut check_one = |file: PathBuf| -> Result<(PathBuf, PathBuf)> {
        let (dest, warned) = check_file(&file, &read, overwrite_input)?;
        warnings.extend(warned);
        Ok((file, dest))
    };
    let shards = files
        .into_iter()
        .map(&mut check_one)
        .collect::<Result<_>>()?;
    let index = index.map(&mut check_one).transpose()?;
    Ok((Resolved::Files { shards, index }, warnings))
}

/// The names of the files written: one file is not named like an index;
/// one named like another format gets a warning (its bytes are safetensors).
fn check_file_names(files: &[PathBuf], sharded: bool) -> Result<Vec<Warning>> {
    let mut warnings = Vec::new();
    for file in files {
        let shown = file.display();
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if !sharded && name.ends_with(".index.json") {
            let msg = "is named like an index, but the output is one safetensors file; name it *.safetensors";
            return Err(Error::new(ErrorKind::OutputName(msg.into())).with_output(shown));
        }
        match file.extension().map(|e| e.to_string_lossy()) {
            Some(ext) if ext != "safetensors" => warnings.push(Warning::OutputExtension {
                output: shown.to_string(),
                extension: ext.into_owned(),
            }),
            _ => {}
        }
    }
    Ok(warnings)
}

/// An object set whose name is one of the object URLs read: refused unless
/// `overwrite_input` (the store replaces it whole, after the reads).
#[cfg(feature = "object-store")]
fn check_objects(inputs: &[PathBuf], url: &str, shards: usize, overwrite: bool) -> Result<()> {
    if overwrite {
        return Ok(());
    }
    let (files, index) = shard_paths(Path::new(url), shards);
    for out in files.iter().chain(&index) {
        let out = out.to_string_lossy();
        if let Some(input) = inputs.iter().find(|i| i.to_string_lossy() == out) {
            let e = Error::new(ErrorKind::OutputIsInput(input.display().to_string()));
            return Err(e.with_output(out));
        }
    }
    Ok(())
}

/// Standard output and other streams: one file, never a terminal.
fn check_stream_output(shown: &str, shards: usize, terminal: bool) -> Result<()> {
    if shards > 1 {
        let msg = "a sharded set needs regular files, not a stream or device";
        return Err(Error::new(ErrorKind::OutputName(msg.into())).with_output(shown));
    }
    if terminal {
        return Err(Error::new(ErrorKind::TerminalOutput).with_output(shown));
    }
    Ok(())
}

/// One file of the output: its name, what is there now, its folder.
/// Returns the file it replaces (links followed) and warnings.
fn check_file(
    file: &Path,
    read: &[(String, u64, u64)],
    overwrite_input: bool,
) -> Result<(PathBuf, Vec<Warning>)> {
    let shown = file.display();
    let name_len = file.file_name().map_or(0, |n| n.len());
    if name_len > NAME_MAX {
        let msg = format!("the file name is {name_len} bytes; the limit is {NAME_MAX}");
        return Err(Error::new(ErrorKind::OutputName(msg)).with_output(shown));
    }
    let dest = target::replaced(file)?;
    let mut warnings = Vec::new();
    if let Ok(now) = std::fs::metadata(&dest) {
        let mut same = read
            .iter()
            .filter(|(_, dev, ino)| (*dev, *ino) == (now.dev(), now.ino()));
        if let Some((input, ..)) = same.next().filter(|_| !overwrite_input) {
            let e = Error::new(ErrorKind::OutputIsInput(input.clone()));
            return Err(e.with_output(shown));
        }
        if now.nlink() > 1 {
            warnings.push(Warning::HardLinks {
                output: shown.to_string(),
                others: now.nlink() - 1,
            });
        }
    }
    check_writable(&dest).map_err(|e| e.with_output(shown))?;
    Ok((dest, warnings))
}

/// The folder `dest` goes into, or the nearest existing one above it, is a
/// folder this process may create files in.
fn check_writable(dest: &Path) -> Result<()> {
    use rustix::fs::{access, Access};
    let dir = files::nearest_existing(dest);
    let writable = match dir.is_dir() {
        true => access(&dir, Access::WRITE_OK | Access::EXEC_OK).map_err(std::io::Error::from),
        false => Err(std::io::ErrorKind::NotADirectory.into()),
    };
    writable.map_err(|e| {
        let msg = format!("cannot write in {}: {e}", dir.display());
        Error::io(std::io::Error::new(e.kind(), msg))
    })
}

/// Every file read for `inputs`, as (name, device, inode): each input
/// (links followed; `-` when standard input is a file; a folder as the
/// checkpoint it stands for) and, for an index (safetensors or PyTorch),
/// its shards. Files that cannot be looked at are left out: opening them
/// has already failed, or will.
fn input_files(inputs: &[PathBuf]) -> Vec<(String, u64, u64)> {
    let mut files = Vec::new();
    let mut add = |shown: String, path: &Path| {
        if let Ok(m) = std::fs::metadata(path) {
            files.push((shown, m.dev(), m.ino()));
        }
    };
    for input in inputs {
        if input.as_os_str() == "-" {
            add("-".into(), Path::new("/dev/stdin"));
            continue;
        }
        // The file a folder stands for is the one read, so the one that clashes.
        let input = crate::folder::resolve_input(input).unwrap_or_else(|_| input.clone());
        add(input.display().to_string(), &input);
        if is_index_path(&input) || crate::source::pytorch::is_index_path(&input) {
            for shard in index_shards(&input) {
                add(shard.display().to_string(), &shard);
            }
        }
    }
    files
}

/// The shard files an index names (none if it cannot be read). Read under
/// the same cap as every index read: an index that is `/dev/zero` or a huge
/// file must not fill memory here either.
fn index_shards(index: &Path) -> Vec<PathBuf> {
    // An index that cannot be read is no index: its text is then empty.
    let text = crate::header::read::read_capped(index, "index file").unwrap_or_default();
    let Ok(parsed) = ShardIndex::from_json(&text) else {
        return Vec::new();
    };
    let dir = index.parent().unwrap_or(Path::new(""));
    let names = parsed.shard_names().unwrap_or_default();
    names.iter().map(|n| dir.join(n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_that_never_ends_is_read_under_the_cap() {
        // Unbounded, this read would fill memory and never return.
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("z.safetensors.index.json");
        std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
        assert!(index_shards(&index).is_empty());
    }

    #[cfg(feature = "object-store")]
    #[test]
    fn an_object_set_naming_an_object_read_is_refused() {
        let url = "s3://bucket/dir/model.safetensors";
        let inputs = [PathBuf::from(url)];
        let e = check_objects(&inputs, url, 1, false).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::OutputIsInput(i) if i == url),
            "{e}"
        );
        assert_eq!(e.output(), Some(url));
        assert!(check_objects(&inputs, url, 1, true).is_ok());
        // A sharded set clashes through its shard names.
        let shard = PathBuf::from("s3://bucket/dir/model-00002-of-00002.safetensors");
        assert!(check_objects(std::slice::from_ref(&shard), url, 2, false).is_err());
        assert!(check_objects(&[shard], url, 1, false).is_ok());
    }
}
