//! What can be wrong with a PyTorch distributed checkpoint (a folder of
//! `.metadata` and `__R_S.distcp` files): its metadata, how its chunks cut
//! each tensor, and the items they point at. Names are quoted with escapes.

/// A distributed checkpoint whose metadata or items break a rule torch
/// relies on (often without checking it). Each names the tensor; the
/// chunk is named by its offsets in the global tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum DcpError {
    /// A value of the metadata is not what torch writes there.
    #[error("metadata: {what} is {found}, expected {expected}")]
    Shape {
        what: String,
        expected: &'static str,
        found: String,
    },
    /// A tensor layout other than strided (sparse, mkldnn).
    #[error("layout {layout:?}; only strided tensors are read")]
    Layout { layout: String },
    #[error("{what} {name:?} appears twice in the metadata")]
    Twice { what: &'static str, name: String },
    /// A chunk whose rank differs from its tensor's. The tensor is the
    /// error's ([`crate::Error::tensor`]), as for every variant below.
    #[error("{dims} dimensions, but its chunk at {chunk} has {chunk_dims}")]
    ChunkRank {
        chunk: String,
        dims: usize,
        chunk_dims: usize,
    },
    #[error("its chunk at {chunk} of sizes {sizes:?} reaches past its shape {shape:?}")]
    ChunkOutside {
        shape: Vec<u64>,
        chunk: String,
        sizes: Vec<u64>,
    },
    /// Two chunks that claim the same elements.
    #[error("its chunks at {first} and {second} overlap")]
    ChunkOverlap { first: String, second: String },
    /// Elements no chunk holds.
    #[error("its chunks hold {held} of its {numel} elements; the first missing is at {missing}")]
    ChunkGap {
        held: u64,
        numel: u64,
        missing: String,
    },
    /// A shape whose element count does not fit 64 bits, or whose bytes
    /// do not.
    #[error("shape {shape:?} is too large")]
    TooLarge { shape: Vec<u64> },
    #[error("no storage entry for its chunk at {chunk}")]
    NoStorage { chunk: String },
    /// An item file named with a path, not a file of the folder.
    #[error("storage file {0:?} is not a file name in the checkpoint's folder")]
    FileName(String),
    #[error("the item of its chunk at {chunk} is {length} bytes at {offset} in {file:?}, which has {file_len}")]
    ItemOutside {
        chunk: String,
        file: String,
        offset: u64,
        length: u64,
        file_len: u64,
    },
    #[error("items of tensors {first:?} and {second:?} share bytes of {file:?}")]
    ItemOverlap {
        file: String,
        first: String,
        second: String,
    },
    /// An item written through a stream transform (compression, encryption).
    #[error("its chunk at {chunk} is written through transform {transforms:?}, which is not read")]
    Transformed { chunk: String, transforms: String },
    /// An item that is not one tensor of the chunk's shape and dtype.
    #[error("the item of its chunk at {chunk} holds {found}, expected {expected}")]
    ItemTensor {
        chunk: String,
        expected: String,
        found: String,
    },
    /// A safetensors file of `HuggingFaceStorageWriter`'s without the
    /// offsets of its tensors in its metadata's `DCP_SHARDING_INFO`.
    #[error("{file:?}: DCP_SHARDING_INFO {reason}")]
    ShardingInfo { file: String, reason: String },
    /// An item shorter than its chunk's bytes: a claim (2^60 elements)
    /// refused before anything is planned on it.
    #[error("the item of its chunk at {chunk} is {length} bytes, fewer than the chunk's {bytes}")]
    ItemShort {
        chunk: String,
        length: u64,
        bytes: u64,
    },
}
