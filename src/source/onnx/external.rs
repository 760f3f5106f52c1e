//! External data: files beside the model that hold initializers' bytes
//! (`data_location: EXTERNAL`, `external_data` keys `location`, `offset`,
//! `length`). A location must stay inside the model's folder, as onnx's own
//! loader demands (`onnx/checker.cc`, `external_data_helper.py`): not
//! absolute, no `..`, and not leading out through a symbolic link (the
//! resolved path must lie under the resolved folder, and so must the path
//! of the handle opened, see [`ExternalFiles::open`]). Each file is opened
//! once, checked to be a regular file, and stamped like the model.

use std::fs::File;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::super::Stamp;
use crate::error::onnx::OnnxError;

/// One external file, open.
#[derive(Debug)]
pub(crate) struct ExternalFile {
    /// Its location as the model spells it.
    pub(crate) location: String,
    /// Where it was opened: the location resolved, links followed.
    pub(crate) path: PathBuf,
    pub(crate) file: Arc<File>,
    pub(crate) len: u64,
    pub(crate) opened: Stamp,
}

/// The external files a model's initializers use, opened on first use.
#[derive(Debug)]
pub(crate) struct ExternalFiles {
    /// The model's folder, resolved; `None` for a model from a stream.
    folder: Option<PathBuf>,
    /// Whether `folder` was resolved yet (done on the first location).
    resolved: bool,
    pub(crate) files: Vec<ExternalFile>,
}

fn refused(why: String) -> OnnxError {
    OnnxError::External(why)
}

impl ExternalFiles {
    /// The external files of the model at `model` (`None`: read from a stream).
    pub(crate) fn new(model: Option<&Path>) -> Self {
        let folder = model.map(|p| match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        });
        ExternalFiles {
            folder,
            resolved: false,
            files: Vec::new(),
        }
    }

    /// The index in [`Self::files`] of the file at `location`, opened if new.
    pub(crate) fn open(&mut self, location: &str) -> Result<usize, OnnxError> {
        self.open_with(location, || {})
    }

    /// [`Self::open`], calling `between` after the path is checked and
    /// before it is opened (a test swaps a folder for a link there).
    fn open_with(&mut self, location: &str, between: impl FnOnce()) -> Result<usize, OnnxError> {
        if let Some(i) = self.files.iter().position(|f| f.location == location) {
            return Ok(i);
        }
        check_location(location)?;
        let folder = self.folder()?;
        let path = folder.join(location);
        let real = std::fs::canonicalize(&path)
            .map_err(|e| refused(format!("location {location:?} cannot be opened: {e}")))?;
        // Checked by path first so that a link out of the folder is refused
        // before anything it leads to (a device, say) is opened at all.
        if !real.starts_with(&folder) {
            return Err(leads_out(location));
        }
        between();
        // Its type from the open handle, opened without blocking: a FIFO
        // swapped in after the check above would block a plain open.
        let cannot = |e| refused(format!("location {location:?} cannot be opened: {e}"));
        let file = match crate::io_util::open_if_regular(&real).map_err(cannot)? {
            Ok(file) => file,
            Err(what) => {
                let msg = format!("location {location:?} is {what}, not a regular file");
                return Err(refused(msg));
            }
        };
        let opened_at = opened_path(&file).unwrap_or(real);
        if !opened_at.starts_with(&folder) {
            return Err(leads_out(location));
        }
        let len = file
            .metadata()
            .map_err(|e| refused(format!("location {location:?}: {e}")))?
            .len();
        self.files.push(ExternalFile {
            location: location.to_string(),
            path: opened_at,
            opened: Stamp::of(&file, len),
            file: Arc::new(file),
            len,
        });
        Ok(self.files.len() - 1)
    }

    fn folder(&mut self) -> Result<PathBuf, OnnxError> {
        let Some(folder) = &self.folder else {
            return Err(refused(
                "a model read from a stream has no folder to find its external data in: \
                 name the model by its path"
                    .to_string(),
            ));
        };
        if !self.resolved {
            let real = std::fs::canonicalize(folder)
                .map_err(|e| refused(format!("the model's folder cannot be resolved: {e}")))?;
            self.folder = Some(real);
            self.resolved = true;
        }
        Ok(self.folder.clone().unwrap_or_default())
    }
}

fn leads_out(location: &str) -> OnnxError {
    refused(format!(
        "location {location:?} leads out of the model's folder through a symbolic link"
    ))
}

/// Where the kernel says `file` is: the path of the file the handle holds,
/// links resolved. The path checked before the open is only where a file
/// was then: a folder on it swapped for a link out of the model's folder
/// in between would be followed by the open, so the handle's own path is
/// checked too (one handle checked and read; per-component `O_NOFOLLOW`
/// opens would also refuse the links inside the folder that onnx allows).
/// `None` where `/proc` is not mounted (or not Linux's): only the path
/// check then stands.
fn opened_path(file: &File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

/// The rules a location's text must keep, before any file is looked at.
fn check_location(location: &str) -> Result<(), OnnxError> {
    if location.is_empty() {
        return Err(refused("location is empty".to_string()));
    }
    if location.contains('\0') {
        return Err(refused(format!("location {location:?} holds a NUL byte")));
    }
    let path = Path::new(location);
    if path.is_absolute() {
        return Err(refused(format!(
            "location {location:?} is an absolute path; it must be relative to the model's folder"
        )));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(refused(format!(
            "location {location:?} leads out of the model's folder (`..`)"
        )));
    }
    Ok(())
}

/// An `offset` or `length` value: a decimal number, as onnx writes it.
pub(crate) fn number(key: &str, value: &str) -> Result<u64, OnnxError> {
    let ok = !value.is_empty() && value.len() <= 20 && value.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| value.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| refused(format!("{key} {value:?} is not a number of bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_outside_the_folder_are_refused_before_any_file_is_looked_at() {
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a/..", "a\0b"] {
            assert!(check_location(bad).is_err(), "{bad:?}");
        }
        for good in ["w.bin", "sub/w.bin", "./w.bin", "a..b", "..a"] {
            check_location(good).unwrap();
        }
    }

    #[test]
    fn numbers_are_plain_decimals() {
        assert_eq!(number("offset", "4096").unwrap(), 4096);
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1e3",
            "0x10",
            "99999999999999999999999",
        ] {
            assert!(number("offset", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_symbolic_link_out_of_the_folder_is_refused_and_one_inside_followed() {
        let top = tempfile::tempdir().unwrap();
        let model_dir = top.path().join("model");
        std::fs::create_dir(&model_dir).unwrap();
        std::fs::write(top.path().join("secret.bin"), b"s").unwrap();
        std::fs::write(model_dir.join("w.bin"), b"w").unwrap();
        std::os::unix::fs::symlink("../secret.bin", model_dir.join("out.bin")).unwrap();
        std::os::unix::fs::symlink("w.bin", model_dir.join("in.bin")).unwrap();
        let mut files = ExternalFiles::new(Some(&model_dir.join("m.onnx")));
        let e = files.open("out.bin").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(files.open("in.bin").unwrap(), 0);
        assert_eq!(files.open("in.bin").unwrap(), 0);
        assert_eq!(files.files[0].len, 1);
        let mut streamed = ExternalFiles::new(None);
        assert!(streamed.open("w.bin").is_err());
    }

    #[test]
    fn a_folder_swapped_for_a_link_out_after_the_check_is_refused_by_the_handle() {
        let top = tempfile::tempdir().unwrap();
        let model_dir = top.path().join("model");
        std::fs::create_dir_all(model_dir.join("sub")).unwrap();
        std::fs::create_dir_all(top.path().join("outside/sub")).unwrap();
        std::fs::write(model_dir.join("sub/w.bin"), b"w").unwrap();
        std::fs::write(top.path().join("outside/sub/w.bin"), b"secret").unwrap();
        let mut files = ExternalFiles::new(Some(&model_dir.join("m.onnx")));
        let swap = || {
            std::fs::rename(model_dir.join("sub"), model_dir.join("old")).unwrap();
            std::os::unix::fs::symlink("../outside/sub", model_dir.join("sub")).unwrap();
        };
        let e = files.open_with("sub/w.bin", swap).unwrap_err();
        assert!(
            e.to_string()
                .contains("\"sub/w.bin\" leads out of the model's folder"),
            "{e}"
        );
        assert!(files.files.is_empty());
    }
}
