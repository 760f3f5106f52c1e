//! Stream tensors from other formats into [safetensors] files, in bounded memory.
//!
//! [safetensors]: https://huggingface.co/docs/safetensors
//!
//! The common jobs need only the crate root:
//! - [`convert()`] / [`convert_blocking`] with [`ConvertOptions`] (built from
//!   [`PlanOptions`], [`SourceOptions`], [`SinkOptions`]): files in, files out;
//! - [`Writer`] / [`AsyncWriter`] with [`WriterOptions`]: stream your own
//!   tensors into a file, piece by piece;
//! - [`Error`] (its [`ErrorKind`] and [`Category`]), [`Dtype`], [`TensorMeta`].
//!
//! The public modules below are for jobs the root does not cover (a
//! source of your own, the planner, the sink, headers, indexes,
//! listings); `store` is the object-storage client (the `object-store`
//! feature, on with `cli`).
//!
//! Supported platforms: Unix (Linux, macOS, the BSDs). Unchanged bytes go
//! from a mapping of the source straight into `write`, one memory copy.
//!
//! ```
//! use safetensors_stream::{Dtype, header::{encode, parse_file_bytes, Order, Rules, TensorMeta}};
//!
//! // Lay out two tensors as the reference writer would, then read the header back.
//! let tensors = vec![
//!     TensorMeta::new("bias", Dtype::F32, [4]),
//!     TensorMeta::new("step", Dtype::I64, []),
//! ];
//! let enc = encode(tensors, None, Order::Canonical)?;
//! let mut file = enc.bytes().to_vec();
//! file.resize(enc.header().file_len() as usize, 0); // the data: 24 zero bytes
//! let header = parse_file_bytes(&file, Rules::STRICT)?;
//! assert_eq!(header.tensors[0].meta.name, "step"); // I64 sorts before F32
//! assert_eq!(header.data_len(), 24);
//! # Ok::<(), safetensors_stream::Error>(())
//! ```
#![warn(missing_docs, unreachable_pub)]
// Three modules may use `unsafe`. Two for system calls with no safe
// wrapper: the mapped copy (src/copy/mapped.rs), whose mapping only the
// kernel reads, and starting writeback (src/dest/writeback.rs). One to call
// the vector kernels (src/cast/simd/): `#[target_feature]` functions,
// called only once the CPU is known to have the feature. Nothing that
// parses input does.
#![deny(unsafe_code)]

// Outputs keep Unix modes and owners, and inputs are read with positional
// reads and mapped copies: Unix only.
#[cfg(not(unix))]
compile_error!("safetensors-stream supports Unix (Linux, macOS, the BSDs) only");

/// The README's Rust examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(feature = "ndarray")]
pub mod array;
mod block_cache;
// `cast::simd::{Isa, with_isa}` are `pub` for the `internals` feature.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod cast;
pub mod convert;
// `copy::write_shard` is `pub` for the `internals` feature.
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod copy;
pub(crate) mod dequant;
pub(crate) mod dest;
pub(crate) mod dtype;
pub(crate) mod error;
pub(crate) mod folder;
pub mod header;
pub mod index;
pub mod inspect;
mod io_util;
pub mod limits;
pub mod location;
pub mod observe;
pub mod plan;
mod setters;
pub mod sink;
pub mod source;
#[cfg(feature = "object-store")]
pub mod store;
pub(crate) mod transform;
pub mod units;
pub mod writer;

pub use convert::{convert, convert_blocking, ConvertOptions, Output, Report};
pub use dtype::{ByteLenError, Dtype, UnknownDtype};
pub use error::{
    printable_line, Category, DcpError, Error, ErrorKind, HeaderError, IndexError, JsonError,
    LimitExceeded, Note, NoticeFn, PickleError, PyTorchError, Result, Span, StorageShape,
    StoreError, TextError, Warning, ZipError, ZipFeature, MAX_MESSAGE_CHARS,
};
pub use header::Order;
pub use header::TensorMeta;
pub use limits::{Limit, Limits};
pub use plan::PlanOptions;
pub use sink::SinkOptions;
pub use source::SourceOptions;
pub use writer::{AsyncWriter, Writer, WriterOptions};

/// Internals for this crate's own tests, benchmarks and fuzz targets, which
/// must reach below the API: only with the `internals` feature, which is
/// not part of the API (anything here may change in any release).
#[cfg(feature = "internals")]
pub mod internals {
    pub use crate::cast::simd::{with_isa, Isa};
    pub use crate::copy::policy::{Routes, Way};
    pub use crate::copy::write_shard;
    pub use crate::dequant::bench as dequant;
    pub use crate::source::detect::{detect, hex_preview, SNIFF_LEN};
    pub use crate::source::gguf;
    pub use crate::source::npy::fortran::FortranReader;
    pub use crate::source::npy::{header as npy_header, NpySource};
    pub use crate::source::npz::NpzSource;
    /// The zip reader npz and PyTorch checkpoints share.
    pub mod zip {
        pub use crate::source::zip::{data_start, read_directory, Method, ZipEntry};
    }
    pub use crate::source::pytorch::{model as pytorch_model, pickle, Storages};
    pub use crate::source::quantized::record::parse_any as bnb_record;
    pub use crate::source::raw::RawSource;
    pub use crate::source::safetensors::SafetensorsSource;
}
