//! `.npy` files: one array, streamed. Big-endian data is swapped and
//! Fortran-order data reordered on the way through.

pub(crate) mod fortran;
pub mod header;
pub(crate) mod literal;

use std::fs::File;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::io::AsyncReadExt;

use self::fortran::{same_as_c_order, FortranReader};
use self::header::{parse_header_text_as, parse_prelude, read_header_as, NpyHeader, Prelude};
use super::blocking::BlockingReader;
use super::format::{spooling, FileInput, FormatRow, Stream, StreamInput};
use super::{
    file_range, Access, FileOrStream, FileSpan, Listing, Source, TensorData, TensorReader,
};
use crate::header::TensorMeta;
use crate::io_util::PositionalReader;
use crate::Dtype;
use crate::{Error, ErrorKind, Result};

/// Where the array's data is.
enum Data {
    /// A seekable file; the data starts at `offset`.
    File {
        file: Arc<File>,
        offset: u64,
        /// The file as it was when opened.
        opened: super::Stamp,
    },
    /// A forward-only stream positioned at the data; taken on first open.
    Stream(Option<TensorReader<'static>>),
}

impl Data {
    fn backing(&self) -> FileOrStream<'_> {
        FileOrStream(match self {
            Data::File { file, opened, .. } => Some((file, opened)),
            Data::Stream(_) => None,
        })
    }
}

/// One `.npy` array as a source of one tensor.
pub struct NpySource {
    /// The location it was opened from, reported first by `opened`.
    origin: Option<crate::location::Opened>,
    /// Its one tensor.
    listing: Listing,
    header: NpyHeader,
    data: Data,
}

impl std::fmt::Debug for NpySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NpySource")
            .field("listing", &self.listing)
            .field("header", &self.header)
            .finish()
    }
}

impl NpySource {
    /// Opens an .npy held in `file`, whose bytes `base..` are the .npy
    /// (`base` is 0 for a file of its own; an npz member starts later),
    /// `len` bytes long. Reads the header; checks the data's length. Void
    /// elements are read as `void_as` (see [`header::map_descr_as`]).
    pub fn from_file(
        file: File,
        base: u64,
        len: u64,
        input: &str,
        name: String,
        void_as: Option<Dtype>,
    ) -> Result<Self> {
        let on_input = |e: Error| e.with_input(input);
        let mut r = PositionalReader::new(&file, base, len);
        let (prelude, header) = read_header_as(&mut r, void_as).map_err(on_input)?;
        let end_of_header = prelude.data_start();
        let src = Self::assemble(input, name, header)?;
        let actual = len - end_of_header;
        let expected = src.listing.tensors[0].byte_len()?;
        if actual != expected {
            let e = Error::new(ErrorKind::DataLength { expected, actual });
            return Err(on_input(e.at_offset(end_of_header)));
        }
        Ok(NpySource {
            origin: None,
            data: Data::File {
                opened: super::Stamp::of(
                    &file,
                    file.metadata().map_err(|e| on_input(Error::io(e)))?.len(),
                ),
                file: Arc::new(file),
                offset: base + end_of_header,
            },
            ..src
        })
    }

    /// Reads the header from a forward-only stream and keeps the stream for
    /// the data. A Fortran-order array cannot be reordered from a stream:
    /// [`NpySource::needs_random_access`] says so, and the caller spools.
    #[cfg(any(test, feature = "internals"))]
    pub async fn from_stream(
        reader: TensorReader<'static>,
        input: &str,
        name: String,
    ) -> Result<Self> {
        Self::from_stream_as(reader, input, name, None).await
    }

    /// [`NpySource::from_stream`], void elements read as `void_as`.
    pub async fn from_stream_as(
        mut reader: TensorReader<'static>,
        input: &str,
        name: String,
        void_as: Option<Dtype>,
    ) -> Result<Self> {
        let on_input = |e: Error| e.with_input(input);
        let mut first = [0u8; 10];
        reader
            .read_exact(&mut first)
            .await
            .map_err(|e| on_input(eof_is_bad(e, 0)))?;
        let mut pre = first.to_vec();
        if matches!(first[6], 2 | 3) {
            let mut two = [0u8; 2];
            reader
                .read_exact(&mut two)
                .await
                .map_err(|e| on_input(eof_is_bad(e, 10)))?;
            pre.extend_from_slice(&two);
        }
        let prelude: Prelude = parse_prelude(&pre).map_err(on_input)?;
        let mut text = vec![0u8; prelude.text_len as usize];
        reader
            .read_exact(&mut text)
            .await
            .map_err(|e| on_input(eof_is_bad(e, prelude.text_start)))?;
        let header = parse_header_text_as(&text, &prelude, void_as).map_err(on_input)?;
        let src = Self::assemble(input, name, header)?;
        Ok(NpySource {
            data: Data::Stream(Some(reader)),
            ..src
        })
    }

    fn assemble(input: &str, name: String, header: NpyHeader) -> Result<Self> {
        let meta = TensorMeta::new(name, header.dtype, header.shape.clone());
        meta.byte_len().map_err(|e| e.with_input(input))?;
        Ok(NpySource {
            origin: None,
            listing: Listing {
                input: input.to_string(),
                tensors: vec![meta],
                metadata: None,
            },
            header,
            data: Data::Stream(None),
        })
    }

    fn width(&self) -> u64 {
        self.header.dtype.byte_width().unwrap_or(1)
    }

    /// The parsed header.
    #[cfg(any(test, feature = "internals"))]
    pub fn header(&self) -> &NpyHeader {
        &self.header
    }

    /// True for a Fortran-order array that really needs reordering.
    pub fn needs_random_access(&self) -> bool {
        self.header.fortran_order && !same_as_c_order(&self.header.shape)
    }

    /// Copies a stream-backed source's data to a temp file, so it can be
    /// read in any order (Fortran-order arrays need that).
    pub async fn spool(mut self) -> Result<Self> {
        let Data::Stream(Some(reader)) = std::mem::replace(&mut self.data, Data::Stream(None))
        else {
            return Ok(self);
        };
        let expected = self.listing.tensors[0].byte_len()?;
        let (file, len) = super::spool::spool(reader, Some(expected))
            .await
            .map_err(|e| e.with_input(&self.listing.input))?;
        if len != expected {
            let e = Error::new(ErrorKind::DataLength {
                expected,
                actual: len,
            });
            return Err(e.with_input(&self.listing.input));
        }
        self.data = Data::File {
            opened: super::Stamp::of(&file, len),
            file: Arc::new(file),
            offset: 0,
        };
        Ok(self)
    }

    /// Takes the stream of a stream-backed source, positioned at the data.
    #[cfg(any(test, feature = "internals"))]
    pub fn into_stream(self) -> Option<TensorReader<'static>> {
        match self.data {
            Data::Stream(s) => s,
            Data::File { .. } => None,
        }
    }
}

fn eof_is_bad(e: std::io::Error, at: u64) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Error::new(ErrorKind::NpyHeader("input ends inside the header".into())).at_offset(at)
    } else {
        Error::io(e)
    }
}

crate::setters::options! {
    /// How numpy inputs (.npy files, .npz members) are read.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct NpyOptions {
        /// Read void elements (`<V2`, `|V1`, as `np.save` writes ml_dtypes'
        /// types) as this dtype, of the same width (`--npy-void-as`); refused otherwise.
        pub void_as: Option<crate::Dtype> = None,
        /// Skip npz members that are not `.npy` arrays instead of refusing the archive.
        pub skip_non_npy: bool = false,
    }
}

/// The .npy row of the format table: `\x93NUMPY`, streamed as it is read.
pub(crate) const ROW: FormatRow = FormatRow {
    magic: Some(|first| first.starts_with(b"\x93NUMPY")),
    ..FormatRow::new("npy", "an .npy array", open_file, Stream::Read(open_stream))
};

fn name_needed() -> Error {
    Error::new(ErrorKind::NameNeeded("an .npy from standard input"))
}

fn open_file(o: FileInput<'_>) -> Result<Box<dyn Source>> {
    let name = o.name.ok_or_else(name_needed)?;
    let void_as = o.options.npy.void_as;
    let mut src = NpySource::from_file(o.file, 0, o.len, o.input, name, void_as)?;
    src.origin = o.origin;
    Ok(Box::new(src))
}

/// A stream's array is read as it comes, unless its Fortran order needs
/// random access: then it is spooled.
fn open_stream(o: StreamInput<'_>) -> BoxFuture<'_, Result<Box<dyn Source>>> {
    async move {
        let Some(name) = o.options.name.clone().or(o.name) else {
            return Err(name_needed().with_input(o.input));
        };
        let void_as = o.options.npy.void_as;
        let mut src = NpySource::from_stream_as(o.reader, o.input, name, void_as).await?;
        src.origin = o.origin;
        if src.needs_random_access() {
            (o.notice)(&spooling(o.input, "Fortran-order array from a stream"));
            return Ok(Box::new(src.spool().await?) as Box<dyn Source>);
        }
        Ok(Box::new(src) as Box<dyn Source>)
    }
    .boxed()
}

impl Source for NpySource {
    fn opened(&self) -> Vec<crate::location::Opened> {
        self.origin.iter().cloned().collect()
    }

    fn listing(&self) -> &Listing {
        &self.listing
    }

    file_or_stream_getters!();

    fn file_span(&self, _k: usize) -> Option<FileSpan> {
        match &self.data {
            Data::File { file, offset, .. } if !self.needs_random_access() => Some(FileSpan {
                file: file.clone(),
                offset: *offset,
                len: self.listing.tensors[0].byte_len().ok()?,
                transform: self.header.transform,
                crc: None,
            }),
            _ => None,
        }
    }

    fn open(&mut self, _k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        let len = self.listing.tensors[0].byte_len();
        let transform = self.header.transform;
        let reorder = self.needs_random_access();
        let shape = self.header.shape.clone();
        let width = self.width() as usize;
        async move {
            let len = len?;
            let reader: TensorReader<'_> = match &mut self.data {
                Data::File { file, offset, .. } if reorder => {
                    let file = file.try_clone()?;
                    Box::pin(BlockingReader::new(FortranReader::new(
                        file, *offset, &shape, width,
                    )))
                }
                Data::File { file, offset, .. } => Box::pin(file_range(file, *offset, len).await?),
                Data::Stream(s) => s.take().ok_or_else(|| {
                    Error::new(ErrorKind::ReadOnce("a streamed .npy can be read only once"))
                })?,
            };
            Ok(TensorData { reader, transform })
        }
        .boxed()
    }
}
