//! GGUF files (llama.cpp's format) as a source.
//!
//! The header lists every tensor with the dtype and row-major shape it is
//! written as: plain types (F32, F16, BF16, F64, I8..I64) as they are,
//! quantized blocks dequantized to `SourceOptions::dequantize` (BF16 when
//! unset). Plain tensors are copied from their file span (swapped when the
//! file is big-endian); quantized ones are read a bounded run of blocks at
//! a time by a blocking reader any worker thread may run.

mod dequant_reader;
/// The GGUF reader's errors (they live in the error layer).
pub use crate::error::gguf as error;
pub mod header;

use std::fs::File;
use std::io::BufReader;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use self::dequant_reader::DequantReader;
use self::header::{read_header_within, GgufHeader, TensorInfo};
use super::blocking::BlockingReader;
use super::format::{FileInput, FormatRow, Stream};
use super::{BlockingRead, FileSpan, Listing, OpenBlocking, Source, SourceOptions, TensorData};
use crate::dequant::ggml::Kind;
use crate::header::TensorMeta;
use crate::io_util::PositionalReader;
use crate::transform::Transform;
use crate::{Dtype, Result};

/// A GGUF file as a source.
#[derive(Debug)]
pub struct GgufSource {
    /// The location it was opened from, reported first by `opened`.
    origin: Option<crate::location::Opened>,
    listing: Listing,
    file: Arc<File>,
    opened: super::Stamp,
    header: GgufHeader,
    skipped_arrays: usize,
}

impl GgufSource {
    /// Reads the header of `file` (`len` bytes) and lists its tensors.
    pub fn open(file: File, len: u64, input: &str, options: &SourceOptions) -> Result<Self> {
        let on_input = |e: crate::Error| e.with_input(input);
        // Positional reads from byte 0, whatever the handle's position (a
        // spooled stream's is at its end).
        let from_start = PositionalReader::new(&file, 0, len);
        let reader = BufReader::with_capacity(64 * 1024, from_start);
        let header = read_header_within(reader, len, &options.limits).map_err(on_input)?;
        let to = options.dequantize.unwrap_or(Dtype::BF16);
        let tensors = header
            .tensors
            .iter()
            .map(|t| {
                let dtype = match t.ty.kind {
                    Kind::Plain(d) => d,
                    _ => to,
                };
                TensorMeta::new(t.name.clone(), dtype, t.shape())
            })
            .collect();
        let skipped_arrays = header
            .metadata
            .iter()
            .filter(|(_, v)| v.to_metadata().is_none())
            .count();
        let metadata = options.gguf.metadata.then(|| {
            header
                .metadata
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.to_metadata()?)))
                .collect()
        });
        Ok(GgufSource {
            origin: None,
            listing: Listing {
                input: input.to_string(),
                tensors,
                metadata,
            },
            opened: super::Stamp::of(&file, len),
            file: Arc::new(file),
            header,
            skipped_arrays,
        })
    }

    /// The parsed header: version, byte order, every metadata key-value.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// Tensor `k`'s type as the file stores it, in ggml's words (`Q4_K`,
    /// `Q8_0`, `F32`): its dtype in [`Source::tensors`] is what it is written as.
    pub fn stored_type(&self, k: usize) -> &'static str {
        self.info(k).ty.name
    }

    /// Array-valued metadata keys, left out of `__metadata__`.
    pub fn skipped_arrays(&self) -> usize {
        self.skipped_arrays
    }

    fn info(&self, k: usize) -> &TensorInfo {
        &self.header.tensors[k]
    }

    /// What makes a plain tensor's bytes little-endian.
    fn transform(&self, dtype: Dtype) -> Transform {
        Transform::to_little_endian(dtype, self.header.big_endian)
    }
}

crate::setters::options! {
    /// How GGUF files are read.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct GgufOptions {
        /// Copy the scalar metadata keys into `__metadata__` as strings
        /// (`--gguf-metadata`); array values are left out and counted.
        pub metadata: bool = false,
    }
}

/// The GGUF row of the format table: `GGUF`, spooled from a stream.
pub(crate) const ROW: FormatRow = FormatRow {
    magic: Some(|first| first.starts_with(b"GGUF")),
    ..FormatRow::new(
        "gguf",
        "a GGUF file",
        open_file,
        Stream::Spool("a GGUF file needs random access"),
    )
};

/// Opens a GGUF file; says how many array-valued metadata keys
/// `--gguf-metadata` left out.
fn open_file(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    let (input, options) = (o.input, o.options);
    let mut src = GgufSource::open(o.file, o.len, input, options)?;
    src.origin = o.origin;
    // A listing (inspect, validate) shows the metadata; only a conversion leaves keys out.
    if options.gguf.metadata && !options.listing_only && src.skipped_arrays() > 0 {
        (o.notice)(&crate::Note::Info(format!(
            "{input}: --gguf-metadata skipped {} array-valued keys (vocabularies, merges, ...)",
            src.skipped_arrays()
        )));
    }
    Ok(Box::new(src))
}

impl Source for GgufSource {
    fn opened(&self) -> Vec<crate::location::Opened> {
        self.origin.iter().cloned().collect()
    }

    fn listing(&self) -> &Listing {
        &self.listing
    }

    /// A quantized tensor's ggml type (`Q4_K`), dequantized to its dtype.
    fn stored_as(&self, k: usize) -> Option<&str> {
        let quantized = !matches!(self.info(k).ty.kind, Kind::Plain(_));
        quantized.then(|| self.stored_type(k))
    }

    fn identity(&self) -> Option<String> {
        Some(self.opened.identity())
    }

    fn check_unchanged(&self) -> Result<()> {
        super::unchanged(&self.file, &self.opened, &self.listing.input)
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        async move {
            if let Some(open) = self.open_blocking(k) {
                let (reader, transform) = open()?;
                let reader = BlockingReader::new(reader);
                return Ok(TensorData::new(reader).with_transform(transform));
            }
            let t = self.info(k);
            let transform = self.transform(self.listing.tensors[k].dtype);
            let reader = super::file_range(&self.file, t.offset, t.len).await?;
            Ok(TensorData::new(reader).with_transform(transform))
        }
        .boxed()
    }

    fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
        let t = self.info(k);
        if t.ty.kind != Kind::Quantized {
            return None;
        }
        let (file, ty, offset) = (self.file.clone(), t.ty, t.offset);
        let blocks = t.elements() / ty.block_elems;
        let to = self.listing.tensors[k].dtype;
        Some(Box::new(move || {
            let r = DequantReader::new(file, ty, to, offset, blocks);
            Ok((Box::new(r) as BlockingRead, Transform::Identity))
        }))
    }

    /// Runs of whole super-blocks, each decoded from its own offset.
    fn open_blocking_parts(&self, k: usize, target: u64) -> Option<Vec<super::BlockingPart>> {
        let t = self.info(k);
        if t.ty.kind != Kind::Quantized {
            return None;
        }
        let ty = t.ty;
        let block_out = ty.block_elems * self.listing.tensors[k].dtype.byte_width()?;
        let blocks = t.elements() / ty.block_elems;
        if blocks.checked_mul(block_out)? <= target {
            return None;
        }
        let per_part = (target / block_out).max(1);
        let to = self.listing.tensors[k].dtype;
        let mut parts = Vec::new();
        let mut b0 = 0;
        while b0 < blocks {
            let n = per_part.min(blocks - b0);
            let (file, offset) = (self.file.clone(), t.offset + b0 * ty.block_bytes);
            parts.push(super::BlockingPart {
                len: n * block_out,
                open: Box::new(move || {
                    let r = DequantReader::new(file, ty, to, offset, n);
                    Ok((Box::new(r) as BlockingRead, Transform::Identity))
                }),
            });
            b0 += n;
        }
        Some(parts)
    }

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        let t = self.info(k);
        let Kind::Plain(dtype) = t.ty.kind else {
            return None;
        };
        Some(FileSpan {
            file: self.file.clone(),
            offset: t.offset,
            len: t.len,
            transform: self.transform(dtype),
            crc: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Every quantized tensor of the fixture, in parts of any count of
    /// super-blocks, reads as the one reader of the whole tensor.
    #[test]
    fn parts_join_into_the_whole_tensor() {
        let path = "fixtures/gguf/types_le.gguf";
        let file = File::open(path).unwrap();
        let len = file.metadata().unwrap().len();
        let source = GgufSource::open(file, len, path, &SourceOptions::default()).unwrap();
        let mut split = 0;
        for k in 0..source.tensors().len() {
            let Some(open) = source.open_blocking(k) else {
                continue;
            };
            let mut whole = Vec::new();
            open().unwrap().0.read_to_end(&mut whole).unwrap();
            let block_out = source.info(k).ty.block_elems * 2;
            let none = source.open_blocking_parts(k, whole.len() as u64);
            assert!(none.is_none(), "a tensor no longer than the part is whole");
            for blocks in [1, 2, 5] {
                let Some(parts) = source.open_blocking_parts(k, blocks * block_out) else {
                    continue;
                };
                split += 1;
                let mut joined = Vec::new();
                for part in parts {
                    let before = joined.len();
                    (part.open)().unwrap().0.read_to_end(&mut joined).unwrap();
                    assert_eq!((joined.len() - before) as u64, part.len);
                }
                assert!(
                    joined == whole,
                    "{} in parts of {blocks} blocks",
                    source.tensors()[k].name
                );
            }
        }
        assert!(split > 0, "no tensor was split");
    }
}
