//! Sources: where tensors come from.
//!
//! A [`Source`] lists its tensors (name, dtype, shape) and metadata from
//! headers alone, then produces tensor k's bytes on demand as an async
//! reader. The planner needs only the listing; the sink pulls the bytes in
//! plan order, which is generally not the input's order.
//!
//! Adding an input format (one folder under `source/`, one row in
//! `table::FORMATS`): `docs/internals.md`, "Adding an input format".

/// The [`Source`] getters of a source of one file or one stream (npy,
/// raw), answered by its `self.data.backing()`, a [`FileOrStream`]: in
/// the `impl Source` of each (a macro, as the trait cannot provide them
/// without a public getter of the backing).
macro_rules! file_or_stream_getters {
    () => {
        fn access(&self) -> Access {
            self.data.backing().access()
        }

        fn identity(&self) -> Option<String> {
            self.data.backing().identity()
        }

        fn check_unchanged(&self) -> Result<()> {
            self.data.backing().check_unchanged(&self.listing.input)
        }
    };
}

// The parsers below keep `pub` items the `internals` feature re-exports for
// the tests, benchmarks and fuzz targets; without it they are crate-only.
pub(crate) mod backed;
pub(crate) mod blocking;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
mod checkpoint;
pub(crate) mod codec;
pub(crate) mod cursor;
pub(crate) mod dcp;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod detect;
mod download;
pub(crate) mod format;
mod freed_memory;
pub mod gguf;
pub mod hdf5;
pub(crate) mod hf;
pub(crate) mod input;
pub(crate) mod memory;
pub mod msgpack;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod npy;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod npz;
#[cfg(feature = "object-store")]
pub mod object;
pub mod onnx;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod pytorch;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod quantized;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod raw;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod safetensors;
mod span;
mod spool;
pub(crate) mod table;
#[cfg_attr(not(feature = "internals"), allow(unreachable_pub))]
pub(crate) mod zip;

pub use crate::folder::{passed_over_notice, Resolved};
pub use crate::transform::Transform;
pub use checkpoint::read_file_header;
pub use codec::Codec;
pub use detect::{detect_file, Format};
pub use download::{broken_download, first_bytes};
pub use format::FormatRow;
pub use freed_memory::FreedMemoryHook;
pub use gguf::GgufOptions;
pub use hf::Names;
pub use input::{open_input, open_inputs, open_location, open_locations};
pub use memory::MemorySource;
pub use npy::NpyOptions;
pub use pytorch::row::TorchOptions;
pub use quantized::{QuantError, QuantizedSource};
pub use raw::{RawSpec, RawTensor};
pub use span::{ByteSpan, ReadAt};

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::io::AsyncRead;

use crate::header::{Metadata, TensorMeta};
use crate::Result;

/// `path` itself when it is not a folder, or when it is a folder a format
/// reads whole (a row recognises it by its path: a distributed
/// checkpoint); else the one checkpoint in the folder (its index JSON, or
/// its single model file), saying which files in another form it passed
/// over: the one folder resolution every driver calls.
///
/// ```
/// use safetensors_stream::source::resolve_folder;
///
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("model.safetensors"), b"").unwrap();
/// std::fs::write(dir.path().join("pytorch_model.bin"), b"").unwrap();
/// let r = resolve_folder(dir.path())?;
/// assert_eq!(r.path, dir.path().join("model.safetensors"));
/// assert_eq!(r.passed_over, ["pytorch_model.bin"]);
/// std::fs::write(dir.path().join(".metadata"), b"").unwrap();
/// assert_eq!(resolve_folder(dir.path())?.path, dir.path()); // a distributed checkpoint
///
/// let two = tempfile::tempdir().unwrap();
/// std::fs::write(two.path().join("model.safetensors"), b"").unwrap();
/// std::fs::write(two.path().join("extra.npz"), b"").unwrap();
/// assert!(resolve_folder(two.path()).is_err()); // two model files: which one?
/// # Ok::<(), safetensors_stream::Error>(())
/// ```
pub fn resolve_folder(path: &Path) -> Result<Resolved> {
    if table::FORMATS.by_path(path).is_some() {
        let path = path.to_path_buf();
        return Ok(Resolved {
            path,
            passed_over: Vec::new(),
            file: None,
        });
    }
    crate::folder::resolve_folder(path)
}

/// A reader of one tensor's bytes.
pub type TensorReader<'a> = Pin<Box<dyn AsyncRead + Send + 'a>>;

/// One tensor's bytes as a source delivers them: a reader yielding exactly
/// the tensor's byte length, and the transform that makes them
/// little-endian (the sink applies it to each buffer).
pub struct TensorData<'a> {
    /// The bytes.
    pub reader: TensorReader<'a>,
    /// What the sink does to them before writing.
    pub transform: Transform,
}

impl<'a> TensorData<'a> {
    /// Bytes that are already what the output needs.
    pub fn new(reader: impl AsyncRead + Send + 'a) -> Self {
        TensorData {
            reader: Box::pin(reader),
            transform: Transform::Identity,
        }
    }

    /// Sets the transform.
    pub fn with_transform(mut self, transform: Transform) -> Self {
        self.transform = transform;
        self
    }
}

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
/// Implementors list their tensors up front, in one [`Listing`] they hold
/// ([`Source::listing`]), and open any of them on demand. [`Source::open`]
/// may be called in any order when [`Source::access`] is
/// [`Access::Random`], and only in listing order, each index once, when it
/// is [`Access::Sequential`].
///
/// The name, tensors and metadata are read from the listing
/// ([`Source::input_name`], [`Source::tensors`], [`Source::metadata`]), so a
/// source states them once instead of writing three getters over fields
/// of its own:
///
/// ```
/// use futures::future::{BoxFuture, FutureExt};
/// use safetensors_stream::header::TensorMeta;
/// use safetensors_stream::source::{Listing, Source, TensorData};
/// use safetensors_stream::{Dtype, Result};
///
/// /// Tensors of zeros, made up as they are read.
/// struct Zeros(Listing);
///
/// impl Source for Zeros {
///     fn listing(&self) -> &Listing {
///         &self.0
///     }
///     fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>> {
///         let len = self.0.tensors[k].byte_len().unwrap_or(0);
///         async move { Ok(TensorData::new(tokio::io::repeat(0).take(len))) }.boxed()
///     }
/// }
/// # use tokio::io::AsyncReadExt;
///
/// let mut listing = Listing::new("zeros");
/// listing.tensors.push(TensorMeta::new("w", Dtype::F32, vec![2, 3]));
/// let zeros = Zeros(listing);
/// assert_eq!(zeros.input_name(), "zeros");
/// assert_eq!(zeros.tensors()[0].name, "w");
/// assert!(zeros.metadata().is_none());
/// ```
pub trait Source: Send {
    /// What the source lists, from headers alone: how the input is named
    /// in messages (`model.npz`, `-` for stdin), its tensors in its own
    /// order, its `__metadata__`. The one listing getter a source writes.
    fn listing(&self) -> &Listing;

    /// How the input is named in messages: the listing's
    /// [`input`](Listing::input). Not overridden by the sources here.
    fn input_name(&self) -> &str {
        &self.listing().input
    }

    /// The tensors, in the input's own order: the listing's
    /// [`tensors`](Listing::tensors).
    fn tensors(&self) -> &[TensorMeta] {
        &self.listing().tensors
    }

    /// The input's `__metadata__`, if it has one: the listing's
    /// [`metadata`](Listing::metadata).
    fn metadata(&self) -> Option<&Metadata> {
        self.listing().metadata.as_ref()
    }

    /// Whether the tensors are named as a PyTorch model names them by
    /// `--names hf` ([`Names::Hf`]); false by default.
    fn names_mapped(&self) -> bool {
        false
    }

    /// Groups of tensors that are the same bytes, for `--dedupe-tied`
    /// (see [`Listed::tied_groups`]); none by default.
    fn tied_groups(&self) -> Vec<Vec<usize>> {
        Vec::new()
    }

    /// Groups of tensors that are the same bytes whether or not
    /// `--dedupe-tied` asks to write them once: when it does not, the
    /// run tells what it would save. None by default.
    fn tied_views(&self) -> Vec<Vec<usize>> {
        Vec::new()
    }

    /// Tensor `k`'s type as the input stores it, when the source turns it
    /// into its listed dtype (a GGUF tensor's `Q4_K`, dequantized): what
    /// `--dry-run` shows as its cast. `None`: stored as listed.
    fn stored_as(&self, _k: usize) -> Option<&str> {
        None
    }

    /// The source this one wraps, when it lists another's tensors renamed
    /// or dequantized (`--names hf`, quantized safetensors): then how it
    /// can be read ([`Source::access`]), what it read ([`Source::opened`],
    /// [`Source::identity`], [`Source::check_unchanged`]) and the config
    /// beside it ([`Source::config_beside`]) are the wrapped source's,
    /// without a getter forwarding each. None by default.
    fn wrapped(&self) -> Option<&dyn Source> {
        None
    }

    /// Whether tensors can be opened in any order: in any order by
    /// default, or as the wrapped source can be.
    fn access(&self) -> Access {
        self.wrapped().map_or(Access::Random, |w| w.access())
    }

    /// Opens tensor `k`'s bytes. The reader must yield exactly the tensor's
    /// byte length; the sink checks and names the tensor if it does not.
    fn open(&mut self, k: usize) -> BoxFuture<'_, Result<TensorData<'_>>>;

    /// Says that tensors `order` are read next, in this order: a source
    /// whose reads are requests (an object's ranged GETs) sends for them
    /// ahead, many adjacent ones by one request. A hint only: tensors may
    /// still be opened in any order. Nothing by default.
    fn will_read(&self, _order: &[usize]) {}

    /// Checks the input did not change length since it was opened: called
    /// after every tensor is written, before the output is committed. Its
    /// ranges were validated against the length at open; a file that grew
    /// or shrank under us is being rewritten, and its copy is refused.
    fn check_unchanged(&self) -> Result<()> {
        self.wrapped().map_or(Ok(()), |w| w.check_unchanged())
    }

    /// Opens tensor `k` ahead of time, if the source can while another of
    /// its tensors is being read: its bytes then start coming (an npz
    /// member starts inflating) before the sink gets to it.
    fn open_ahead(&self, _k: usize) -> Option<Result<TensorData<'static>>> {
        None
    }

    /// A way to open tensor `k` as a blocking reader that any thread may
    /// read, if the source has one (a deflated npz member): file-to-file
    /// conversions then read several such tensors at once, each on a
    /// thread of its own, instead of one after another through
    /// [`Source::open`]. The reader must yield exactly what `open` would.
    fn open_blocking(&self, _k: usize) -> Option<OpenBlocking> {
        None
    }

    /// Tensor `k`'s blocking readers in consecutive parts of about
    /// `target` bytes each, cut at the source's block boundaries (whole
    /// FP8 tiles, GGUF super-blocks, GPTQ groups), where the source can
    /// start reading anywhere such: the copy engine then reads the parts of
    /// one large tensor side by side, on every core. `None` where it
    /// cannot, or where the tensor is not longer than `target`: then
    /// [`Source::open_blocking`] reads it whole. The parts' bytes, one after
    /// another, are exactly what `open_blocking` would yield.
    fn open_blocking_parts(&self, _k: usize, _target: u64) -> Option<Vec<BlockingPart>> {
        None
    }

    /// What the input is, as of its opening, for a plan's id
    /// ([`crate::plan::plan_id`]) when it reports nothing it read
    /// ([`Source::opened`], which takes precedence): a file's length and
    /// modification time, an object's ETag. Runs of one fan-out compare plan ids, so a worker that
    /// sees another version of an input refuses instead of mixing versions.
    /// `None` where the input has no identity to give (standard input).
    fn identity(&self) -> Option<String> {
        self.wrapped()?.identity()
    }

    /// Where tensor `k`'s bytes lie in a file, if they lie there as they
    /// are (up to a byte swap). File-to-file conversions then copy them with
    /// positional reads, or in the kernel, instead of through [`Source::open`].
    fn file_span(&self, _k: usize) -> Option<FileSpan> {
        None
    }

    /// Where tensor `k`'s bytes lie as they are (little-endian, nothing to
    /// undo), for readers that pick pieces out of them with positional
    /// reads (dequantization reads a piece's codes and the scales that
    /// cover it): a file's span by default, an object's ranges for an
    /// object.
    fn byte_span(&self, k: usize) -> Option<ByteSpan> {
        let span = self.file_span(k)?;
        (span.transform == Transform::Identity).then(|| ByteSpan {
            bytes: span.file,
            offset: span.offset,
            len: span.len,
        })
    }

    /// The text of the `config.json` beside the input, when the source
    /// read it itself (an object's sibling); `None` where it is a file to
    /// read beside the input's path, or there is none.
    fn config_beside(&self) -> Option<&[u8]> {
        self.wrapped()?.config_beside()
    }

    /// Every file or object this source read, each with its identity as
    /// of opening: the location it was opened from (which a format's row
    /// receives with its input, [`open_location`]) first, then what it read
    /// beyond it (an index's shards). What an output is checked against, so
    /// that no output replaces an input. None by default (a source made in
    /// memory); a source that wraps another reports the other's.
    fn opened(&self) -> Vec<crate::location::Opened> {
        self.wrapped().map_or_else(Vec::new, |w| w.opened())
    }

    /// The pieces tensor `k` is stored in, when the input cuts it (a
    /// distributed checkpoint's chunks, one per rank): what `inspect`
    /// shows of how it is cut. Empty for a tensor stored whole.
    fn pieces(&self, _k: usize) -> Vec<StoredPiece> {
        Vec::new()
    }
}

/// A piece of a tensor stored apart from its others: the block of the
/// tensor it holds, and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPiece {
    /// Its first element's index in the whole tensor, per dimension.
    pub offsets: Vec<u64>,
    /// Its sizes.
    pub sizes: Vec<u64>,
    /// The file holding it, named as the input names it.
    pub file: String,
    /// Where its record begins there.
    pub offset: u64,
    /// Its record's bytes (the piece's and what describes them).
    pub length: u64,
}

/// Opens a tensor's bytes as a blocking reader, on whatever thread calls
/// it: the reader, and the transform that makes its bytes little-endian.
/// Cheap to hold until called (no buffers, no file handles of its own).
pub type OpenBlocking = Box<dyn FnOnce() -> Result<(BlockingRead, Transform)> + Send>;

/// One part of a tensor read side by side with its others
/// ([`Source::open_blocking_parts`]): its length in bytes, as
/// [`OpenBlocking`] yields them, and how to open it.
pub struct BlockingPart {
    /// Its bytes (a whole number of the tensor's elements).
    pub len: u64,
    /// Opens it.
    pub open: OpenBlocking,
}

/// A blocking reader of one tensor's bytes.
pub type BlockingRead = Box<dyn std::io::Read + Send>;

/// A tensor's bytes in a file: `len` bytes at `offset`.
#[derive(Debug, Clone)]
pub struct FileSpan {
    /// The file.
    pub file: Arc<std::fs::File>,
    /// Where the tensor's first byte is.
    pub offset: u64,
    /// The tensor's bytes in the file.
    pub len: u64,
    /// What makes them little-endian.
    pub transform: Transform,
    /// A CRC-32 to check over `[crc_from, offset + len)` (an npz member).
    pub crc: Option<CrcCheck>,
}

/// A checksum that bytes ending with a tensor's must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrcCheck {
    /// The CRC-32 the bytes must have.
    pub expected: u32,
    /// Where the checked bytes begin (at or before the tensor's offset).
    pub from: u64,
}

crate::setters::options! {
    /// Options that change how inputs are read: those of every input, and
    /// each format's own.
    ///
    /// ```
    /// use safetensors_stream::source::{NpyOptions, SourceOptions, TorchOptions};
    /// use safetensors_stream::Dtype;
    ///
    /// let options = SourceOptions::default()
    ///     .npy(NpyOptions::default().void_as(Some(Dtype::BF16)))
    ///     .torch(TorchOptions::default().root(Some("model".into())));
    /// assert_eq!(options.npy.void_as, Some(Dtype::BF16));
    /// assert_eq!(SourceOptions::DEFAULT, SourceOptions::default());
    /// ```
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SourceOptions {
        /// Read every input as a raw dump laid out like this (dtype, shape and
        /// offset per tensor); compressed dumps are unwrapped when their name
        /// ends in .gz, .zst, .xz or .bz2.
        pub raw: Option<raw::RawSpec> = None,
        /// The tensor name for a single-array input (.npy), instead of the file stem.
        pub name: Option<String> = None,
        /// Numpy inputs (.npy, .npz).
        pub npy: npy::NpyOptions = npy::NpyOptions::DEFAULT,
        /// PyTorch checkpoints.
        pub torch: pytorch::row::TorchOptions = pytorch::row::TorchOptions::DEFAULT,
        /// GGUF files.
        pub gguf: gguf::GgufOptions = gguf::GgufOptions::DEFAULT,
        /// Quantized tensors (GGUF blocks; FP8, GPTQ, AWQ, bitsandbytes and NVFP4
        /// weights in safetensors) are dequantized to this dtype: F32, F16 or
        /// BF16 (`--dequantize`, `--dequantize-to`). GGUF inputs are always
        /// dequantized, to BF16 when this is `None`; quantized safetensors are
        /// copied as they are when it is `None`.
        pub dequantize: Option<crate::Dtype> = None,
        /// Only the listing (names, dtypes, shapes, metadata) is wanted, as by
        /// `inspect`: a safetensors stream (`-`) is read up to the end of its
        /// header instead of spooled whole, and its data cannot be read.
        pub listing_only: bool = false,
        /// Called between the phases of opening a large input, once a phase
        /// freed much memory (`convert` hands it back to the system then).
        pub freed_memory: FreedMemoryHook = FreedMemoryHook::NONE,
        /// TensorFlow (HDF5) and Flax (MessagePack) checkpoints of
        /// transformers: name, lay out and shape the tensors as the PyTorch
        /// model's state dict ([`Names::Hf`], `--names hf`); other inputs
        /// are refused with it.
        pub names: Names = Names::Stored,
        /// The bounds on what an input may make us build or write
        /// ([`Limits`](crate::limits::Limits), `--limit`).
        pub limits: crate::limits::Limits = crate::limits::Limits::DEFAULT,
    }
}

/// What the planner reads of an input: its [`Listing`] (name, tensors,
/// metadata), and what an opened source adds to it. Sources are listed as
/// they are, without copying a million names.
pub trait Listed {
    /// Its input's name, its tensors in its own order, its metadata.
    fn listing(&self) -> &Listing;

    /// Its identity as of its opening ([`Source::identity`]); a detached
    /// listing has none.
    fn identity(&self) -> Option<String> {
        None
    }

    /// How its tensors can be read ([`Source::access`]): a plan asks a
    /// forward-only input for its tensors in its own order. Any order by
    /// default.
    fn access(&self) -> Access {
        Access::Random
    }

    /// Groups of its tensors (indices into its listing's tensors, each group
    /// in the input's order) that are the same bytes, reported when
    /// `--dedupe-tied` asks: the planner writes the first selected member
    /// of each and records the others in the metadata.
    fn tied_groups(&self) -> Vec<Vec<usize>> {
        Vec::new()
    }

    /// Tensor `k`'s type as the input stores it when it is not its
    /// dtype ([`Source::stored_as`]); none by default.
    fn stored_as(&self, _k: usize) -> Option<&str> {
        None
    }
}

impl Listed for Listing {
    fn listing(&self) -> &Listing {
        self
    }
}

impl Listed for Box<dyn Source + '_> {
    fn listing(&self) -> &Listing {
        Source::listing(self.as_ref())
    }

    fn access(&self) -> Access {
        Source::access(self.as_ref())
    }
    /// The versions of every file and object the source reports it read
    /// ([`Source::opened`]: an index and each of its shards), in order;
    /// [`Source::identity`] for a source that reports none (one made by
    /// the caller). `None` when one of them has no version (a pipe).
    fn identity(&self) -> Option<String> {
        let read = Source::opened(self.as_ref());
        if read.is_empty() {
            return Source::identity(self.as_ref());
        }
        let versions: Option<Vec<String>> = read.iter().map(|o| o.identity.version()).collect();
        versions.map(|v| v.join(","))
    }

    fn tied_groups(&self) -> Vec<Vec<usize>> {
        Source::tied_groups(self.as_ref())
    }

    fn stored_as(&self, k: usize) -> Option<&str> {
        Source::stored_as(self.as_ref(), k)
    }
}

/// What a source lists from headers alone, before any tensor's bytes:
/// every source holds one ([`Source::listing`]), and what the planner
/// reads of a source is its listing (detached with [`Listing::of`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// How the input is named in messages.
    pub input: String,
    /// Its tensors in its own order.
    pub tensors: Vec<TensorMeta>,
    /// Its metadata.
    pub metadata: Option<Metadata>,
}

impl Listing {
    /// An empty listing of the input named `input`: no tensors, no
    /// metadata.
    pub fn new(input: impl Into<String>) -> Listing {
        Listing {
            input: input.into(),
            tensors: Vec::new(),
            metadata: None,
        }
    }

    /// The listing of `source`, detached from it (a copy).
    pub fn of(source: &dyn Source) -> Listing {
        source.listing().clone()
    }
}

/// `len` bytes of `file` from `offset`, as an async reader of its own (the
/// handle is duplicated, so sources can hand out many in turn).
pub(crate) async fn file_range(
    file: &std::fs::File,
    offset: u64,
    len: u64,
) -> Result<impl AsyncRead + Send + 'static> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut f = tokio::fs::File::from_std(file.try_clone()?);
    f.seek(std::io::SeekFrom::Start(offset)).await?;
    Ok(f.take(len))
}

/// A file as it was when a source opened it: the length its ranges were
/// checked against, and its modification and status-change times to the
/// nanosecond. A rewrite in place at the same length changes the times
/// (and `touch -d` to put the modification time back changes the
/// status-change time), unless it lands within the same tick of the
/// kernel's file clock as the open (a few milliseconds), or on a
/// filesystem with coarse times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    len: u64,
    times: Option<[(i64, i64); 2]>,
}

impl Stamp {
    /// Stamps `file`, whose ranges were checked against `len` bytes.
    pub(crate) fn of(file: &std::fs::File, len: u64) -> Stamp {
        Stamp {
            len,
            times: file.metadata().ok().map(|m| times(&m)),
        }
    }
}

fn times(m: &std::fs::Metadata) -> [(i64, i64); 2] {
    use std::os::unix::fs::MetadataExt;
    [(m.mtime(), m.mtime_nsec()), (m.ctime(), m.ctime_nsec())]
}

impl Stamp {
    /// The file's identity for a plan id: its length and modification
    /// time, which a copy of the same version keeps on another machine
    /// (`cp -p`, a shared filesystem), unlike the status-change time.
    pub(crate) fn identity(&self) -> String {
        match self.times {
            Some([(s, ns), _]) => format!("len={};mtime={s}.{ns:09}", self.len),
            None => format!("len={}", self.len),
        }
    }
}

/// The identity of a source of several files: theirs, in order.
pub(crate) fn identities<'a>(stamps: impl IntoIterator<Item = &'a Stamp>) -> Option<String> {
    let all: Vec<String> = stamps.into_iter().map(Stamp::identity).collect();
    (!all.is_empty()).then(|| all.join(","))
}

/// A source of one file or one stream (npy, raw), by the file it opened and
/// how that was then (`None`: a stream): its answers to
/// [`Source::access`], [`Source::identity`] and [`Source::check_unchanged`].
pub(crate) struct FileOrStream<'a>(pub(crate) Option<(&'a std::fs::File, &'a Stamp)>);

impl FileOrStream<'_> {
    pub(crate) fn access(&self) -> Access {
        match self.0 {
            Some(_) => Access::Random,
            None => Access::Sequential,
        }
    }

    pub(crate) fn identity(&self) -> Option<String> {
        self.0.map(|(_, opened)| opened.identity())
    }

    pub(crate) fn check_unchanged(&self, input: &str) -> Result<()> {
        self.0
            .map_or(Ok(()), |(file, opened)| unchanged(file, opened, input))
    }
}

/// [`unchanged`] for each of a source's files, beside how it was opened.
pub(crate) fn all_unchanged(
    files: &[Arc<std::fs::File>],
    stamps: &[Stamp],
    input: &str,
) -> Result<()> {
    files
        .iter()
        .zip(stamps)
        .try_for_each(|(f, stamp)| unchanged(f, stamp, input))
}

/// The check behind [`Source::check_unchanged`] for one file.
pub(crate) fn unchanged(file: &std::fs::File, opened: &Stamp, input: &str) -> Result<()> {
    let meta = file.metadata()?;
    let now = meta.len();
    if now != opened.len {
        let e = crate::ErrorKind::InputChanged {
            opened: opened.len,
            now,
        };
        return Err(crate::Error::new(e).with_input(input));
    }
    if opened.times.is_some_and(|t| t != times(&meta)) {
        let e = crate::Error::new(crate::ErrorKind::InputModified);
        return Err(e.with_input(input));
    }
    Ok(())
}
