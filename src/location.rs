//! Where a conversion reads: parsed once, where the user names it (the
//! command line, a library call, Python), into a [`Location`]; and what a
//! source then reports it read, each file or object with its identity
//! ([`Opened`]). The check that an output is not one of the inputs compares
//! the outputs with that report, not with the names given.

use std::path::{Path, PathBuf};

use crate::error::Result;
#[cfg(feature = "object-store")]
use crate::error::{Error, ErrorKind};
#[cfg(feature = "object-store")]
use crate::store::ObjectUrl;

/// Where an input is: a file, a folder (the checkpoint in it), standard
/// input, or an object. An object's URL stays a URL: never a path.
///
/// ```
/// use std::path::Path;
/// use safetensors_stream::location::Location;
///
/// assert_eq!(Location::parse(Path::new("-"))?, Location::Stdio);
/// assert_eq!(
///     Location::parse(Path::new("model.npz"))?,
///     Location::File("model.npz".into())
/// );
/// assert!(matches!(Location::parse(Path::new("."))?, Location::Folder(_)));
/// # #[cfg(feature = "object-store")]
/// assert!(matches!(
///     Location::parse(Path::new("s3://bucket/model.safetensors"))?,
///     Location::Object(_)
/// ));
/// # Ok::<(), safetensors_stream::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local file (or a device, FIFO or socket).
    File(PathBuf),
    /// A local folder, standing for the one checkpoint in it
    /// ([`resolve_folder`](crate::source::resolve_folder)).
    Folder(PathBuf),
    /// Standard input (`-`).
    Stdio,
    /// An object in a store (`s3://`, `gs://`, `az://`, `https://`).
    #[cfg(feature = "object-store")]
    Object(ObjectUrl),
}

impl Location {
    /// What `path` names: `-` is standard input; a URL-shaped argument
    /// (`SCHEME://...`, with the `object-store` feature) an object, refused
    /// here, as a usage error naming it, when it is not one we can reach;
    /// an existing folder a folder; anything else a file (opened, and any
    /// error told, when read).
    pub fn parse(path: &Path) -> Result<Location> {
        if path.as_os_str() == "-" {
            return Ok(Location::Stdio);
        }
        #[cfg(feature = "object-store")]
        if let Some(url) = ObjectUrl::from_arg(path) {
            let usage = |msg| Error::new(ErrorKind::Usage(msg)).with_input(path.display());
            return url.map(Location::Object).map_err(usage);
        }
        Ok(match path.is_dir() {
            true => Location::Folder(path.to_path_buf()),
            false => Location::File(path.to_path_buf()),
        })
    }

    /// Each of `paths`, parsed ([`Location::parse`]).
    pub fn parse_all(paths: &[PathBuf]) -> Result<Vec<Location>> {
        paths.iter().map(|p| Location::parse(p)).collect()
    }

    /// The local path, for a file or folder.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Location::File(p) | Location::Folder(p) => Some(p),
            _ => None,
        }
    }
}

impl std::fmt::Display for Location {
    /// As given: a path, `-`, or the URL.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::File(p) | Location::Folder(p) => write!(f, "{}", p.display()),
            Location::Stdio => f.write_str("-"),
            #[cfg(feature = "object-store")]
            Location::Object(url) => f.write_str(url.as_str()),
        }
    }
}

/// What a file or object was when a source opened it: which one it is
/// (whether an output would replace it), and which version of it was read
/// (what a plan id is made of: [`crate::plan::plan_id`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A file (links followed: a symbolic or hard link to it is the same
    /// file).
    File {
        /// Its device.
        dev: u64,
        /// Its inode.
        ino: u64,
        /// Its version, for a regular file: its length and modification
        /// time (seconds, nanoseconds), which a copy of the same version
        /// keeps on another machine (`cp -p`, a shared filesystem). A
        /// pipe or a device has none.
        version: Option<(u64, (i64, i64))>,
    },
    /// An object: its size and, when the store gave one, its ETag.
    Object {
        /// Its size in bytes.
        size: u64,
        /// Its ETag.
        etag: Option<String>,
    },
    /// Nothing to tell it by (a file that could not be looked at).
    Unknown,
}

impl Identity {
    /// The file's device and inode, for a file.
    pub fn file_id(&self) -> Option<(u64, u64)> {
        match self {
            Identity::File { dev, ino, .. } => Some((*dev, *ino)),
            _ => None,
        }
    }

    /// The version read, as text for a plan id: `len=N;mtime=S.NNNNNNNNN`
    /// for a regular file, `size=N;etag=E` (or `size=N`) for an object;
    /// `None` for what has no version to pin (a pipe, a device).
    /// Locations are left out: two workers may spell one path differently.
    pub fn version(&self) -> Option<String> {
        match self {
            Identity::File {
                version: Some((len, (s, ns))),
                ..
            } => Some(format!("len={len};mtime={s}.{ns:09}")),
            Identity::Object {
                size,
                etag: Some(etag),
            } => Some(format!("size={size};etag={etag}")),
            Identity::Object { size, etag: None } => Some(format!("size={size}")),
            _ => None,
        }
    }
}

/// One file or object a source read, as it was then: every shard of an
/// index, the index itself, the file a folder stands for, standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// Where (a folder's checkpoint, not the folder).
    pub location: Location,
    /// What it was.
    pub identity: Identity,
}

impl Opened {
    /// The file at `path` (links followed), as it is now.
    pub fn file(path: &Path) -> Opened {
        Opened {
            location: Location::File(path.to_path_buf()),
            identity: file_identity(std::fs::metadata(path).ok()),
        }
    }

    /// The file at `path`, open as `file`: its identity is the open file's.
    pub fn open_file(path: &Path, file: &std::fs::File) -> Opened {
        Opened {
            location: Location::File(path.to_path_buf()),
            identity: file_identity(file.metadata().ok()),
        }
    }

    /// Standard input, as it is now (a file redirected to it has an identity).
    pub fn stdin() -> Opened {
        Opened {
            location: Location::Stdio,
            identity: file_identity(std::fs::metadata("/dev/stdin").ok()),
        }
    }

    /// The object at `url`, of this size and ETag.
    #[cfg(feature = "object-store")]
    pub fn object(url: &ObjectUrl, size: u64, etag: Option<String>) -> Opened {
        Opened {
            location: Location::Object(url.clone()),
            identity: Identity::Object { size, etag },
        }
    }
}

fn file_identity(meta: Option<std::fs::Metadata>) -> Identity {
    use std::os::unix::fs::MetadataExt;
    match meta {
        Some(m) => Identity::File {
            dev: m.dev(),
            ino: m.ino(),
            version: m.is_file().then(|| (m.len(), (m.mtime(), m.mtime_nsec()))),
        },
        None => Identity::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_parsed_by_what_they_name() {
        let dir = tempfile::tempdir().unwrap();
        let parse = |p: &Path| Location::parse(p).unwrap();
        assert_eq!(parse(Path::new("-")), Location::Stdio);
        assert_eq!(parse(dir.path()), Location::Folder(dir.path().into()));
        let file = dir.path().join("m.npz");
        assert_eq!(parse(&file), Location::File(file.clone()));
        assert_eq!(parse(&file).to_string(), file.display().to_string());
        // An explicit local path that looks like a URL stays a path.
        let local = Path::new("./s3:/x");
        assert_eq!(parse(local), Location::File(local.into()));
    }

    #[cfg(feature = "object-store")]
    #[test]
    fn an_object_url_is_parsed_as_a_url_or_refused_by_name() {
        let url = "s3://bucket/dir/model.safetensors";
        let Location::Object(object) = Location::parse(Path::new(url)).unwrap() else {
            panic!("{url} is an object");
        };
        assert_eq!(object.as_str(), url);
        assert_eq!(Location::Object(object).path(), None);
        let e = Location::parse(Path::new("s4://bucket/x")).unwrap_err();
        assert_eq!(e.category(), crate::Category::Usage);
        assert_eq!(e.input(), Some("s4://bucket/x"));
    }

    #[test]
    fn a_file_is_known_by_its_inode_through_any_link() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a");
        std::fs::write(&file, b"x").unwrap();
        std::os::unix::fs::symlink(&file, dir.path().join("link")).unwrap();
        std::fs::hard_link(&file, dir.path().join("hard")).unwrap();
        let id = |name: &str| Opened::file(&dir.path().join(name)).identity;
        assert!(id("a").file_id().is_some());
        assert_eq!(id("a"), id("link"));
        assert_eq!(id("a"), id("hard"));
        assert_eq!(id("missing"), Identity::Unknown);
        assert_eq!(id("missing").version(), None);
        // Its version is its length and modification time, not its name.
        let version = id("a").version().unwrap();
        assert!(version.starts_with("len=1;mtime="), "{version}");
        std::fs::write(&file, b"xy").unwrap();
        assert_ne!(id("link").version(), Some(version));
        assert_eq!(id("a").file_id(), id("hard").file_id());
        // A folder, a pipe or a device is a file, of no version.
        assert!(Opened::file(Path::new("/dev/null"))
            .identity
            .version()
            .is_none());
    }

    #[test]
    fn an_object_is_versioned_by_its_size_and_etag() {
        let object = |size, etag: Option<&str>| Identity::Object {
            size,
            etag: etag.map(str::to_string),
        };
        let version = |i: Identity| i.version().unwrap();
        assert_eq!(version(object(3, Some("\"e1\""))), "size=3;etag=\"e1\"");
        assert_eq!(version(object(3, None)), "size=3");
        assert_eq!(object(3, None).file_id(), None);
    }
}
