//! `--names hf`: a TensorFlow (`tf_model.h5`) or Flax
//! (`flax_model.msgpack`) checkpoint written by transformers 4.x, read as
//! the state dict the PyTorch model loads: names, layouts and shapes as
//! transformers' own cross-loading made them ([`tf`], [`flax`]).
//!
//! - A transposed weight (a TF or Flax `kernel`) is read with every axis
//!   reversed, in bounded memory, by the tiled reader of Fortran-order
//!   `.npy` arrays ([`FortranReader`]): a C-order (in, out) array is a
//!   Fortran-order (out, in) one. Data that is not one run of the file (a
//!   chunked dataset, a chunked Flax array) is first copied to an
//!   anonymous temporary file.
//! - A 4-d convolution kernel, (kh, kw, in, out), is read reversed, then
//!   each (kw, kh) window turned in memory ([`conv`]): PyTorch's
//!   (out, in, kh, kw), as transformers' `transpose(3, 2, 0, 1)` made it.
//! - A TF bias stored as (1, n) (GPT-2's Conv1D) is written (n,), as
//!   PyTorch's biases are; its bytes are the same.
//! - A weight the file stores more than once under names that map to one
//!   PyTorch name (T5's shared embedding under the encoder, the decoder
//!   and the model; BERT's word embeddings under its MLM head) is written
//!   once; copies of different shapes are refused.

mod conv;
pub(crate) mod flax;
pub(crate) mod tf;

use std::collections::HashMap;
use std::io::{self, Seek, SeekFrom};

use futures::future::BoxFuture;
use futures::FutureExt;

use self::tf::Layout;
use super::blocking::BlockingReader;
use super::format::Notice;
use super::npy::fortran::FortranReader;
use super::{BlockingRead, FileSpan, Listing, OpenBlocking, Source, SourceOptions, TensorData};
use crate::header::TensorMeta;
use crate::transform::Transform;
use crate::{Error, ErrorKind, Result};

/// How tensors are named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Names {
    /// As the input stores them (an HDF5 dataset's path, Flax's keys joined with `.`).
    #[default]
    Stored,
    /// As the PyTorch model of a transformers TF or Flax checkpoint names
    /// them (`--names hf`).
    Hf,
}

/// Whose conventions a checkpoint follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Convention {
    /// transformers' TF classes (Keras 2 HDF5).
    Tf,
    /// transformers' Flax classes (MessagePack).
    Flax,
}

/// One output tensor: which input tensor, whether its axes are reversed,
/// and whether its last two are then swapped (a Conv2D kernel).
#[derive(Debug, Clone, Copy)]
struct Mapped {
    k: usize,
    reversed: bool,
    conv: bool,
}

/// A source whose tensors are renamed, reshaped and transposed to the
/// PyTorch model's.
pub(crate) struct HfNames {
    inner: Box<dyn Source>,
    /// The inner source's name and metadata, its tensors as mapped.
    listing: Listing,
    map: Vec<Mapped>,
}

/// `src`, named as the PyTorch model names it when `--names hf` asks
/// (the rows of the formats it maps call it).
pub(crate) fn named(
    src: Box<dyn Source>,
    options: &SourceOptions,
    convention: Convention,
) -> Result<Box<dyn Source>> {
    match options.names {
        Names::Hf => hf_names(src, convention),
        Names::Stored => Ok(src),
    }
}

/// The table's wrap that refuses `--names hf` for an input no row mapped.
pub(crate) fn refuse_unmapped(
    sources: Vec<Box<dyn Source>>,
    options: &SourceOptions,
    _notice: Notice<'_>,
) -> Result<Vec<Box<dyn Source>>> {
    if options.names == Names::Hf {
        if let Some(s) = sources.iter().find(|s| !s.names_mapped()) {
            let e = Error::new(ErrorKind::Usage(
                "--names hf maps transformers' TensorFlow (.h5) and Flax (.msgpack) checkpoints; this input is neither".into(),
            ));
            return Err(e.with_input(s.input_name()));
        }
    }
    Ok(sources)
}

/// `src` as the PyTorch model names it, following `convention`.
pub(crate) fn hf_names(src: Box<dyn Source>, convention: Convention) -> Result<Box<dyn Source>> {
    let mut tensors = Vec::new();
    let mut map: Vec<Mapped> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (k, t) in src.tensors().iter().enumerate() {
        let (name, layout) = match convention {
            Convention::Tf => tf::pt_name(&t.name, t.shape.len()),
            Convention::Flax => flax::pt_name(&t.name, t.shape.len()),
        };
        let (reversed, conv) = match layout {
            Layout::Same => (false, false),
            Layout::Reversed => (true, false),
            Layout::Conv2d => (true, true),
        };
        let mut shape = t.shape.clone();
        if reversed {
            shape.reverse();
        }
        if conv {
            // (kh, kw, in, out) reversed is (out, in, kw, kh): then (out, in, kh, kw).
            shape.swap(2, 3);
            let block = t.shape[0]
                .saturating_mul(t.shape[1])
                .saturating_mul(t.dtype.byte_width().unwrap_or(1));
            if block > conv::MAX_WINDOW {
                let e = Error::new(ErrorKind::Usage(format!(
                    "--names hf: a convolution kernel of {} x {} (over {} bytes a window)",
                    t.shape[0],
                    t.shape[1],
                    conv::MAX_WINDOW
                )));
                return Err(e.with_tensor(t.name.as_str()).with_input(src.input_name()));
            }
        }
        // GPT-2's TF biases are (1, n); PyTorch's are (n,).
        if convention == Convention::Tf
            && name.ends_with("bias")
            && shape.len() == 2
            && shape[0] == 1
        {
            shape.remove(0);
        }
        if let Some(&first) = seen.get(&name) {
            let kept: &TensorMeta = &tensors[first];
            if kept.shape != shape || kept.dtype != t.dtype {
                let e = Error::new(ErrorKind::Usage(format!(
                    "--names hf: {:?} and {:?} both map to {name:?} but are {} {:?} and {} {:?}",
                    src.tensors()[map[first].k].name,
                    t.name,
                    kept.dtype,
                    kept.shape,
                    t.dtype,
                    shape
                )));
                return Err(e.with_input(src.input_name()));
            }
            continue; // the same weight stored again: written once
        }
        seen.insert(name.clone(), tensors.len());
        tensors.push(TensorMeta::new(name, t.dtype, shape));
        map.push(Mapped { k, reversed, conv });
    }
    let listing = Listing {
        input: src.input_name().to_string(),
        tensors,
        metadata: src.metadata().cloned(),
    };
    Ok(Box::new(HfNames {
        inner: src,
        listing,
        map,
    }))
}

impl HfNames {
    /// Opens output tensor `j`, whose axes are reversed: the Fortran-order
    /// reader over its file range, or over a temporary copy of its bytes.
    fn reversed(&self, j: usize) -> Option<OpenBlocking> {
        let m = self.map[j];
        let mut shape = self.listing.tensors[j].shape.clone();
        let width = self.listing.tensors[j].dtype.byte_width().unwrap_or(1) as usize;
        if m.conv {
            // Reversed, the kernel reads (out, in, kw, kh); each window is then turned.
            shape.swap(2, 3);
            let (kw, kh) = (shape[2] as usize, shape[3] as usize);
            let inner = self.reversed_as(m, shape)?;
            return Some(Box::new(move || {
                let (r, transform) = inner()?;
                let r = conv::Windows::new(r, kw, kh, width);
                Ok((Box::new(r) as BlockingRead, transform))
            }));
        }
        self.reversed_as(m, shape)
    }

    /// Opens input tensor `m.k` with every axis reversed, read as `shape`.
    fn reversed_as(&self, m: Mapped, shape: Vec<u64>) -> Option<OpenBlocking> {
        let width = self.inner.tensors()[m.k].dtype.byte_width().unwrap_or(1) as usize;
        if let Some(span) = self.inner.file_span(m.k) {
            let FileSpan {
                file,
                offset,
                transform,
                ..
            } = span;
            return Some(Box::new(move || {
                let file = file.try_clone()?;
                let r = FortranReader::new(file, offset, &shape, width);
                Ok((Box::new(r) as BlockingRead, transform))
            }));
        }
        let open = self.inner.open_blocking(m.k)?;
        Some(Box::new(move || {
            let (mut r, transform) = open()?;
            let mut copy = tempfile::tempfile()?;
            io::copy(&mut r, &mut copy).map_err(Error::io)?;
            copy.seek(SeekFrom::Start(0))?;
            let r = FortranReader::new(copy, 0, &shape, width);
            Ok((Box::new(r) as BlockingRead, transform))
        }))
    }
}

impl Source for HfNames {
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn names_mapped(&self) -> bool {
        true
    }

    fn wrapped(&self) -> Option<&dyn Source> {
        Some(self.inner.as_ref())
    }

    fn file_span(&self, j: usize) -> Option<FileSpan> {
        let m = self.map[j];
        if m.reversed {
            return None;
        }
        self.inner.file_span(m.k)
    }

    fn open_blocking(&self, j: usize) -> Option<OpenBlocking> {
        let m = self.map[j];
        if m.reversed {
            return self.reversed(j);
        }
        self.inner.open_blocking(m.k)
    }

    fn open(&mut self, j: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        async move {
            let m = self.map[j];
            if !m.reversed {
                return self.inner.open(m.k).await;
            }
            let open = self.reversed(j).ok_or_else(|| {
                let e = Error::new(ErrorKind::Usage(
                    "--names hf: this input cannot be transposed".into(),
                ));
                e.with_tensor(self.listing.tensors[j].name.as_str())
            })?;
            let (r, transform): (BlockingRead, Transform) = tokio::task::spawn_blocking(open)
                .await
                .map_err(|e| Error::io(io::Error::other(e)))??;
            Ok(TensorData::new(BlockingReader::new(r)).with_transform(transform))
        }
        .boxed()
    }
}
