//! Recognising an input by its first bytes, never by its name, and saying
//! what a file that is not the format asked for is instead.
//!
//! Layer: source. May import the PyTorch source's recognisers, the header
//! layer and below.

use std::path::Path;

use crate::{Error, ErrorKind};

/// What an input's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `\x93NUMPY`.
    Npy,
    /// A zip archive (`PK\x03\x04`, or `PK\x05\x06` when empty): an .npz.
    Zip,
    /// An 8-byte length within the limit, then `{`.
    Safetensors,
    /// A pickle holding PyTorch's legacy magic number: `torch.save` before 1.6.
    TorchLegacy,
    /// A tar archive (`ustar` at byte 257): PyTorch's oldest format, refused.
    Tar,
    /// `GGUF`: a llama.cpp model.
    Gguf,
    /// HDF5's signature: a Keras weights file.
    Hdf5,
    /// A protobuf `ModelProto`: an ONNX model.
    Onnx,
    /// A MessagePack map: a Flax checkpoint.
    Msgpack,
    /// A compressed wrapper around another input.
    Compressed(Codec),
    /// None of the above.
    Unknown,
}

impl Format {
    /// What a file of this format is, for a message that says what an
    /// input is instead of what it is not ("an .npz archive").
    pub fn describe(self) -> String {
        match self {
            Format::Npy => "an .npy array".to_string(),
            Format::Zip => "an .npz (zip) archive".to_string(),
            Format::Safetensors => "a safetensors file".to_string(),
            Format::Gguf => "a GGUF file".to_string(),
            Format::Hdf5 => "an HDF5 file".to_string(),
            Format::Onnx => "an ONNX model".to_string(),
            Format::Msgpack => "a Flax MessagePack file".to_string(),
            Format::Compressed(c) => format!("a {}-compressed file", c.name()),
            Format::TorchLegacy => "a PyTorch checkpoint (legacy format)".to_string(),
            Format::Tar => "a tar archive (an old PyTorch format)".to_string(),
            Format::Unknown => "of an unknown format".to_string(),
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
    let what = match detect_file(path) {
        // A zip is an .npz unless its members are a PyTorch checkpoint's.
        Ok(Some(Format::Zip)) if is_torch_zip(path) => "a PyTorch checkpoint (zip)".to_string(),
        Ok(Some(
            f @ (Format::Npy
            | Format::Zip
            | Format::Gguf
            | Format::Hdf5
            | Format::Onnx
            | Format::Msgpack
            | Format::Compressed(_)
            | Format::TorchLegacy),
        )) => f.describe(),
        _ => return e,
    };
    Error::new(ErrorKind::NotSafetensors { what }).at_offset(0)
}

fn is_torch_zip(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let len = file.metadata().map_or(0, |m| m.len());
    crate::source::pytorch::is_torch_zip(&file, len)
}

/// The compressions we unwrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// `1f 8b`.
    Gzip,
    /// `28 b5 2f fd`.
    Zstd,
    /// `fd 37 7a 58 5a 00`.
    Xz,
    /// `BZh1`..`BZh9`.
    Bzip2,
}

impl Codec {
    /// The file extension that names it.
    pub fn extension(self) -> &'static str {
        match self {
            Codec::Gzip => "gz",
            Codec::Zstd => "zst",
            Codec::Xz => "xz",
            Codec::Bzip2 => "bz2",
        }
    }

    /// The codec's name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Zstd => "zstd",
            Codec::Xz => "xz",
            Codec::Bzip2 => "bzip2",
        }
    }
}

/// Bytes [`detect`] wants to see (fewer is fine for a short input).
pub const SNIFF_LEN: usize = 16;

/// Bytes a file's detection reads: enough to see a tar header's `ustar`
/// (a stream is sniffed with [`SNIFF_LEN`] only, so nothing more is
/// decoded before its format is known).
pub(crate) const FILE_SNIFF_LEN: usize = 264;

/// Recognises an input from its first bytes.
///
/// ```
/// use safetensors_stream::{source::{Codec, Format}, internals::detect};
///
/// assert_eq!(detect(b"\x93NUMPY\x01\x00"), Format::Npy);
/// assert_eq!(detect(b"PK\x03\x04"), Format::Zip);
/// assert_eq!(detect(b"GGUF\x03\0\0\0"), Format::Gguf);
/// assert_eq!(detect(b"\x1f\x8b\x08"), Format::Compressed(Codec::Gzip));
/// assert_eq!(detect(b"\x08\0\0\0\0\0\0\0{}      "), Format::Safetensors);
/// assert_eq!(detect(b"\0\x01\x02\x03"), Format::Unknown);
/// ```
pub fn detect(first: &[u8]) -> Format {
    let starts = |magic: &[u8]| first.starts_with(magic);
    if starts(b"\x93NUMPY") {
        Format::Npy
    } else if starts(b"PK\x03\x04") || starts(b"PK\x05\x06") {
        Format::Zip
    } else if starts(b"GGUF") {
        Format::Gguf
    } else if crate::source::hdf5::looks_like_hdf5(first) {
        Format::Hdf5
    } else if starts(&[0x1f, 0x8b]) {
        Format::Compressed(Codec::Gzip)
    } else if starts(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Format::Compressed(Codec::Zstd)
    } else if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Format::Compressed(Codec::Xz)
    } else if starts(b"BZh") && first.get(3).is_some_and(|b| (b'1'..=b'9').contains(b)) {
        Format::Compressed(Codec::Bzip2)
    } else if crate::source::pytorch::legacy::is_legacy(first) {
        Format::TorchLegacy
    } else if first.get(257..262) == Some(b"ustar") {
        Format::Tar
    } else if looks_like_safetensors(first) {
        Format::Safetensors
    } else if crate::source::onnx::looks_like_onnx(first) {
        Format::Onnx
    } else if crate::source::msgpack::looks_like_msgpack(first) {
        Format::Msgpack
    } else {
        Format::Unknown
    }
}

fn looks_like_safetensors(first: &[u8]) -> bool {
    let Some(prefix) = first.get(..8) else {
        return false;
    };
    let n = u64::from_le_bytes(prefix.try_into().expect("8 bytes"));
    // The first 16 bytes decide, as they always have.
    let json = &first[8..first.len().min(16)];
    let brace = json.iter().find(|b| !b.is_ascii_whitespace());
    (2..=crate::header::MAX_HEADER_LEN).contains(&n) && brace == Some(&b'{')
}

/// The first bytes as hex, for the unknown-format message.
pub fn hex_preview(first: &[u8]) -> String {
    let shown: Vec<String> = first.iter().take(4).map(|b| format!("{b:02x}")).collect();
    if shown.is_empty() {
        "none: the input is empty".to_string()
    } else {
        shown.join(" ")
    }
}
