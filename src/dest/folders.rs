//! The output's missing parent folders: created before writing, and
//! removed again if the run fails, so that a failed run leaves the tree as
//! it found it.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

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
        let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) else {
            return Ok(made);
        };
        let missing = missing_ancestors(dir);
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
pub(crate) fn missing_ancestors(dir: &Path) -> Vec<PathBuf> {
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
    let dir = file.parent().unwrap_or(Path::new(""));
    let missing = missing_ancestors(dir);
    let top = missing
        .last()
        .map_or(dir, |m| m.parent().unwrap_or(Path::new("")));
    if top.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        top.to_path_buf()
    }
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
