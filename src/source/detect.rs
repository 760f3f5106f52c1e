//! Recognising an input by its first bytes, never by its name, and saying
//! what a file that is not the format asked for is instead.
//!
//! Layer: source, above the format table (the formats come from its
//! rows) and below opening an input.

use std::path::Path;

use super::codec::Codec;
use super::format::FormatRow;
use super::table::FORMATS;
use crate::{Error, ErrorKind};

/// What an input's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A format of the table (an .npy array, a zip archive, a safetensors
    /// file, a GGUF file, a PyTorch checkpoint, ...): its row.
    Row(&'static FormatRow),
    /// A compressed wrapper around another input.
    Compressed(Codec),
    /// None of the above.
    Unknown,
}

impl Format {
    /// A safetensors file.
    pub const SAFETENSORS: Format = Format::Row(&super::safetensors::ROW);

    /// What a file of this format is, for a message that says what an
    /// input is instead of what it is not ("an .npz archive").
    pub fn describe(self) -> String {
        match self {
            Format::Row(row) => row.describe().to_string(),
            Format::Compressed(c) => format!("a {}-compressed file", c.name()),
            Format::Unknown => "of an unknown format".to_string(),
        }
    }

    /// Its short name: its row's (`npy`, `zip`, `safetensors`), the
    /// codec's (`gzip`), or `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Row(row) => row.name(),
            Format::Compressed(c) => c.name(),
            Format::Unknown => "unknown",
        }
    }
}

/// The format of the regular file at `path`, by its first bytes; `None`
/// for what is not a regular file (a pipe cannot be read twice).
pub fn detect_file(path: &Path) -> std::io::Result<Option<Format>> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    if !f.metadata()?.is_file() {
        return Ok(None);
    }
    let mut first = Vec::with_capacity(SNIFF_LEN);
    f.take(SNIFF_LEN as u64).read_to_end(&mut first)?;
    Ok(Some(detect(&first)))
}

/// `e`, a failure to read `path` as safetensors, as "`path` is an .npz, not
/// a safetensors file" when its first bytes say it is another format
/// convert reads (an .npz's `PK` reads as a huge header length). I/O
/// errors, and files of no format we know, are left as they are.
pub(crate) fn say_what_it_is(e: Error, path: &Path) -> Error {
    if matches!(e.kind(), ErrorKind::Io(_)) {
        return e;
    }
    if let Some(what) = first_bytes_of(path).and_then(|b| super::download::broken_download(&b)) {
        return Error::new(ErrorKind::BrokenDownload(what));
    }
    let what = match detect_file(path) {
        // A zip is an .npz unless its members are a PyTorch checkpoint's.
        Ok(Some(Format::Row(row))) if *row == super::npz::ROW && is_torch_zip(path) => {
            "a PyTorch checkpoint (zip)".to_string()
        }
        Ok(Some(f @ Format::Compressed(_))) => f.describe(),
        Ok(Some(f @ Format::Row(row))) if !row.refused() && f != Format::SAFETENSORS => {
            f.describe()
        }
        _ => return e,
    };
    // No offset: the whole file is the wrong kind, not a byte of it.
    Error::new(ErrorKind::NotSafetensors { what })
}

/// The first 256 bytes of the regular file at `path` (fewer if shorter):
/// a whole Git LFS pointer.
fn first_bytes_of(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut first = Vec::with_capacity(256);
    f.take(256).read_to_end(&mut first).ok()?;
    Some(first)
}

fn is_torch_zip(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let len = file.metadata().map_or(0, |m| m.len());
    crate::source::pytorch::is_torch_zip(&file, len)
}

/// Bytes [`detect`] wants to see (fewer is fine for a short input).
pub const SNIFF_LEN: usize = 16;

/// Bytes a file's detection reads: enough to see a tar header's `ustar`
/// (a stream is sniffed with [`SNIFF_LEN`] only, so nothing more is
/// decoded before its format is known).
pub(crate) const FILE_SNIFF_LEN: usize = 264;

/// Recognises an input from its first bytes: a codec's magic, else the
/// first row of the format table that knows them.
///
/// ```
/// use safetensors_stream::{source::{Codec, Format}, internals::detect};
///
/// assert_eq!(detect(b"\x93NUMPY\x01\x00").name(), "npy");
/// assert_eq!(detect(b"PK\x03\x04").name(), "zip");
/// assert_eq!(detect(b"GGUF\x03\0\0\0").name(), "gguf");
/// assert_eq!(detect(b"\x1f\x8b\x08"), Format::Compressed(Codec::Gzip));
/// assert_eq!(detect(b"\x08\0\0\0\0\0\0\0{}      "), Format::SAFETENSORS);
/// assert_eq!(detect(b"\0\x01\x02\x03"), Format::Unknown);
/// ```
pub fn detect(first: &[u8]) -> Format {
    if let Some(codec) = Codec::recognise(first) {
        return Format::Compressed(codec);
    }
    FORMATS
        .by_content(first)
        .map_or(Format::Unknown, Format::Row)
}

/// The first bytes as hex, for the unknown-format message.
// Messages use download::first_bytes; this stays for the fuzz targets.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn hex_preview(first: &[u8]) -> String {
    let shown: Vec<String> = first.iter().take(4).map(|b| format!("{b:02x}")).collect();
    if shown.is_empty() {
        "none: the input is empty".to_string()
    } else {
        shown.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    /// Detection as it was before the table (`detect.rs`'s if-chain), by
    /// the format's name.
    /// Rows added after the table, each its own format's.
    const ROWS_SINCE: [&str; 3] = ["onnx", "msgpack", "hdf5"];

    fn detect_before_the_table(first: &[u8]) -> &'static str {
        let starts = |magic: &[u8]| first.starts_with(magic);
        if starts(b"\x93NUMPY") {
            "npy"
        } else if starts(b"PK\x03\x04") || starts(b"PK\x05\x06") {
            "zip"
        } else if starts(b"GGUF") {
            "gguf"
        } else if starts(&[0x1f, 0x8b]) {
            "gzip"
        } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
            "zstd"
        } else if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            "xz"
        } else if starts(b"BZh") && first.get(3).is_some_and(|b| (b'1'..=b'9').contains(b)) {
            "bzip2"
        } else if crate::source::pytorch::legacy::is_legacy(first) {
            "pytorch"
        } else if first.get(257..262) == Some(b"ustar") {
            "tar"
        } else if first.len() >= 9 && {
            let n = u64::from_le_bytes(first[..8].try_into().unwrap());
            let brace = first[8..first.len().min(16)]
                .iter()
                .find(|b| !b.is_ascii_whitespace());
            (2..=crate::header::MAX_HEADER_LEN).contains(&n) && brace == Some(&b'{')
        } {
            "safetensors"
        } else {
            "unknown"
        }
    }

    fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files_under(&path, out);
            } else {
                out.push(path);
            }
        }
    }

    /// Every fixture is recognised as before, from a file's prefix and
    /// from a stream's, and every format is among them.
    #[test]
    fn rows_recognise_the_fixtures_as_before() {
        let mut files = Vec::new();
        files_under(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
            &mut files,
        );
        let mut seen = std::collections::BTreeSet::new();
        for path in &files {
            let bytes = std::fs::read(path).unwrap();
            for len in [FILE_SNIFF_LEN, SNIFF_LEN] {
                let first = &bytes[..bytes.len().min(len)];
                let now = detect(first).name();
                let before = detect_before_the_table(first);
                // Formats added since (ONNX, MessagePack, HDF5) recognise
                // what was unknown; nothing recognised before changes.
                let added = before == "unknown" && ROWS_SINCE.contains(&now);
                assert!(
                    now == before || added,
                    "{}: {now}, was {before}",
                    path.display()
                );
                seen.insert(now);
            }
        }
        for name in [
            "npy",
            "zip",
            "gguf",
            "pytorch",
            "safetensors",
            "gzip",
            "unknown",
        ] {
            assert!(seen.contains(name), "no fixture is {name}: {seen:?}");
        }
    }
}
