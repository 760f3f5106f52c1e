//! Stream your own tensors into a safetensors file.
//!
//! Declare every tensor (name, dtype, shape) and the metadata up front: the
//! header is planned from them, byte-exact, before a data byte is written.
//! Then hand over each tensor's bytes **in pieces of any size**, in the
//! file's order ([`Writer::order`]), and [`Writer::finish`]. Every count is
//! checked: a piece for the wrong tensor, a tensor that gets too many or too
//! few bytes, a tensor never written, each is an error naming the tensor.
//!
//! To a path ([`Writer::create`]) the file is written under a temporary name
//! and renamed into place by `finish`; dropping the writer unfinished, or any
//! error, leaves nothing at the path (an existing file there is untouched).
//! To any [`std::io::Write`] ([`Writer::new`]) the bytes stream as they come.
//! [`AsyncWriter`] does the same for tokio's `AsyncWrite`.
//!
//! Memory: the header's bytes and one write buffer of
//! [`WriterOptions::buffer_size`] bytes, whatever the tensors' sizes.
//!
//! ```
//! use safetensors_stream::{Dtype, TensorMeta, Writer, WriterOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("model.safetensors");
//! let tensors = [
//!     TensorMeta::new("bias", Dtype::F32, [2]),
//!     TensorMeta::new("weight", Dtype::F32, [2, 2]),
//! ];
//! let mut w = Writer::create(&path, tensors, WriterOptions::default())?;
//! let order: Vec<String> = w.order().map(str::to_string).collect();
//! for name in &order {
//!     let len = w.tensor(name).unwrap().len() as usize;
//!     // Pieces of any size: here one element (4 bytes) at a time.
//!     for piece in vec![0u8; len].chunks(4) {
//!         w.write(name, piece)?;
//!     }
//! }
//! let planned = w.header().file_len();
//! assert_eq!(w.bytes_written(), planned);
//! assert!(!path.exists()); // nothing at the path until `finish`
//! w.finish()?;
//! assert_eq!(std::fs::metadata(&path)?.len(), planned);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod state;
mod stream;

pub use stream::AsyncWriter;

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::dest::files::{commit_all, StagedFile};
use crate::dest::writeback::Writeback;
use crate::header::{Metadata, Order, TensorEntry, TensorMeta};
use crate::{Error, Result};
use state::WriterState;

/// How a [`Writer`] lays out and writes its file.
///
/// ```
/// use safetensors_stream::{header::Order, WriterOptions};
///
/// let options = WriterOptions::default()
///     .order(Order::AsGiven)
///     .metadata([("format", "pt")])
///     .sync(false);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriterOptions {
    /// The byte layout: the reference writer's (default) or as declared.
    pub order: Order,
    /// The `__metadata__` map, if any.
    pub metadata: Option<Metadata>,
    /// fsync the file and its folder before `finish` returns (file outputs; default on).
    pub sync: bool,
    /// Bytes gathered before a write to the output (default 1 MiB); larger
    /// pieces go straight through.
    pub buffer_size: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            order: Order::Canonical,
            metadata: None,
            sync: true,
            buffer_size: 1 << 20,
        }
    }
}

impl WriterOptions {
    /// Sets the byte layout.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Sets the `__metadata__` map.
    pub fn metadata<K: Into<String>, V: Into<String>>(
        mut self,
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let map = entries
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self.metadata = Some(map);
        self
    }

    /// Whether to fsync before `finish` returns.
    pub fn sync(mut self, sync: bool) -> Self {
        self.sync = sync;
        self
    }

    /// Sets the write buffer's size.
    pub fn buffer_size(mut self, bytes: usize) -> Self {
        self.buffer_size = bytes;
        self
    }
}

/// Streams declared tensors into a safetensors file, piece by piece. See
/// the [module docs](self).
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: BufWriter<W>,
    state: WriterState,
    /// For [`Writer::create`]: the temp file to rename into place.
    stage: Option<StagedFile>,
    sync: bool,
    /// For [`Writer::create`] with `sync`: writeback started as bytes land.
    writeback: Option<Writeback>,
}

impl Writer<std::fs::File> {
    /// A writer to the file at `path`, which appears (atomically) only when
    /// [`Writer::finish`] succeeds. An existing file keeps its mode.
    pub fn create(
        path: impl AsRef<Path>,
        tensors: impl IntoIterator<Item = TensorMeta>,
        options: WriterOptions,
    ) -> Result<Self> {
        let path = path.as_ref();
        let state = WriterState::plan(tensors, &options)?;
        let (stage, _) = StagedFile::create(path)?;
        let file = stage
            .handle()
            .map_err(|e| Error::io(e).with_output(path.display()))?;
        let mut w = Writer::start(file, state, &options)?;
        if options.sync {
            let handle = stage.handle();
            let handle = handle.map_err(|e| Error::io(e).with_output(path.display()))?;
            w.writeback = Some(Writeback::new(std::sync::Arc::new(handle)));
        }
        w.stage = Some(stage);
        w.state.name_output(path.display());
        Ok(w)
    }
}

impl<W: Write> Writer<W> {
    /// A writer to `out` (a file, a pipe, standard output, a `Vec<u8>`...).
    /// The header is written now; an error after that leaves `out` holding
    /// a partial file, which only [`Writer::create`] cleans up.
    ///
    /// ```
    /// use safetensors_stream::{Dtype, TensorMeta, Writer, WriterOptions};
    ///
    /// let mut w = Writer::new(Vec::new(), [TensorMeta::new("x", Dtype::U8, [3])], WriterOptions::default())?;
    /// w.write("x", &[1, 2])?;
    /// w.write("x", &[3])?;
    /// let bytes = w.finish()?;
    /// assert_eq!(&bytes[bytes.len() - 3..], &[1, 2, 3]);
    /// # Ok::<(), safetensors_stream::Error>(())
    /// ```
    pub fn new(
        out: W,
        tensors: impl IntoIterator<Item = TensorMeta>,
        options: WriterOptions,
    ) -> Result<Self> {
        let state = WriterState::plan(tensors, &options)?;
        Writer::start(out, state, &options)
    }

    fn start(out: W, state: WriterState, options: &WriterOptions) -> Result<Self> {
        let mut w = Writer {
            out: BufWriter::with_capacity(options.buffer_size.max(1), out),
            state,
            stage: None,
            sync: options.sync,
            writeback: None,
        };
        let header = w.state.header_bytes();
        w.out
            .write_all(header)
            .map_err(|e| w.state.write_error(e))?;
        Ok(w)
    }

    /// The tensors' names in the file's order: the order their bytes must
    /// be written in.
    pub fn order(&self) -> impl Iterator<Item = &str> + '_ {
        self.state.order()
    }

    /// Where tensor `name` lies in the file (its place and length), if declared.
    pub fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        self.state.tensor(name)
    }

    /// The header as planned: every tensor in file order, the metadata, N.
    pub fn header(&self) -> &crate::header::Header {
        self.state.header()
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.state.bytes_written()
    }

    /// Appends `bytes` to tensor `name`. `name` must be the tensor being
    /// written, or the next one once it is complete (tensors of 0 bytes are
    /// skipped); its bytes may not exceed its planned length.
    pub fn write(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.state.accept(name, bytes.len())?;
        self.out
            .write_all(bytes)
            .map_err(|e| self.state.write_error(e).with_tensor(name))?;
        if let Some(writeback) = &self.writeback {
            writeback.landed(bytes.len() as u64);
        }
        Ok(())
    }

    /// Appends `len` bytes to tensor `name` that `put` writes straight to
    /// the output, after the buffered bytes: for bytes the caller cannot
    /// lend as a `&[u8]` (memory another thread may write, which `put`
    /// hands to the kernel by pointer). `put` must write exactly `len`
    /// bytes or fail. The counts are checked as for [`Writer::write`].
    ///
    /// ```
    /// use std::io::Write;
    /// use safetensors_stream::{Dtype, TensorMeta, Writer, WriterOptions};
    ///
    /// let mut w = Writer::new(Vec::new(), [TensorMeta::new("x", Dtype::U8, [3])], WriterOptions::default())?;
    /// w.write("x", &[1])?; // buffered, so it lands before what `put` writes
    /// w.write_with("x", 2, |out| out.write_all(&[2, 3]))?;
    /// let bytes = w.finish()?;
    /// assert_eq!(&bytes[bytes.len() - 3..], &[1, 2, 3]);
    /// # Ok::<(), safetensors_stream::Error>(())
    /// ```
    pub fn write_with(
        &mut self,
        name: &str,
        len: usize,
        put: impl FnOnce(&mut W) -> std::io::Result<()>,
    ) -> Result<()> {
        self.state.accept(name, len)?;
        if !self.out.buffer().is_empty() {
            self.out
                .flush()
                .map_err(|e| self.state.write_error(e).with_tensor(name))?;
        }
        put(self.out.get_mut()).map_err(|e| self.state.write_error(e).with_tensor(name))?;
        if let Some(writeback) = &self.writeback {
            writeback.landed(len as u64);
        }
        Ok(())
    }

    /// Checks that every tensor got all its bytes, flushes, and (for
    /// [`Writer::create`]) syncs and renames the file into place. Returns
    /// the output.
    pub fn finish(mut self) -> Result<W> {
        self.state.finish()?;
        self.out.flush().map_err(|e| self.state.write_error(e))?;
        let stage = self.stage.take();
        let out = self
            .out
            .into_inner()
            .map_err(|e| self.state.write_error(e.into_error()))?;
        if let Some(stage) = stage {
            if self.sync {
                let file = stage.handle()?;
                file.sync_all().map_err(|e| self.state.write_error(e))?;
            }
            commit_all(vec![stage], self.sync)?;
        }
        Ok(out)
    }
}
