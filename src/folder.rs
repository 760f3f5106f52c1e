//! A folder given as input: a checkpoint folder as downloaded (`model/`)
//! stands for its one checkpoint. Its `*.index.json` if it holds exactly
//! one; else its single model file; anything else is refused with a
//! message saying what to pass.

use std::path::{Path, PathBuf};

use crate::{Error, ErrorKind, Result};

/// File name endings of model files a folder may hold (compressed or not).
const MODEL_EXTENSIONS: &[&str] = &["safetensors", "npz", "npy", "bin", "pt", "pth"];
const COMPRESSED: &[&str] = &["gz", "zst", "zstd", "xz", "bz2"];

/// `path` itself when it is not a folder; else the one checkpoint in it.
///
/// ```
/// use safetensors_stream::source::resolve_input;
///
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("model.safetensors"), b"").unwrap();
/// std::fs::write(dir.path().join("config.json"), b"{}").unwrap();
/// assert_eq!(resolve_input(dir.path())?, dir.path().join("model.safetensors"));
/// std::fs::write(dir.path().join("extra.npz"), b"").unwrap();
/// assert!(resolve_input(dir.path()).is_err()); // two model files: which one?
/// # Ok::<(), safetensors_stream::Error>(())
/// ```
pub(crate) fn resolve_input(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let shown = path.display().to_string();
    let mut names: Vec<String> = std::fs::read_dir(path)
        .map_err(|e| Error::io(e).with_input(&shown))?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    let indexes: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".index.json"))
        .collect();
    let models: Vec<&String> = names.iter().filter(|n| is_model_file(n)).collect();
    let refuse = |msg: String| Err(Error::new(ErrorKind::FolderInput(msg)).with_input(&shown));
    match (indexes.as_slice(), models.as_slice()) {
        ([one], _) | ([], [one]) => Ok(path.join(one)),
        ([], []) => refuse(format!(
            "a folder with no checkpoint in it (no *.index.json, no .{} file); pass a file",
            MODEL_EXTENSIONS.join("/.")
        )),
        ([], many) => refuse(format!(
            "a folder with {} model files ({}) and no *.index.json; pass the file to convert, or several files to merge them",
            many.len(),
            list(many)
        )),
        (many, _) => refuse(format!(
            "a folder with {} indexes ({}); pass the one to convert",
            many.len(),
            list(many)
        )),
    }
}

fn is_model_file(name: &str) -> bool {
    let bare = COMPRESSED
        .iter()
        .find_map(|c| name.strip_suffix(&format!(".{c}")))
        .unwrap_or(name);
    MODEL_EXTENSIONS.iter().any(|ext| {
        bare.strip_suffix(ext)
            .is_some_and(|stem| stem.ends_with('.') && stem.len() > 1)
    })
}

/// The first few names, for a message.
fn list(names: &[&String]) -> String {
    let shown: Vec<&str> = names.iter().take(4).map(|n| n.as_str()).collect();
    match names.len() {
        n if n > 4 => format!("{}, and {} more", shown.join(", "), n - 4),
        _ => shown.join(", "),
    }
}
