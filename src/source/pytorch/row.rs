//! PyTorch checkpoints' rows in the format table: the legacy format (and
//! sharded checkpoints by their index), and PyTorch's oldest, refused, tar
//! format. Zip checkpoints share the zip row with .npz, which hands them
//! to [`open_checkpoint`].

use super::{is_index_path, legacy, PyTorchSource};
use crate::source::format::{ByPath, FileInput, FormatRow, Notice, Stream};
use crate::source::Source;
use crate::{Error, ErrorKind, Note, PyTorchError, Result, Warning};

crate::setters::options! {
    /// How PyTorch checkpoints are read.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TorchOptions {
        /// Write one tensor of each group of identical views and record the
        /// dropped names in the metadata (`--dedupe-tied`): the first selected
        /// name of each group in the checkpoint's order is kept, after filters
        /// and renames (see `plan::ties` for the rule's source).
        pub dedupe_tied: bool = false,
        /// Convert only the value under this key (dotted for nested dicts),
        /// named without it (`--pt-root`).
        pub root: Option<String> = None,
        /// Write tensors whose views reach more bytes than their storage holds
        /// (stride-0 or overlapping expansions), and more than 16x the
        /// checkpoint's storage bytes in all (`--allow-expanded-views`);
        /// refused by default, as a few bytes can otherwise plan terabytes.
        pub allow_expanded_views: bool = false,
    }
}

/// Why an archive (an .npz, a PyTorch checkpoint) from a stream is spooled.
pub(crate) const ARCHIVE_SPOOLED: &str =
    "an archive (.npz or PyTorch checkpoint) needs random access";

/// A pickle holding PyTorch's legacy magic number (`torch.save` before
/// 1.6), or a `pytorch_model.bin.index.json` and its shards.
pub(crate) const LEGACY: FormatRow = FormatRow {
    magic: Some(legacy::is_legacy),
    path: Some(ByPath {
        recognise: is_index_path,
        open: |p| {
            let mut src = PyTorchSource::open_index(p.path, p.options)?;
            src.origin = p.origin;
            Ok(told_skipped(src, p.notice))
        },
    }),
    ..FormatRow::new(
        "pytorch",
        "a PyTorch checkpoint (legacy format)",
        open_checkpoint,
        Stream::Spool(ARCHIVE_SPOOLED),
    )
};

/// A tar archive (`ustar` at byte 257): recognised only to be refused.
pub(crate) const TAR: FormatRow = FormatRow {
    magic: Some(|first| first.get(257..262) == Some(b"ustar")),
    ..FormatRow::new(
        "tar",
        "a tar archive (an old PyTorch format)",
        |o| Err(tar_refused().with_input(o.input)),
        Stream::Refused(tar_refused),
    )
};

fn tar_refused() -> Error {
    Error::new(ErrorKind::PyTorch(PyTorchError::TarArchive))
}

/// Opens one checkpoint file (zip or legacy).
pub(crate) fn open_checkpoint(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    let mut src = PyTorchSource::open(o.file, o.len, o.input, o.options)?;
    src.origin = o.origin;
    Ok(told_skipped(src, o.notice))
}

/// Keys under which training checkpoints keep a model's weights, in the
/// order one is suggested for `--pt-root` when several are there.
const MODEL_KEYS: [&str; 8] = [
    "model",
    "model_state_dict",
    "module",
    "state_dict",
    "net",
    "network",
    "ema",
    "model_ema",
];

/// Says how many non-tensor values a checkpoint held that were skipped,
/// and which keys hold its tensors when none is at the top level.
fn told_skipped(src: PyTorchSource, notice: Notice<'_>) -> Box<dyn Source> {
    let keys = src.under_keys();
    if let Some((first, _)) = keys.first() {
        let model = MODEL_KEYS
            .iter()
            .find_map(|m| keys.iter().find(|(k, _)| k == m))
            .map_or(first, |(k, _)| k);
        notice(&Note::Warning(Warning::TensorsUnderKeys {
            input: src.input_name().to_string(),
            keys: keys.to_vec(),
            suggested: model.clone(),
        }));
    }
    if src.skipped() > 0 {
        // The first few paths; the JSON report's notes carry the same line.
        notice(&Note::Warning(Warning::SkippedValues {
            input: src.input_name().to_string(),
            count: src.skipped(),
            paths: src.skipped_paths().iter().take(8).cloned().collect(),
        }));
    }
    Box::new(src)
}
