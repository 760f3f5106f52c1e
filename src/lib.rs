//! Stream tensors from other formats into [safetensors] files, in bounded memory.
//!
//! [safetensors]: https://huggingface.co/docs/safetensors
//!
//! The crate is built in layers:
//! - [`dtype`]: the 22 element types;
//! - [`header`]: the header's byte-exact encoding, and its parsing and validation
//!   in strict and reference modes;
//! - [`source`]: where tensors come from (`.npy`, `.npz`, raw dumps, safetensors,
//!   compressed or not, files or streams), listed from headers alone;
//! - [`plan`]: the pure planner: filters, renames, casts, order, offsets, shards;
//! - [`sink`]: the async writer, one bounded buffer, atomic file output;
//! - [`output`]: what an output path names, and the checks before writing;
//! - [`convert`]: the whole job as one call, which the `convert` binary wraps.
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
#![forbid(unsafe_code)]

// Outputs keep Unix modes and owners, and inputs are read with positional
// reads: Unix only. Linux also copies by the kernel (`copy_file_range`).
#[cfg(not(unix))]
compile_error!("safetensors-stream supports Unix (Linux, macOS, the BSDs) only");

/// The README's Rust examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[cfg(feature = "ndarray")]
pub mod array;
pub mod cast;
pub mod convert;
pub mod dtype;
pub mod error;
pub mod header;
pub mod index;
pub mod inspect;
mod io_util;
pub mod observe;
pub mod output;
pub mod plan;
pub mod sink;
pub mod source;
#[cfg(feature = "object-store")]
pub mod store;
pub mod transform;
pub mod units;
pub mod writer;

pub use convert::{convert, convert_blocking, ConvertOptions, Output, Report};
pub use dtype::Dtype;
pub use error::{Category, Error, ErrorKind, Result};
pub use header::TensorMeta;
pub use writer::{AsyncWriter, Writer, WriterOptions};

/// Internals for this crate's own tests, benchmarks and fuzz targets, which
/// must reach below the API. Not part of the API: anything here may change
/// in any release.
#[doc(hidden)]
pub mod test_support {
    pub use crate::source::npy::fortran::FortranReader;
}
