//! The async twin of [`Writer`](super::Writer), for tokio programs.

use std::path::Path;

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};

use super::state::WriterState;
use super::WriterOptions;
use crate::dest::files::{close, commit_all, StagedFile};
use crate::header::{Header, TensorEntry, TensorMeta};
use crate::Result;

/// Streams declared tensors into a safetensors file over tokio's
/// `AsyncWrite`; the same contract as [`Writer`](super::Writer).
///
/// ```
/// use safetensors_stream::{AsyncWriter, Dtype, TensorMeta, WriterOptions};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("x.safetensors");
/// let tensors = [TensorMeta::new("x", Dtype::I16, [2])];
/// let mut w = AsyncWriter::create(&path, tensors, WriterOptions::default()).await?;
/// w.write("x", &1i16.to_le_bytes()).await?;
/// w.write("x", &2i16.to_le_bytes()).await?;
/// w.finish().await?;
/// assert!(path.exists());
/// # Ok::<(), safetensors_stream::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct AsyncWriter<W: AsyncWrite + Unpin> {
    out: BufWriter<W>,
    state: WriterState,
    stage: Option<StagedFile>,
    sync: bool,
}

impl AsyncWriter<tokio::fs::File> {
    /// A writer to the file at `path`, which appears (atomically) only when
    /// [`AsyncWriter::finish`] succeeds.
    pub async fn create(
        path: impl AsRef<Path>,
        tensors: impl IntoIterator<Item = TensorMeta>,
        options: WriterOptions,
    ) -> Result<Self> {
        let path = path.as_ref();
        let state = WriterState::plan(tensors, &options)?;
        let (stage, file) = StagedFile::create(path)?;
        let mut w = AsyncWriter::start(file, state, &options).await?;
        w.stage = Some(stage);
        w.state.name_output(path.display());
        Ok(w)
    }
}

impl<W: AsyncWrite + Unpin> AsyncWriter<W> {
    /// A writer to any `AsyncWrite`; the header is written now.
    pub async fn new(
        out: W,
        tensors: impl IntoIterator<Item = TensorMeta>,
        options: WriterOptions,
    ) -> Result<Self> {
        let state = WriterState::plan(tensors, &options)?;
        AsyncWriter::start(out, state, &options).await
    }

    async fn start(out: W, state: WriterState, options: &WriterOptions) -> Result<Self> {
        let mut w = AsyncWriter {
            out: BufWriter::with_capacity(options.buffer_size.max(1), out),
            state,
            stage: None,
            sync: options.sync,
        };
        if let Err(e) = w.out.write_all(w.state.header_bytes()).await {
            return Err(w.state.write_error(e));
        }
        Ok(w)
    }

    /// The tensors' names in the file's order.
    pub fn order(&self) -> impl Iterator<Item = &str> + '_ {
        self.state.order()
    }

    /// Where tensor `name` lies in the file, if declared.
    pub fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        self.state.tensor(name)
    }

    /// The header as planned.
    pub fn header(&self) -> &Header {
        self.state.header()
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.state.bytes_written()
    }

    /// Appends `bytes` to tensor `name`; see [`Writer::write`](super::Writer::write).
    pub async fn write(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.state.accept(name, bytes.len())?;
        match self.out.write_all(bytes).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.state.write_error(e).with_tensor(name)),
        }
    }

    /// Checks every count, flushes, and (for [`AsyncWriter::create`]) syncs
    /// and renames the file into place. Returns the output.
    pub async fn finish(mut self) -> Result<W> {
        self.state.finish()?;
        if let Err(e) = self.out.flush().await {
            return Err(self.state.write_error(e));
        }
        let out = self.out.into_inner();
        let Some(stage) = self.stage.take() else {
            return Ok(out);
        };
        let target = stage.target().to_path_buf();
        let file = tokio::fs::File::from_std(stage.handle()?);
        close(file, self.sync, &target).await?;
        commit_all(vec![stage], self.sync)?;
        Ok(out)
    }
}
