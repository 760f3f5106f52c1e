//! The bounds a conversion puts on what an input may make it build, as one
//! value the caller sets: [`Limits`].
//!
//! Every limit has a default that admits every valid input we know of and
//! refuses what would take memory (or output) out of proportion to the
//! input. A service converting uploads may lower them; a user with a
//! legitimate giant may raise the ones that are *ours* — never the format's
//! own. A refusal by a limit is an
//! [`ErrorKind::Limit`](crate::ErrorKind::Limit) naming the limit, its value
//! and how to raise it (`--limit NAME=VALUE` on the command line,
//! `limits={"NAME": VALUE}` in Python, [`Limits::set`] in Rust).
//!
//! The limits, their defaults and which are safe to raise: the README,
//! "Safety and guarantees", and [`Limit`]'s variants; `--help` lists them.
//!
//! Raising a memory limit raises what a hostile input can make the process
//! hold by about as much; raising an expansion limit lets a few stored
//! bytes become that many written. Bounds that are the formats' own or
//! that protect the parsers' correctness are not limits and cannot be
//! changed (the README, "Safety and guarantees", lists them).
//!
//! ```
//! use safetensors_stream::limits::{Limit, Limits};
//!
//! let mut limits = Limits::default();
//! limits.set_text("pickle-budget=512MiB")?;
//! assert_eq!(limits.get(Limit::PickleBudget), 512 << 20);
//! // The format's header limit can be lowered, never raised.
//! assert!(limits.set(Limit::HeaderBytes, 1 << 20).is_ok());
//! assert!(limits.set(Limit::HeaderBytes, 200_000_000).is_err());
//! # Ok::<(), safetensors_stream::limits::BadLimit>(())
//! ```

use std::fmt;

use crate::units::parse_size;

/// The safetensors format's own limit on its header, which no option
/// raises (the reference implementation refuses a longer one).
const FORMAT_HEADER_BYTES: u64 = 100_000_000;

/// One limit, by name. [`Limit::ALL`] lists them in `--help`'s order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    /// A safetensors header's length, in bytes (at most the format's
    /// 100,000,000).
    HeaderBytes,
    /// A PyTorch checkpoint's `data.pkl` once inflated, in bytes.
    PickleBytes,
    /// Bytes of values a pickle may build beyond twice its own length.
    PickleBudget,
    /// How many times its storage's bytes a PyTorch view (and all of a
    /// checkpoint's tensors, their storages) may write.
    ExpansionRatio,
    /// Bytes a PyTorch view may write whatever its ratio.
    ExpandedViewBytes,
    /// Bytes a checkpoint's tensors may add up to whatever their ratio.
    ExpandedFileBytes,
    /// A distributed checkpoint's `.metadata`, in bytes: read whole, then
    /// unpickled (about a million chunks at the default).
    DcpMetadataBytes,
    /// The window (zstd) or dictionary (xz) a compressed input's decoder
    /// may fill, in bytes; zstd's is a power of two (the value is rounded
    /// down to one).
    DecoderWindow,
    /// One GGUF metadata string value, in bytes.
    GgufStringBytes,
    /// A sharded checkpoint's `*.index.json`, or a raw manifest, in bytes
    /// (parsed as it is read: at most this plus one byte is read).
    IndexBytes,
    /// One row of an HDF5 dataset's chunks, in bytes: held while the
    /// dataset is streamed in row-major order.
    Hdf5ChunkRowBytes,
    /// Tensors one input may list, whatever its format.
    TensorCount,
    /// Bytes a compressed input or a deflated zip member may inflate to
    /// per compressed byte, once past its first
    /// [`RATIO_ALLOWANCE`] bytes (a small tensor of zeros is fine).
    DecompressionRatio,
}

/// Inflated bytes any stream or member may reach whatever its ratio:
/// the `decompression-ratio` limit counts beyond them.
pub const RATIO_ALLOWANCE: u64 = 64 << 20;

/// A limit's name, report kind, `--help` words, default and unit.
type Row = (&'static str, &'static str, &'static str, u64, Unit);

/// Every limit's [`Row`], in the enum's order (which is [`Limit::ALL`]'s).
/// The `tensor-count` default is above what a 100,000,000-byte safetensors
/// header can list (about 1.5 million one-dimensional tensors); deflate
/// cannot pass 1032 to 1, so only a zstd, xz or bzip2 stream of mostly
/// zeros nears the `decompression-ratio` default.
#[rustfmt::skip]
const ROWS: [Row; 13] = [
    ("header-bytes", "header_bytes", "a safetensors header's bytes (the format's limit: lower only)", FORMAT_HEADER_BYTES, Unit::Bytes),
    ("pickle-bytes", "pickle_bytes", "a PyTorch checkpoint's data.pkl, inflated", 128 << 20, Unit::Bytes),
    ("pickle-budget", "pickle_budget", "bytes of values a pickle may build beyond 2x its size", 48 << 20, Unit::Bytes),
    ("expansion-ratio", "expansion_ratio", "bytes a PyTorch view may write per byte of its storage", 16, Unit::Count),
    ("expanded-view-bytes", "expanded_view_bytes", "bytes a PyTorch view may write whatever its ratio", 4 << 20, Unit::Bytes),
    ("expanded-file-bytes", "expanded_file_bytes", "bytes a checkpoint's tensors may write whatever their ratio", 64 << 20, Unit::Bytes),
    ("dcp-metadata-bytes", "dcp_metadata_bytes", "a distributed checkpoint's .metadata, read whole", 512 << 20, Unit::Bytes),
    ("decoder-window", "decoder_window", "the window a zstd or xz decoder may hold", 128 << 20, Unit::Bytes),
    ("gguf-string-bytes", "gguf_string_bytes", "one GGUF metadata string's bytes", 16 << 20, Unit::Bytes),
    ("index-bytes", "index_bytes", "a sharded checkpoint's index.json or a raw manifest", FORMAT_HEADER_BYTES, Unit::Bytes),
    ("hdf5-chunk-row-bytes", "hdf5_chunk_row_bytes", "one row of an HDF5 dataset's chunks, held while streamed", 64 << 20, Unit::Bytes),
    ("tensor-count", "tensor_count", "tensors one input may list", 1 << 24, Unit::Count),
    ("decompression-ratio", "decompression_ratio", "inflated bytes per compressed byte (streams, zip members) past 64 MiB", 10_000, Unit::Count),
];

/// How a limit's value is written and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Bytes,
    Count,
}

impl Limit {
    /// Every limit, in `--help`'s order.
    pub const ALL: [Limit; 13] = [
        Limit::HeaderBytes,
        Limit::PickleBytes,
        Limit::PickleBudget,
        Limit::ExpansionRatio,
        Limit::ExpandedViewBytes,
        Limit::ExpandedFileBytes,
        Limit::DcpMetadataBytes,
        Limit::DecoderWindow,
        Limit::GgufStringBytes,
        Limit::IndexBytes,
        Limit::Hdf5ChunkRowBytes,
        Limit::TensorCount,
        Limit::DecompressionRatio,
    ];

    fn row(self) -> &'static Row {
        &ROWS[self as usize]
    }

    /// Its name, as `--limit` and Python's `limits=` take it.
    pub fn name(self) -> &'static str {
        self.row().0
    }

    /// The kind of its refusals in reports: its name in snake case.
    pub fn kind(self) -> &'static str {
        self.row().1
    }

    /// What it bounds, in a few words (for `--help`).
    pub fn about(self) -> &'static str {
        self.row().2
    }

    /// Its default value.
    pub const fn default_value(self) -> u64 {
        ROWS[self as usize].3
    }

    /// The most it may be set to: the format's own limit for a hard cap.
    pub fn ceiling(self) -> u64 {
        match self {
            Limit::HeaderBytes => FORMAT_HEADER_BYTES,
            _ => u64::MAX,
        }
    }

    fn unit(self) -> Unit {
        self.row().4
    }

    /// The limit named `name` (`pickle-budget`; Python's `pickle_budget`
    /// too).
    pub fn from_name(name: &str) -> Option<Limit> {
        let name = name.trim().replace('_', "-");
        Limit::ALL.into_iter().find(|l| l.name() == name)
    }

    /// How to raise it past `value`, in the CLI's words (Python's caller
    /// reads `limits={"NAME": "VALUE"}`): `None` when `value` is already
    /// its ceiling.
    pub fn raise_hint(self, value: u64) -> Option<String> {
        if value >= self.ceiling() {
            return None;
        }
        let more = value.saturating_mul(2).max(1).min(self.ceiling());
        Some(format!("--limit {}={}", self.name(), self.show(more)))
    }

    /// `value` as `--limit` reads it back: bytes in the largest binary
    /// unit that divides them (`64MiB`), counts as numbers.
    pub fn show(self, value: u64) -> String {
        if self.unit() == Unit::Count {
            return value.to_string();
        }
        for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if value != 0 && value % (1u64 << shift) == 0 {
                return format!("{}{unit}", value >> shift);
            }
        }
        value.to_string()
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit that cannot be set as asked: an unknown name, a value that does
/// not parse, or one above the limit's ceiling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadLimit(String);

/// Every limit's value. Start from the default (today's bounds) and set
/// what differs, by [`Limit`] or by `NAME=VALUE` text.
///
/// ```
/// use safetensors_stream::limits::{Limit, Limits};
/// use safetensors_stream::{ConvertOptions, SourceOptions};
///
/// let limits = Limits::default()
///     .with(Limit::PickleBytes, 1 << 30)?
///     .with(Limit::ExpandedViewBytes, 0)?;
/// let options = ConvertOptions::default().source(SourceOptions::default().limits(limits));
/// assert_eq!(options.source.limits.get(Limit::PickleBytes), 1 << 30);
/// # Ok::<(), safetensors_stream::limits::BadLimit>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    values: [u64; Limit::ALL.len()],
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

impl Limits {
    /// Every limit at its default, as a constant.
    pub const DEFAULT: Limits = {
        let mut values = [0; Limit::ALL.len()];
        let mut i = 0;
        while i < values.len() {
            values[i] = ROWS[i].3;
            i += 1;
        }
        Limits { values }
    };

    /// The value of `limit`.
    pub fn get(&self, limit: Limit) -> u64 {
        self.values[limit as usize]
    }

    /// Sets `limit` to `value`; refused above the limit's
    /// [ceiling](Limit::ceiling).
    pub fn set(&mut self, limit: Limit, value: u64) -> Result<(), BadLimit> {
        if value > limit.ceiling() {
            return Err(BadLimit(format!(
                "--limit {}={value}: {} is the format's own limit and cannot be raised (at most {})",
                limit.name(),
                limit.name(),
                limit.ceiling()
            )));
        }
        self.values[limit as usize] = value;
        Ok(())
    }

    /// [`set`](Self::set), as a builder.
    pub fn with(mut self, limit: Limit, value: u64) -> Result<Self, BadLimit> {
        self.set(limit, value)?;
        Ok(self)
    }

    /// Sets the limit `name` to `value` (a size such as `64MiB` or `100MB`
    /// for a limit in bytes, a number for a ratio).
    pub fn set_named(&mut self, name: &str, value: &str) -> Result<(), BadLimit> {
        let Some(limit) = Limit::from_name(name) else {
            let names: Vec<&str> = Limit::ALL.iter().map(|l| l.name()).collect();
            return Err(BadLimit(format!(
                "--limit {name}: no such limit; the limits are {}",
                names.join(", ")
            )));
        };
        let parsed = match limit.unit() {
            Unit::Bytes => parse_size(value).ok(),
            Unit::Count => value.trim().parse::<u64>().ok(),
        };
        let what = match limit.unit() {
            Unit::Bytes => "a size (4096, 64MiB, 100MB)",
            Unit::Count => "a whole number",
        };
        let value = parsed.ok_or_else(|| {
            BadLimit(format!("--limit {}={value}: expected {what}", limit.name()))
        })?;
        self.set(limit, value)
    }

    /// Sets one limit from `NAME=VALUE` text, as `--limit` takes it.
    pub fn set_text(&mut self, text: &str) -> Result<(), BadLimit> {
        match text.split_once('=') {
            Some((name, value)) => self.set_named(name, value),
            None => Err(BadLimit(format!(
                "--limit {text}: expected NAME=VALUE (pickle-budget=512MiB)"
            ))),
        }
    }

    /// The limits' names, defaults and what each bounds, one per line (for
    /// `--help`).
    pub fn help() -> String {
        Limit::ALL
            .iter()
            .map(|l| format!("{}={}: {}", l.name(), l.show(l.default_value()), l.about()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The refusal of something that needs `needed` where `limit` allows
    /// less; `what` says what it is ("data.pkl is 200000000 bytes").
    pub fn refuse(&self, limit: Limit, what: impl Into<String>) -> crate::Error {
        crate::Error::new(crate::ErrorKind::Limit(crate::error::LimitExceeded {
            limit: limit.name(),
            kind: limit.kind(),
            value: self.get(limit),
            what: what.into(),
            raise: limit.raise_hint(self.get(limit)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_sizes_take_units() {
        let mut l = Limits::default();
        for (i, limit) in Limit::ALL.into_iter().enumerate() {
            assert_eq!(limit as usize, i, "ALL is in the enum's order, as ROWS is");
            assert_eq!(Limit::from_name(limit.name()), Some(limit));
            assert_eq!(Limit::from_name(limit.kind()), Some(limit));
            let shown = limit.show(limit.default_value());
            l.set_named(limit.name(), &shown).unwrap();
            assert_eq!(l.get(limit), limit.default_value(), "{limit}={shown}");
        }
        l.set_text("pickle_budget=100MB").unwrap();
        assert_eq!(l.get(Limit::PickleBudget), 100_000_000);
        l.set_text("expansion-ratio=3").unwrap();
        assert_eq!(l.get(Limit::ExpansionRatio), 3);
        assert!(l.set_text("expansion-ratio=3MiB").is_err());
        assert!(l
            .set_text("nonsense=3")
            .unwrap_err()
            .0
            .contains("pickle-budget"));
        assert!(l.set_text("pickle-budget").is_err());
    }

    #[test]
    fn the_format_header_limit_is_a_ceiling() {
        let mut l = Limits::default();
        assert!(l.set(Limit::HeaderBytes, 1000).is_ok());
        let e = l.set_text("header-bytes=200MB").unwrap_err();
        assert!(e.0.contains("cannot be raised"), "{e}");
        assert_eq!(Limit::HeaderBytes.raise_hint(FORMAT_HEADER_BYTES), None);
        assert_eq!(
            Limit::HeaderBytes.raise_hint(1000).as_deref(),
            Some("--limit header-bytes=2000")
        );
        assert_eq!(
            Limit::PickleBudget.raise_hint(48 << 20).as_deref(),
            Some("--limit pickle-budget=96MiB")
        );
    }
}
