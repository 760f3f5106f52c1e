//! What can be wrong with a PyTorch distributed checkpoint (a folder of
//! `.metadata` and `__R_S.distcp` files): its metadata, how its chunks cut
//! each tensor, and the items they point at. Names are quoted with escapes.

/// A distributed checkpoint whose metadata or items break a rule torch
/// relies on (often without checking it). Each names the tensor; the
/// chunk is named by its offsets in the global tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DcpError {
    /// A value of the metadata is not what torch writes there.
    #[error("metadata: {what} is {found}, expected {expected}")]
    Shape {
        /// Where in the metadata (`Metadata.storage_data`, a tensor's `chunks`).
        what: String,
        /// What it should be.
        expected: &'static str,
        /// What it is.
        found: String,
    },
    /// A tensor layout other than strided (sparse, mkldnn).
    #[error("layout {layout:?}; only strided tensors are read")]
    Layout {
        /// Its layout.
        layout: String,
    },
    /// A name given twice in the metadata.
    #[error("{what} {name:?} appears twice in the metadata")]
    Twice {
        /// A tensor, or a storage entry.
        what: &'static str,
        /// Its name (and offsets).
        name: String,
    },
    /// A chunk whose rank differs from its tensor's. The tensor is the
    /// error's ([`crate::Error::tensor`]), as for every variant below.
    #[error("{dims} dimensions, but its chunk at {chunk} has {chunk_dims}")]
    ChunkRank {
        /// The chunk's offsets.
        chunk: String,
        /// The tensor's dimensions.
        dims: usize,
        /// The chunk's.
        chunk_dims: usize,
    },
    /// A chunk reaching past its tensor's shape.
    #[error("its chunk at {chunk} of sizes {sizes:?} reaches past its shape {shape:?}")]
    ChunkOutside {
        /// Its global shape.
        shape: Vec<u64>,
        /// The chunk's offsets.
        chunk: String,
        /// The chunk's sizes.
        sizes: Vec<u64>,
    },
    /// Two chunks that claim the same elements.
    #[error("its chunks at {first} and {second} overlap")]
    ChunkOverlap {
        /// One chunk's offsets.
        first: String,
        /// The other's.
        second: String,
    },
    /// Elements no chunk holds.
    #[error("its chunks hold {held} of its {numel} elements; the first missing is at {missing}")]
    ChunkGap {
        /// Elements the chunks hold.
        held: u64,
        /// Elements the tensor has.
        numel: u64,
        /// The first element not held, as an index.
        missing: String,
    },
    /// A shape whose element count does not fit 64 bits, or whose bytes
    /// do not.
    #[error("shape {shape:?} is too large")]
    TooLarge {
        /// Its claimed shape.
        shape: Vec<u64>,
    },
    /// A chunk with no storage entry in the metadata.
    #[error("no storage entry for its chunk at {chunk}")]
    NoStorage {
        /// The chunk's offsets.
        chunk: String,
    },
    /// An item file named with a path, not a file of the folder.
    #[error("storage file {0:?} is not a file name in the checkpoint's folder")]
    FileName(String),
    /// An item whose range is not inside its file.
    #[error("the item of its chunk at {chunk} is {length} bytes at {offset} in {file:?}, which has {file_len}")]
    ItemOutside {
        /// The chunk's offsets.
        chunk: String,
        /// The `.distcp` file.
        file: String,
        /// The item's first byte.
        offset: u64,
        /// Its claimed length.
        length: u64,
        /// The file's length.
        file_len: u64,
    },
    /// Two items sharing bytes of a file.
    #[error("items of tensors {first:?} and {second:?} share bytes of {file:?}")]
    ItemOverlap {
        /// The file.
        file: String,
        /// One item's tensor.
        first: String,
        /// The other's.
        second: String,
    },
    /// An item written through a stream transform (compression, encryption).
    #[error("its chunk at {chunk} is written through transform {transforms:?}, which is not read")]
    Transformed {
        /// The chunk's offsets.
        chunk: String,
        /// The transforms' descriptors.
        transforms: String,
    },
    /// An item that is not one tensor of the chunk's shape and dtype.
    #[error("the item of its chunk at {chunk} holds {found}, expected {expected}")]
    ItemTensor {
        /// The chunk's offsets.
        chunk: String,
        /// What the chunk says (dtype and sizes).
        expected: String,
        /// What the item holds.
        found: String,
    },
    /// A safetensors file of `HuggingFaceStorageWriter`'s without the
    /// offsets of its tensors in its metadata's `DCP_SHARDING_INFO`.
    #[error("{file:?}: DCP_SHARDING_INFO {reason}")]
    ShardingInfo {
        /// The file.
        file: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An item shorter than its chunk's bytes: a claim (2^60 elements)
    /// refused before anything is planned on it.
    #[error("the item of its chunk at {chunk} is {length} bytes, fewer than the chunk's {bytes}")]
    ItemShort {
        /// The chunk's offsets.
        chunk: String,
        /// The item's length.
        length: u64,
        /// The chunk's bytes (elements times width), saturated.
        bytes: u64,
    },
}
