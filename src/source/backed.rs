//! A source whose tensors lie in files it holds open (HDF5, Flax
//! MessagePack, ONNX and its external data): [`FileBacked`] answers once
//! every [`Source`] method about the input — its name, its tensors, its
//! identity, whether it changed, where it was opened from — and a format
//! says only where each tensor's bytes are ([`Places`]).
//!
//! Layer: source, below the formats that use it.

use std::fs::File;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::blocking::BlockingReader;
use super::{BlockingRead, FileSpan, Listing, OpenBlocking, Source, Stamp, TensorData};
use crate::header::TensorMeta;
use crate::location::Opened;
use crate::transform::Transform;
use crate::Result;

/// The tensors of files a source holds open, placed by a format's `P`.
#[derive(Debug)]
pub struct FileBacked<P> {
    /// The location it was opened from, reported first by `opened`.
    pub(crate) origin: Option<Opened>,
    /// Files it read beside its input (ONNX external data), reported by
    /// `opened` after `origin`: an output must not replace them either.
    pub(crate) beside: Vec<Opened>,
    listing: Listing,
    /// The input first, then any file it names (ONNX external data).
    files: Vec<Arc<File>>,
    /// Each file as it was when opened, in the same order.
    stamps: Vec<Stamp>,
    /// The format's own: where each tensor's bytes are, and what else it keeps.
    pub(crate) places: P,
}

/// Where a file-backed format's tensors lie.
pub trait Places: Send + Sized {
    /// Tensor `k`'s bytes as one run of a file: its index in the files,
    /// offset and length; `None` when they are not (see [`Places::reader`]).
    fn span(&self, k: usize) -> Option<(usize, u64, u64)>;

    /// A blocking reader of tensor `k`'s bytes, where they are not one run
    /// of a file (chunks, typed fields, a fill value).
    fn reader(source: &FileBacked<Self>, k: usize) -> Option<BlockingRead>;

    /// How tensor `k`'s bytes become little-endian (as they are by default).
    fn transform(&self, _k: usize) -> Transform {
        Transform::Identity
    }
}

impl<P> FileBacked<P> {
    /// The source of `tensors` in `files` (the input first), each stamped as
    /// it is now, placed by `places`.
    pub(crate) fn new(
        input: &str,
        files: Vec<(Arc<File>, Stamp)>,
        tensors: Vec<TensorMeta>,
        places: P,
    ) -> Self {
        let (files, stamps) = files.into_iter().unzip();
        FileBacked {
            origin: None,
            beside: Vec::new(),
            listing: Listing {
                input: input.to_string(),
                tensors,
                metadata: None,
            },
            files,
            stamps,
            places,
        }
    }

    /// The files, the input first.
    pub(crate) fn files(&self) -> &[Arc<File>] {
        &self.files
    }
}

impl<P: Places> Source for FileBacked<P> {
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn identity(&self) -> Option<String> {
        super::identities(&self.stamps)
    }

    fn opened(&self) -> Vec<Opened> {
        self.origin.iter().chain(&self.beside).cloned().collect()
    }

    fn check_unchanged(&self) -> Result<()> {
        super::all_unchanged(&self.files, &self.stamps, &self.listing.input)
    }

    fn file_span(&self, k: usize) -> Option<FileSpan> {
        let (file, offset, len) = self.places.span(k)?;
        Some(FileSpan {
            file: self.files[file].clone(),
            offset,
            len,
            transform: self.places.transform(k),
            crc: None,
        })
    }

    fn open_blocking(&self, k: usize) -> Option<OpenBlocking> {
        let r = P::reader(self, k)?;
        let transform = self.places.transform(k);
        Some(Box::new(move || Ok((r, transform))))
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        async move {
            let transform = self.places.transform(k);
            if let Some(r) = P::reader(self, k) {
                return Ok(TensorData::new(BlockingReader::new(r)).with_transform(transform));
            }
            let (file, offset, len) = self
                .places
                .span(k)
                .expect("a tensor is a file range or has a reader");
            let reader = super::file_range(&self.files[file], offset, len).await?;
            Ok(TensorData::new(reader).with_transform(transform))
        }
        .boxed()
    }
}
