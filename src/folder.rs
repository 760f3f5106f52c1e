//! A folder given as input: a checkpoint folder as downloaded (`model/`)
//! stands for its one checkpoint. Its `*.index.json` if it holds exactly
//! one; else its single model file; anything else is refused with a
//! message saying what to pass. A folder holding the same checkpoint in
//! safetensors and in another form (a Hub repo's `model.safetensors` and
//! `pytorch_model.bin`) stands for the safetensors, as transformers'
//! `from_pretrained` chooses, the others named in a notice.

use std::path::{Path, PathBuf};

use crate::{Error, ErrorKind, Result};

/// File name endings of model files a folder may hold (compressed or not).
const MODEL_EXTENSIONS: &[&str] = &["safetensors", "npz", "npy", "bin", "pt", "pth"];
const COMPRESSED: &[&str] = &["gz", "zst", "zstd", "xz", "bz2"];

/// What a folder given as input stands for.
#[derive(Debug)]
pub struct Resolved {
    /// The file read: the input itself when it is no folder.
    pub path: PathBuf,
    /// Checkpoint files of the folder in another form than the one read
    /// (`pytorch_model.bin` beside `model.safetensors`), left out because
    /// safetensors is preferred; for a notice.
    pub passed_over: Vec<String>,
    /// The file at `path` as the resolution opened it and found it a
    /// regular file; `None` when `path` is the input itself. Reading this
    /// handle, not `path` again, reads the file checked: a file swapped in
    /// after the check is never read.
    pub file: Option<std::fs::File>,
}

/// The file a folder stands for (the path itself when it is no folder),
/// and which files in another form it passed over (`source::resolve_folder`
/// asks the format table first).
pub(crate) fn resolve_folder(path: &Path) -> Result<Resolved> {
    if !path.is_dir() {
        return Ok(Resolved {
            path: path.to_path_buf(),
            passed_over: Vec::new(),
            file: None,
        });
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
    // Safetensors first, as transformers loads it: the PyTorch form of the
    // same checkpoint is passed over (and said), not counted as a choice.
    // Other files (an .npz beside) still make the folder ambiguous.
    let (names, passed_over): (Vec<String>, Vec<String>) =
        match names.iter().any(|n| is_safetensors(n)) {
            true => names.into_iter().partition(|n| !is_pytorch(n)),
            false => (names, Vec::new()),
        };
    let indexes: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".index.json"))
        .collect();
    let models: Vec<&String> = names.iter().filter(|n| is_model_file(n)).collect();
    let refuse = |msg: String| Err(Error::new(ErrorKind::FolderInput(msg)).with_input(&shown));
    let chosen = match (indexes.as_slice(), models.as_slice()) {
        ([one], _) | ([], [one]) => path.join(one),
        ([], []) => {
            return refuse(format!(
                "a folder with no checkpoint in it (no *.index.json, no .{} file); pass a file",
                MODEL_EXTENSIONS.join("/.")
            ))
        }
        ([], many) => {
            return refuse(format!(
                "a folder with {} model files ({}) and no *.index.json; pass the file to convert, or several files to merge them",
                many.len(),
                list(many)
            ))
        }
        (many, _) => {
            return refuse(format!(
                "a folder with {} indexes ({}); pass the one to convert",
                many.len(),
                list(many)
            ))
        }
    };
    let file = open_chosen(&chosen).map_err(|e| e.with_input(&shown))?;
    Ok(Resolved {
        path: chosen,
        passed_over,
        file: Some(file),
    })
}

/// Opens the file a folder stands for, which must be a regular file (links
/// followed): the user named the folder, not a FIFO in it, whose open would
/// wait for a writer forever, nor a device (`/dev/zero` never ends). Its
/// type is the open handle's ([`crate::io_util::open_if_regular`]), and the
/// source reads that handle ([`Resolved::file`]).
fn open_chosen(chosen: &Path) -> Result<std::fs::File> {
    match crate::io_util::open_if_regular(chosen).map_err(Error::io)? {
        Ok(file) => Ok(file),
        Err(what) => Err(Error::new(ErrorKind::FolderInput(format!(
            "{} is {what}, not a regular file; pass a file",
            chosen.display()
        )))),
    }
}

/// A safetensors file or index (compressed or not).
fn is_safetensors(name: &str) -> bool {
    let bare = COMPRESSED
        .iter()
        .find_map(|c| name.strip_suffix(&format!(".{c}")))
        .unwrap_or(name);
    bare.ends_with(".safetensors") || bare.ends_with(".safetensors.index.json")
}

/// A PyTorch checkpoint file or index (`pytorch_model.bin`, `.pt`, `.pth`,
/// `pytorch_model.bin.index.json`), compressed or not.
fn is_pytorch(name: &str) -> bool {
    let bare = COMPRESSED
        .iter()
        .find_map(|c| name.strip_suffix(&format!(".{c}")))
        .unwrap_or(name);
    let bare = bare.strip_suffix(".index.json").unwrap_or(bare);
    [".bin", ".pt", ".pth"].iter().any(|e| bare.ends_with(e))
}

/// The notice for a folder that stood for its safetensors form.
pub fn passed_over_notice(folder: &Path, r: &Resolved) -> Option<String> {
    let file = r.path.file_name()?.to_string_lossy();
    let others: Vec<&String> = r.passed_over.iter().collect();
    (!others.is_empty()).then(|| {
        format!(
            "{}: reading {file}, the safetensors form, as transformers does; passing over {}",
            folder.display(),
            list(&others)
        )
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_device_a_folder_would_stand_for_is_refused_without_opening_it() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model.safetensors");
        let fifo = rustix::fs::FileType::Fifo;
        let mode = rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR;
        rustix::fs::mknodat(rustix::fs::CWD, &model, fifo, mode, 0).unwrap();
        let e = resolve_folder(dir.path()).unwrap_err();
        let refused = |e: &Error| matches!(e.kind(), ErrorKind::FolderInput(m) if m.contains("not a regular file"));
        assert!(refused(&e), "{e}");
        // The type is the handle's: a FIFO swapped in before the open is
        // refused, not waited on.
        let e = open_chosen(&model).unwrap_err();
        assert!(
            e.to_string().contains("is a FIFO, not a regular file"),
            "{e}"
        );
        std::fs::remove_file(&model).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &model).unwrap();
        let e = resolve_folder(dir.path()).unwrap_err();
        assert!(refused(&e), "{e}");
        // A link to a regular file (a Hub cache's snapshot to its blob) is followed.
        let blobs = tempfile::tempdir().unwrap();
        std::fs::write(blobs.path().join("blob"), b"").unwrap();
        std::fs::remove_file(&model).unwrap();
        std::os::unix::fs::symlink(blobs.path().join("blob"), &model).unwrap();
        assert_eq!(resolve_folder(dir.path()).unwrap().path, model);
    }
}
