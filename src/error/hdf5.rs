//! What can be wrong with an HDF5 file read for its datasets.

/// An HDF5 file (Keras `save_weights`, anything h5py writes) that breaks
/// a rule of the HDF5 file format, or uses a part of it we do not read.
/// The error carries the byte offset and the dataset's path where there
/// is one; strings from the file are quoted with escapes (`{:?}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Hdf5Error {
    /// A structure that runs past the end of the file.
    #[error(
        "{what} of {len} bytes at offset {at} runs past the end of the file ({file_len} bytes)"
    )]
    PastEnd {
        /// What was being read.
        what: &'static str,
        /// Where it starts.
        at: u64,
        /// Its claimed length.
        len: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A structure whose bytes end before its fields do.
    #[error("{0} ends before its fields do")]
    Truncated(&'static str),
    /// A signature (`TREE`, `SNOD`, `HEAP`, `OHDR`, `OCHK`) not where a
    /// structure should start.
    #[error("no {0} signature where one should be")]
    Signature(&'static str),
    /// A version of a structure this reader does not know.
    #[error("{what} version {version} is not supported")]
    Version {
        /// The structure.
        what: &'static str,
        /// Its version.
        version: u8,
    },
    /// A part of HDF5 that Keras and h5py's defaults never write, which
    /// this reader does not read.
    #[error("{0} is not supported")]
    Unsupported(String),
    /// A structure that contradicts itself or the file.
    #[error("{0}")]
    Malformed(String),
    /// Groups nested deeper than the limit, or a group that contains itself.
    #[error("groups nest deeper than {0} levels (or a group contains itself)")]
    TooDeep(usize),
    /// More B-tree nodes, objects or chunks than the file has room for.
    #[error("more {0} than the file has room for")]
    TooMany(&'static str),
    /// A listing that read more metadata than the file could hold without
    /// reaching the same blocks again and again (see `ReadBudget`).
    #[error("listing the file read over {limit} bytes of metadata (8 times the file, plus 64 MiB): its structures reach the same blocks again and again (B-tree nodes or groups linked from many places)")]
    Rereads {
        /// The bound.
        limit: u64,
    },
    /// A name that is not UTF-8.
    #[error("a link name is not UTF-8: {0:?}")]
    NotUtf8(String),
    /// A chunk whose bytes, once decoded, are not the chunk's size.
    #[error("chunk at {offsets:?} decodes to {actual} bytes; its shape makes {expected}")]
    ChunkLength {
        /// The chunk's first element.
        offsets: Vec<u64>,
        /// Its logical byte length.
        expected: u64,
        /// What its filters gave (at most one past the expected length).
        actual: u64,
    },
    /// A chunk whose deflate or LZF stream is corrupt.
    #[error("chunk at {offsets:?}: {detail}")]
    Inflate {
        /// The chunk's first element.
        offsets: Vec<u64>,
        /// The decoder's message.
        detail: String,
    },
    /// Datasets never written (read as their fill value) that add up to
    /// more than the limit: a few bytes of header claiming terabytes.
    #[error("datasets never written add up to {bytes} bytes of fill value; the limit is {limit} (16 times the file, plus 1 MiB)")]
    Unwritten {
        /// Their bytes.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A file shorter than its superblock says it is: cut short.
    #[error("the file is {len} bytes; its superblock says {eof}")]
    CutShort {
        /// The file's length.
        len: u64,
        /// The end of file address.
        eof: u64,
    },
}
