//! A source of tensors already in memory: for library users and tests.

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Listing, Source, TensorData};
use crate::header::{Metadata, TensorMeta};
use crate::{Dtype, Error, ErrorKind, Result};

/// Tensors held in memory as little-endian, C-order bytes.
///
/// ```
/// use safetensors_stream::{Dtype, source::{MemorySource, Source}};
///
/// let mut src = MemorySource::new("weights");
/// src.push("bias", Dtype::F32, [2], [0u8; 8].to_vec())?;
/// assert_eq!(src.tensors()[0].name, "bias");
/// assert!(src.push("bad", Dtype::F32, [2], vec![0u8; 7]).is_err()); // 7 bytes is not 2 x F32
/// # Ok::<(), safetensors_stream::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemorySource {
    listing: Listing,
    data: Vec<Vec<u8>>,
}

impl MemorySource {
    /// An empty source named `input` in messages.
    pub fn new(input: impl Into<String>) -> Self {
        MemorySource {
            listing: Listing::new(input),
            ..Default::default()
        }
    }

    /// Adds a tensor; `data` must be exactly its byte length.
    pub fn push(
        &mut self,
        name: impl Into<String>,
        dtype: Dtype,
        shape: impl Into<Vec<u64>>,
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let meta = TensorMeta::new(name, dtype, shape);
        let expected = meta.byte_len()?;
        if data.len() as u64 != expected {
            return Err(Error::new(ErrorKind::TensorLength {
                expected,
                actual: data.len() as u64,
            })
            .with_input(&self.listing.input)
            .with_tensor(meta.name));
        }
        self.listing.tensors.push(meta);
        self.data.push(data);
        Ok(self)
    }

    /// Sets the metadata.
    pub fn set_metadata(&mut self, metadata: Option<Metadata>) -> &mut Self {
        self.listing.metadata = metadata;
        self
    }
}

impl Source for MemorySource {
    fn listing(&self) -> &Listing {
        &self.listing
    }

    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
        let bytes: &[u8] = &self.data[k];
        async move { Ok(TensorData::new(bytes)) }.boxed()
    }
}
