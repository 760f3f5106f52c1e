//! What an output path names, decided before a byte is written.
//!
//! Only a regular file (or nothing) is ever renamed over. A character
//! device, a FIFO, a socket, or a name for an open descriptor
//! (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`) is written through,
//! streaming, as `-o -` is: renaming over `/dev/null` would replace the
//! device with a plain file, and renaming over a FIFO would leave its
//! reader waiting for ever.
//!
//! A symbolic link at the output is followed, as `cp` follows it: the link
//! stays, and the file it points to is replaced (atomically, beside itself).

use std::path::{Component, Path, PathBuf};

use crate::{Error, ErrorKind, Result};

/// Where an output path's bytes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A regular file, or nothing yet: staged beside this path and renamed
    /// over it. Symbolic links are followed: this is the file they lead to.
    Replace(PathBuf),
    /// Standard output by another name (`/dev/stdout`, `/dev/fd/1`,
    /// `/proc/self/fd/1`): written exactly as `-o -` is.
    Stdout,
    /// A character device, FIFO or socket, or a name for another open
    /// descriptor: opened and written in place, never renamed over.
    Stream(PathBuf),
}

/// Symbolic links followed before giving up, as the kernel does (ELOOP).
const MAX_LINKS: usize = 40;

/// Decides where the bytes for the output `path` go, following symbolic
/// links one at a time so that a link into `/dev` or `/proc` is seen.
///
/// A folder is refused as a usage error (the output must be a file name,
/// or end in `/` to be written into: see [`crate::plan::layout::names_folder`]).
pub(crate) fn resolve(path: &Path) -> Result<Target> {
    let on_path = |e: std::io::Error| Error::io(e).with_output(path.display());
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match descriptor_alias(&at) {
            Some(1) => return Ok(Target::Stdout),
            Some(_) => return Ok(Target::Stream(at)),
            None => {}
        }
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Target::Replace(at)),
            Err(e) => return Err(on_path(e)),
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            let link = std::fs::read_link(&at).map_err(on_path)?;
            at = match at.parent() {
                Some(dir) if link.is_relative() => dir.join(link),
                _ => link,
            };
        } else if kind.is_file() {
            return Ok(Target::Replace(at));
        } else if kind.is_dir() {
            // A mistake of usage, not of I/O: say how to write into it.
            let msg = "is a folder; name a file, or end the name with / to write model.safetensors (or the shards) into it";
            return Err(Error::new(ErrorKind::OutputName(msg.into())).with_output(path.display()));
        } else {
            return Ok(Target::Stream(at));
        }
    }
    Err(on_path(std::io::Error::other(
        "too many levels of symbolic links",
    )))
}

/// The file [`resolve`] finds at `path` to replace; refused unless a
/// regular file (or nothing) is there.
pub(crate) fn replaced(path: &Path) -> Result<PathBuf> {
    match resolve(path)? {
        Target::Replace(dest) => Ok(dest),
        _ => {
            let msg = "is not a regular file, and only a regular file is ever replaced";
            let e = Error::new(ErrorKind::OutputName(msg.into()));
            Err(e.with_output(path.display()))
        }
    }
}

/// The descriptor a path names when it is `/dev/stdout`, `/dev/stderr`,
/// `/dev/fd/N` or `/proc/{self,thread-self,PID}/fd/N`.
fn descriptor_alias(path: &Path) -> Option<u32> {
    let parts: Vec<&str> = path
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str().unwrap_or("\0"),
            Component::RootDir => "/",
            _ => "\0",
        })
        .collect();
    match parts.as_slice() {
        ["/", "dev", "stdout"] => Some(1),
        ["/", "dev", "stderr"] => Some(2),
        ["/", "dev", "stdin"] => Some(0),
        ["/", "dev", "fd", n] => n.parse().ok(),
        ["/", "proc", _, "fd", n] => n.parse().ok(),
        _ => None,
    }
}

/// Opens a [`Target::Stream`] for writing, off the runtime's threads (a
/// FIFO waits for its reader, and a signal must still end the run
/// meanwhile): a device or FIFO as it is, a socket by connecting to it,
/// another descriptor's name in append mode (its file keeps what it
/// holds). A terminal is refused.
pub(crate) async fn open_stream(path: &Path) -> Result<tokio::fs::File> {
    use std::io::IsTerminal;
    use std::os::unix::fs::FileTypeExt;
    let on_path = |e: std::io::Error| Error::io(e).with_output(path.display());
    let owned = path.to_path_buf();
    let file = tokio::task::spawn_blocking(move || {
        if std::fs::metadata(&owned).is_ok_and(|m| m.file_type().is_socket()) {
            let sock = std::os::unix::net::UnixStream::connect(&owned)?;
            return Ok(std::fs::File::from(std::os::fd::OwnedFd::from(sock)));
        }
        let mut options = std::fs::OpenOptions::new();
        let append = descriptor_alias(&owned).is_some();
        options.write(true).append(append).open(&owned)
    })
    .await
    .map_err(|e| on_path(std::io::Error::other(e)))?
    .map_err(on_path)?;
    if file.is_terminal() {
        return Err(Error::new(ErrorKind::TerminalOutput).with_output(path.display()));
    }
    Ok(tokio::fs::File::from_std(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_names_are_recognised() {
        assert_eq!(descriptor_alias(Path::new("/dev/stdout")), Some(1));
        assert_eq!(descriptor_alias(Path::new("/dev/fd/1")), Some(1));
        assert_eq!(descriptor_alias(Path::new("/proc/self/fd/2")), Some(2));
        assert_eq!(descriptor_alias(Path::new("/dev/null")), None);
        assert_eq!(descriptor_alias(Path::new("dev/stdout")), None);
        assert_eq!(descriptor_alias(Path::new("/dev/shm/x")), None);
    }
}
