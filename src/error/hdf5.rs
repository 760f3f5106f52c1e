//! What can be wrong with an HDF5 file read for its datasets.

/// An HDF5 file (Keras `save_weights`, anything h5py writes) that breaks
/// a rule of the HDF5 file format, or uses a part of it we do not read.
/// The error carries the byte offset and the dataset's path where there
/// is one; strings from the file are quoted with escapes (`{:?}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum Hdf5Error {
    #[error(
        "{what} of {len} bytes at offset {at} runs past the end of the file ({file_len} bytes)"
    )]
    PastEnd {
        what: &'static str,
        at: u64,
        len: u64,
        file_len: u64,
    },
    #[error("{0} ends before its fields do")]
    Truncated(&'static str),
    /// A signature (`TREE`, `SNOD`, `HEAP`, `OHDR`, `OCHK`) not where a
    /// structure should start.
    #[error("no {0} signature where one should be")]
    Signature(&'static str),
    /// A version of a structure this reader does not know.
    #[error("{what} version {version} is not supported")]
    Version { what: &'static str, version: u8 },
    /// A part of HDF5 that Keras and h5py's defaults never write, which
    /// this reader does not read.
    #[error("{0} is not supported")]
    Unsupported(String),
    /// A structure that contradicts itself or the file.
    #[error("{0}")]
    Malformed(String),
    #[error("groups nest deeper than {0} levels (or a group contains itself)")]
    TooDeep(usize),
    /// More B-tree nodes, objects or chunks than the file has room for.
    #[error("more {0} than the file has room for")]
    TooMany(&'static str),
    /// A listing that read more metadata than the file could hold without
    /// reaching the same blocks again and again (see `ReadBudget`).
    #[error("listing the file read over {limit} bytes of metadata (8 times the file, plus 64 MiB): its structures reach the same blocks again and again (B-tree nodes or groups linked from many places)")]
    Rereads { limit: u64 },
    #[error("a link name is not UTF-8: {0:?}")]
    NotUtf8(String),
    /// A chunk whose bytes, once decoded, are not the chunk's size.
    #[error("chunk at {offsets:?} decodes to {actual} bytes; its shape makes {expected}")]
    ChunkLength {
        offsets: Vec<u64>,
        expected: u64,
        actual: u64,
    },
    /// A chunk whose deflate or LZF stream is corrupt.
    #[error("chunk at {offsets:?}: {detail}")]
    Inflate { offsets: Vec<u64>, detail: String },
    /// Datasets never written (read as their fill value) that add up to
    /// more than the limit: a few bytes of header claiming terabytes.
    #[error("datasets never written add up to {bytes} bytes of fill value; the limit is {limit} (16 times the file, plus 1 MiB)")]
    Unwritten { bytes: u64, limit: u64 },
    #[error("the file is {len} bytes; its superblock says {eof}")]
    CutShort { len: u64, eof: u64 },
}
