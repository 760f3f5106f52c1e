//! The format table: one row per input format ([`FormatRow`]), each
//! defined by its format's module. Recognising an input (by path, by the
//! options, by its first bytes) and opening it, from a file or a stream,
//! read this list and nothing else: a new format is its module and one
//! line here.
//!
//! Layer: source, above every format (it lists their rows) and below
//! detection and opening ([`super::detect`], [`super::input`]).

use std::path::Path;

use super::format::{ByPath, FormatRow, Wrap};
use super::{gguf, npy, npz, pytorch, quantized, raw, safetensors, SourceOptions};

/// A list of format rows, tried in order.
#[derive(Clone, Copy)]
pub(crate) struct Table(pub(crate) &'static [&'static FormatRow]);

/// Every input format. Order matters where first bytes could match two
/// rows: each is tried in turn, after the compression codecs
/// (`super::codec`), whose magics no row shares.
pub(crate) const FORMATS: Table = Table(&[
    &npy::ROW,
    &npz::ROW,
    &gguf::ROW,
    &pytorch::row::LEGACY,
    &pytorch::row::TAR,
    &safetensors::ROW,
    &raw::ROW,
]);

/// Formats inside other formats' tensors, applied to every set of inputs
/// once they are open: quantized safetensors weights.
pub(crate) const WRAPS: &[Wrap] = &[quantized::wrap];

impl Table {
    /// The rows.
    pub(crate) fn rows(self) -> impl Iterator<Item = &'static FormatRow> {
        self.0.iter().copied()
    }

    /// The first row whose magic `first` has.
    pub(crate) fn by_content(self, first: &[u8]) -> Option<&'static FormatRow> {
        self.rows().find(|r| r.magic.is_some_and(|m| m(first)))
    }

    /// The row that recognises `path` by itself (an index JSON), if any.
    pub(crate) fn by_path(self, path: &Path) -> Option<&'static ByPath> {
        let by_path = self.rows().filter_map(|r| r.path.as_ref());
        by_path.into_iter().find(|p| (p.recognise)(path))
    }

    /// The row the options ask every input to be read as (a raw dump).
    pub(crate) fn asked(self, options: &SourceOptions) -> Option<&'static FormatRow> {
        self.rows().find(|r| r.asked.is_some_and(|a| a(options)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every format the enum of formats named before the table, once each
    /// (and the raw dump, chosen by option), by the words its messages use.
    #[test]
    fn every_format_has_one_row() {
        let rows: Vec<(&str, &str)> = FORMATS.rows().map(|r| (r.name(), r.describe())).collect();
        assert_eq!(
            rows,
            [
                ("npy", "an .npy array"),
                ("zip", "an .npz (zip) archive"),
                ("gguf", "a GGUF file"),
                ("pytorch", "a PyTorch checkpoint (legacy format)"),
                ("tar", "a tar archive (an old PyTorch format)"),
                ("safetensors", "a safetensors file"),
                ("raw", "a raw dump"),
            ]
        );
        let asked: Vec<&str> = FORMATS
            .rows()
            .filter(|r| r.asked.is_some())
            .map(|r| r.name)
            .collect();
        assert_eq!(asked, ["raw"]);
        let by_path: Vec<&str> = FORMATS
            .rows()
            .filter(|r| r.path.is_some())
            .map(|r| r.name)
            .collect();
        assert_eq!(by_path, ["pytorch", "safetensors"]);
    }
}
