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

use crate::error::{Error, ErrorKind, Result};
use crate::location::Opened;
use crate::plan::layout::{names_folder, shard_paths, Part};
use crate::plan::Plan;
#[cfg(feature = "object-store")]
use crate::store::ObjectUrl;
use crate::Warning;
use target::{resolve, Target};

/// Where the output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A file, written atomically; with sharding, the base of the shard
    /// names. (A URL-shaped path here is taken as the object URL it spells,
    /// as [`Output::parse`] reads it: name objects with [`Output::Object`].)
    File(PathBuf),
    /// Standard output (`-o -`); no sharding.
    Stdout,
    /// An object, written whole or not at all; with sharding, the base of
    /// the shard names, beside it.
    #[cfg(feature = "object-store")]
    Object(ObjectUrl),
}

impl Output {
    /// What `path` names as an output: `-` is standard output, a
    /// URL-shaped argument an object (refused here, as a usage error naming
    /// it, when it is not one we can write), anything else a file.
    ///
    /// ```
    /// use std::path::Path;
    /// use safetensors_stream::Output;
    /// assert_eq!(Output::parse(Path::new("-"))?, Output::Stdout);
    /// assert_eq!(Output::parse(Path::new("m.safetensors"))?, Output::File("m.safetensors".into()));
    /// # #[cfg(feature = "object-store")]
    /// assert!(matches!(Output::parse(Path::new("s3://b/m.safetensors"))?, Output::Object(_)));
    /// # Ok::<(), safetensors_stream::Error>(())
    /// ```
    pub fn parse(path: &Path) -> Result<Output> {
        if path.as_os_str() == "-" {
            return Ok(Output::Stdout);
        }
        #[cfg(feature = "object-store")]
        if let Some(url) = ObjectUrl::from_arg(path) {
            let usage = |msg| Error::new(ErrorKind::Usage(msg)).with_output(path.display());
            return url.map(Output::Object).map_err(usage);
        }
        Ok(Output::File(path.to_path_buf()))
    }

    /// The names the outputs of a plan of `shards` shards take: `-`, the
    /// files, or the objects' URLs (the index last, when there is one).
    pub(crate) fn names(&self, shards: usize) -> Vec<String> {
        match self {
            Output::Stdout => vec!["-".to_string()],
            Output::File(path) => {
                let (files, _) = shard_paths(path, shards);
                files.iter().map(|p| p.display().to_string()).collect()
            }
            #[cfg(feature = "object-store")]
            Output::Object(url) => object_names(url, shards).0,
        }
    }
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
    Objects(ObjectUrl),
}

/// Checks that `output` can take `plan` without harm, before anything is
/// written (the refusals [`dry_run`](crate::convert::dry_run) lists: an
/// output that is one of the files or objects `read` is refused); returns
/// what the output resolved to, and warnings worth telling.
pub(crate) fn check(
    read: &[Opened],
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
    let path = match output {
        Output::Stdout => return stdout("-"),
        Output::File(path) => path,
        #[cfg(feature = "object-store")]
        Output::Object(url) => return check_objects(read, url, shards, overwrite_input),
    };
    // The library's old spelling of an object: its URL as a file's path.
    #[cfg(feature = "object-store")]
    if let Output::Object(url) = Output::parse(path)? {
        return check_objects(read, &url, shards, overwrite_input);
    }
    let shown = path.display().to_string();
    // A folder named as one (`out/`) is written into, and made if missing.
    let mut replaced = None;
    if !names_folder(path) {
        match resolve(path)? {
            Target::Stdout => return stdout(&shown),
            // Whether a device is a terminal is known once it is open.
            Target::Stream(at) => {
                check_stream_output(&shown, shards, false)?;
                return Ok((Resolved::Stream(Some(at), shown), Vec::new()));
            }
            Target::Replace(at) => replaced = Some(at),
        }
    }
    let (files, index) = shard_paths(path, shards);
    // One file is `path` itself, resolved just now; shards are resolved each.
    let mut replaced = replaced.filter(|_| index.is_none());
    let mut warnings = check_file_names(&files, index.is_some())?;
    let read = read_files(read);
    let mut check_one = |file: PathBuf| -> Result<(PathBuf, PathBuf)> {
        let (dest, warned) = check_file(&file, replaced.take(), &read, overwrite_input)?;
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

/// The URLs of an object set's objects (the shards, the base itself for
/// one) and of its index, if any: named as files are, beside `url`.
#[cfg(feature = "object-store")]
pub(crate) fn object_names(url: &ObjectUrl, shards: usize) -> (Vec<String>, Option<String>) {
    // Names only: the URL's last segment, never the URL as a path.
    let (files, index) = shard_paths(Path::new(url.name()), shards);
    let beside = |p: &PathBuf| url.beside(&p.to_string_lossy());
    (
        files.iter().map(beside).collect(),
        index.as_ref().map(beside),
    )
}

/// An object set, written as a whole or not at all by the store itself:
/// refused when one of its objects is one read, unless `overwrite` (the
/// store replaces it whole, after the reads).
#[cfg(feature = "object-store")]
fn check_objects(
    read: &[Opened],
    url: &ObjectUrl,
    shards: usize,
    overwrite: bool,
) -> Result<(Resolved, Vec<Warning>)> {
    let (files, index) = object_names(url, shards);
    let objects_read = read.iter().filter_map(|o| match &o.location {
        crate::location::Location::Object(input) => Some(input),
        _ => None,
    });
    // By the object addressed, not the text: `?x`, `%2E` or `S3://` spell
    // the input too. Each looked up once: a set of 163 shards read into
    // one of as many is no quadratic work.
    let mut by_object = std::collections::HashMap::new();
    for input in objects_read {
        by_object.entry(input.addressed()).or_insert(input);
    }
    for out in files.iter().chain(&index).filter(|_| !overwrite) {
        // A name that is no object URL is no input's either (each parsed).
        let out_url = ObjectUrl::parse(out).ok();
        if let Some(input) = out_url.and_then(|o| by_object.get(&o.addressed()).copied()) {
            let e = Error::new(ErrorKind::OutputIsInput(input.to_string()));
            return Err(e.with_output(out));
        }
    }
    Ok((Resolved::Objects(url.clone()), Vec::new()))
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
/// Returns the file it replaces (links followed; `replaced` when that is
/// known already) and warnings.
fn check_file(
    file: &Path,
    replaced: Option<PathBuf>,
    read: &[(String, u64, u64)],
    overwrite_input: bool,
) -> Result<(PathBuf, Vec<Warning>)> {
    let shown = file.display();
    let name_len = file.file_name().map_or(0, |n| n.len());
    if name_len > NAME_MAX {
        let msg = format!("the file name is {name_len} bytes; the limit is {NAME_MAX}");
        return Err(Error::new(ErrorKind::OutputName(msg)).with_output(shown));
    }
    let dest = match replaced {
        Some(dest) => dest,
        None => target::replaced(file)?,
    };
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

/// The files among those read, as (name, device, inode): what an output
/// file must not be. Files that could not be looked at are left out:
/// opening them has already failed, or will.
fn read_files(read: &[Opened]) -> Vec<(String, u64, u64)> {
    let file = |o: &Opened| {
        let (dev, ino) = o.identity.file_id()?;
        Some((o.location.to_string(), dev, ino))
    };
    read.iter().filter_map(file).collect()
}

#[cfg(test)]
mod tests {
    #[cfg_attr(not(feature = "object-store"), allow(unused_imports))]
    use super::*;

    #[cfg(feature = "object-store")]
    #[test]
    fn an_object_set_naming_an_object_read_is_refused() {
        let url = ObjectUrl::parse("s3://bucket/dir/model.safetensors").unwrap();
        let read = [Opened::object(&url, 8, None)];
        let e = check_objects(&read, &url, 1, false).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::OutputIsInput(i) if i == url.as_str()),
            "{e}"
        );
        assert_eq!(
            (e.input(), e.output()),
            (Some(url.as_str()), Some(url.as_str()))
        );
        assert!(check_objects(&read, &url, 1, true).is_ok());
        // A sharded set clashes through its shard names.
        let shard = ObjectUrl::parse("s3://bucket/dir/model-00002-of-00002.safetensors").unwrap();
        let read = [Opened::object(&shard, 8, Some("\"e\"".into()))];
        assert!(check_objects(&read, &url, 2, false).is_err());
        assert!(check_objects(&read, &url, 1, false).is_ok());
    }

    #[cfg(feature = "object-store")]
    #[test]
    fn an_object_set_is_named_beside_its_url() {
        let url = ObjectUrl::parse("s3://bucket/dir/m.safetensors").unwrap();
        let (files, index) = object_names(&url, 2);
        assert_eq!(
            files,
            [
                "s3://bucket/dir/m-00001-of-00002.safetensors",
                "s3://bucket/dir/m-00002-of-00002.safetensors"
            ]
        );
        assert_eq!(
            index.as_deref(),
            Some("s3://bucket/dir/m.safetensors.index.json")
        );
        assert_eq!(object_names(&url, 1), (vec![url.to_string()], None));
    }
}
