//! ONNX models (`model.onnx`) as a source of their initializers: the
//! graph's weights, named as the graph names them.
//!
//! The reader. A `ModelProto` is protobuf, and may be gigabytes (weights
//! inline in `raw_data` up to protobuf's 2 GiB) or a small graph whose
//! weights are in files beside it. Decoding it with a protobuf library
//! (prost, or the onnx-protobuf crates generated with it) means holding
//! the whole message and every node of the graph in memory. We walk the
//! wire format in place instead (`wire`: varints, tags and lengths,
//! each checked against its message before anything is read or allocated)
//! and descend only model -> `graph` -> `initializer`; everything else is
//! stepped over by its length. The few fields read are those of
//! `onnx.proto` (TensorProto: `dims` 1, `data_type` 2, `segment` 3, the
//! typed fields 4/5/7/10/11, `name` 8, `raw_data` 9, `external_data` 13,
//! `data_location` 14). No dependency is needed for that much protobuf.
//!
//! Each initializer's bytes are then served from the file: `raw_data` and
//! external data as a byte range (the copy engine's positional and
//! in-kernel paths take it), a typed field decoded as it is read
//! (`typed`). External files must lie inside the model's folder
//! (`external`). Sparse initializers, and tensors held in nodes'
//! attributes (`Constant`), are not initializers and are not read.
//!
//! Recognised by content: a protobuf whose first field is `ir_version`
//! (field 1, a varint) followed by another `ModelProto` field
//! ([`looks_like_onnx`]); protobuf writers emit fields in number order.

mod external;
mod model;
mod typed;
mod types;
mod wire;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use self::external::ExternalFiles;
use self::model::{read_model, Data};
use self::typed::TypedReader;
use super::backed::{FileBacked, Places};
use super::format::{FileInput, FormatRow, Stream};
use super::{BlockingRead, Source, Stamp};
use crate::error::note::Note;
use crate::location::Opened;
use crate::Result;

/// The ONNX row of the format table: a `ModelProto` by its first fields;
/// spooled from a stream (which then may not have external data).
pub(crate) const ROW: FormatRow = FormatRow {
    magic: Some(looks_like_onnx),
    ..FormatRow::new(
        "onnx",
        "an ONNX model",
        open_file,
        Stream::Spool("an ONNX model needs random access"),
    )
};

/// Opens the model, and says how many sparse initializers were left out.
fn open_file(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    let mut src = OnnxSource::open(o.file, o.len, o.path, o.input)?;
    src.origin = o.origin;
    if src.places.sparse > 0 {
        (o.notice)(&Note::Info(crate::printable_line(&format!(
            "warning: {}: {} sparse initializers are not read",
            o.input, src.places.sparse
        ))));
    }
    Ok(Box::new(src))
}

/// The ONNX reader's errors (they live in the error layer).
pub use crate::error::onnx as error;

/// An ONNX model's initializers as a source.
pub type OnnxSource = FileBacked<OnnxPlaces>;

/// Where a model's initializers are (the model is file 0, then each
/// external file in order of first use), and how many sparse ones it has.
#[derive(Debug)]
pub struct OnnxPlaces {
    data: Vec<Data>,
    sparse: u64,
}

impl OnnxSource {
    /// Reads the initializers of the model in `file` (`len` bytes). `path`
    /// is where the model is, which its external data is relative to;
    /// `None` for a model read from a stream, which then may not have any.
    pub fn open(file: File, len: u64, path: Option<&Path>, input: &str) -> Result<Self> {
        let on_input = |e: crate::Error| e.with_input(input);
        let model = read_model(&file, len, ExternalFiles::new(path)).map_err(on_input)?;
        let stamp = Stamp::of(&file, len);
        let mut files = vec![(Arc::new(file), stamp)];
        let mut beside = Vec::new();
        for ext in model.externals.files {
            beside.push(Opened::open_file(&ext.path, &ext.file));
            files.push((ext.file, ext.opened));
        }
        let (tensors, data) = model
            .initializers
            .into_iter()
            .map(|i| (i.meta, i.data))
            .unzip();
        let places = OnnxPlaces {
            data,
            sparse: model.sparse,
        };
        let mut source = FileBacked::new(input, files, tensors, places);
        source.beside = beside;
        Ok(source)
    }

    /// Sparse initializers the model holds, which are not read.
    pub fn sparse_initializers(&self) -> u64 {
        self.places.sparse
    }
}

impl Places for OnnxPlaces {
    fn span(&self, k: usize) -> Option<(usize, u64, u64)> {
        let Data::Span { file, offset, len } = self.data[k] else {
            return None;
        };
        Some((file, offset, len))
    }

    /// Tensor `k`'s typed-field reader, if its data is in one.
    fn reader(source: &OnnxSource, k: usize) -> Option<BlockingRead> {
        let Data::Typed {
            storage,
            width,
            start,
            end,
            values,
        } = source.places.data[k]
        else {
            return None;
        };
        let file = source.files()[0].clone();
        Some(Box::new(TypedReader::new(
            file,
            (start, end),
            storage,
            width,
            values,
        )))
    }
}

/// Whether `first` (an input's first bytes) begins like a `ModelProto`:
/// `ir_version` (field 1, a varint of at most 3 bytes) first, then, as far
/// as the bytes go, fields `ModelProto` has with the wire types it gives them.
///
/// ```
/// use safetensors_stream::source::onnx::looks_like_onnx;
///
/// assert!(looks_like_onnx(b"\x08\x09\x12\x09make_onnx:\xf6\x05"));
/// assert!(!looks_like_onnx(b"\x08\x09\x00"));
/// assert!(!looks_like_onnx(b"\x08\x09"));
/// ```
pub fn looks_like_onnx(first: &[u8]) -> bool {
    let mut at = 0usize;
    let mut fields = 0;
    while at < first.len() {
        let Some((tag, n)) = small_varint(&first[at..]) else {
            break;
        };
        at += n;
        let (field, wire) = (tag >> 3, tag & 7);
        if fields == 0 && (field, wire) != (1, 0) {
            return false;
        }
        let expected = match field {
            1 | 5 => 0,
            2 | 3 | 4 | 6 | 7 | 8 | 14 | 20 | 25 | 26 => 2,
            _ => return false,
        };
        if wire != expected {
            return false;
        }
        fields += 1;
        let Some((value, n)) = small_varint(&first[at..]) else {
            // A value cut off by the end of what was read: the fields seen decide.
            break;
        };
        at += n;
        if field == 1 && !(1..=100).contains(&value) {
            return false;
        }
        if wire == 2 {
            at = at.saturating_add(value as usize);
        }
    }
    fields >= 2
}

/// A varint of at most 3 bytes at the start of `b`, and its length.
fn small_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().take(3).enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}
