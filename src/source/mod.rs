//! Sources: where tensors come from.
//!
//! A [`Source`] lists its tensors (name, dtype, shape) and metadata from
//! headers alone, then produces tensor k's bytes on demand as an async
//! reader. The planner needs only the listing; the sink pulls the bytes in
//! plan order, which is generally not the input's order.

pub mod memory;
pub mod safetensors;

use std::pin::Pin;

use futures::future::BoxFuture;
use tokio::io::AsyncRead;

use crate::header::{Metadata, TensorMeta};
use crate::Result;

/// The bytes of one tensor: exactly its byte length, little-endian, C order.
pub type TensorReader<'a> = Pin<Box<dyn AsyncRead + Send + 'a>>;

/// How a source can be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Any tensor, in any order (a file that can seek or be reopened).
    Random,
    /// Only forward, in [`Source::tensors`] order (a pipe, standard input).
    Sequential,
}

/// A stream of tensors.
///
/// Implementors list their tensors up front and open any of them on
/// demand. [`Source::open`] may be called in any order when
/// [`Source::access`] is [`Access::Random`], and only in listing order,
/// each index once, when it is [`Access::Sequential`].
pub trait Source: Send {
    /// How the input is named in messages (`model.npz`, `-` for stdin).
    fn input_name(&self) -> &str;

    /// The tensors, in the input's own order.
    fn tensors(&self) -> &[TensorMeta];

    /// The input's `__metadata__`, if it has one.
    fn metadata(&self) -> Option<&Metadata> {
        None
    }

    /// Whether tensors can be opened in any order.
    fn access(&self) -> Access {
        Access::Random
    }

    /// Opens tensor `k`'s bytes. The reader must yield exactly the tensor's
    /// byte length; the sink checks and names the tensor if it does not.
    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorReader<'_>>>;
}

/// A source's listing, detached from its I/O: what the planner reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// How the input is named in messages.
    pub input: String,
    /// Its tensors in its own order.
    pub tensors: Vec<TensorMeta>,
    /// Its metadata.
    pub metadata: Option<Metadata>,
}

impl Listing {
    /// The listing of `source`.
    pub fn of(source: &dyn Source) -> Listing {
        Listing {
            input: source.input_name().to_string(),
            tensors: source.tensors().to_vec(),
            metadata: source.metadata().cloned(),
        }
    }
}
