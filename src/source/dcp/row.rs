//! The distributed checkpoint's row in the format table: a folder,
//! recognised by its path alone (it holds `.metadata`, or safetensors
//! files whose headers place each rank's tensors, as torch's
//! `HuggingFaceStorageWriter` writes them), opened as a [`DcpSource`].
//! No file or stream is one: the row has no magic.

use std::path::Path;

use super::{hf, open_folder, METADATA_FILE};
use crate::source::format::{ByPath, FormatRow, Stream};
use crate::{Error, ErrorKind};

/// A PyTorch distributed checkpoint's folder.
pub(crate) const ROW: FormatRow = FormatRow {
    path: Some(ByPath {
        recognise: is_checkpoint,
        open: |p| open_folder(p.path, p.options, p.notice),
    }),
    ..FormatRow::new(
        "dcp",
        "a PyTorch distributed checkpoint (a folder)",
        |o| Err(not_a_file().with_input(o.input)),
        Stream::Refused(not_a_file),
    )
};

/// True if `path` is a distributed checkpoint's folder: it holds
/// `.metadata` (and its `.distcp` files), or its first `.safetensors` file
/// (by name) has `DCP_SHARDING_INFO` in its metadata.
pub(crate) fn is_checkpoint(path: &Path) -> bool {
    path.is_dir() && (path.join(METADATA_FILE).is_file() || hf::is_checkpoint(path))
}

fn not_a_file() -> Error {
    let what = "a distributed checkpoint is a folder (of .metadata and .distcp files), not a file";
    Error::new(ErrorKind::Usage(what.into()))
}
