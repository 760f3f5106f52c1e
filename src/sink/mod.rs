//! The sink: writes a planned file to any `AsyncWrite`: the header, then
//! each tensor's bytes in plan order through one bounded buffer.
//!
//! Memory: one buffer of [`SinkOptions::buffer_size`] bytes (allocated on
//! the first tensor that needs it, and no larger than the largest tensor),
//! plus the header, written from the plan's entries in 64 KiB pieces; the
//! tensors are checked against the plan's own header, shared, not copied.
//! Nothing grows with the tensors' bytes.

pub(crate) mod elements;

use std::pin::Pin;
use std::sync::Arc;

use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::cast::Cast;
use crate::header::{EncodedHeader, Header, TensorEntry};
use crate::io_util::fill_async;
use crate::source::TensorData;
use crate::transform::Transform;
use crate::{Error, ErrorKind, Result};
use elements::{ChunkBuffer, Pump};

/// The default buffer: large enough that per-call costs vanish, small
/// enough to keep memory flat.
pub const DEFAULT_BUFFER_SIZE: usize = 4 << 20;

/// How the sink buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SinkOptions {
    /// Bytes moved per read and write; the sink's whole memory for data.
    pub buffer_size: usize,
}

impl SinkOptions {
    /// The default, as a constant: buffers of [`DEFAULT_BUFFER_SIZE`].
    ///
    /// ```
    /// use safetensors_stream::sink::SinkOptions;
    /// assert_eq!(SinkOptions::DEFAULT, SinkOptions::default());
    /// ```
    pub const DEFAULT: SinkOptions = SinkOptions {
        buffer_size: DEFAULT_BUFFER_SIZE,
    };
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions::DEFAULT
    }
}

crate::setters::setters!(SinkOptions { buffer_size: usize });

/// Writes one safetensors file to `W`, checking every tensor against the plan.
///
/// ```
/// use safetensors_stream::{Dtype, header::{encode, Order, TensorMeta}, sink::{Sink, SinkOptions}};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let enc = encode(vec![TensorMeta::new("x", Dtype::U8, [3])], None, Order::Canonical)?;
/// let mut sink = Sink::start(Vec::new(), &enc, SinkOptions::default()).await?;
/// sink.write_tensor(&mut &[1u8, 2, 3][..]).await?;
/// assert_eq!(sink.bytes_written(), enc.header().file_len());
/// let file = sink.finish().await?;
/// assert_eq!(&file[file.len() - 3..], &[1, 2, 3]);
/// # Ok::<(), safetensors_stream::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Sink<W> {
    writer: W,
    /// The plan's header (shared, not copied): each tensor's name and
    /// length, in offset order.
    planned: Arc<Header>,
    next: usize,
    /// Input and cast output, sized by the element pipeline.
    buf: ChunkBuffer,
    buffer_size: usize,
    written: u64,
    output: Option<String>,
    /// Cast elements that overflowed to infinity since last taken.
    overflowed: u64,
}

impl<W: AsyncWrite + Unpin> Sink<W> {
    /// Writes `header`'s bytes to `writer` and readies the sink for its tensors.
    pub async fn start(
        mut writer: W,
        header: &EncodedHeader,
        options: SinkOptions,
    ) -> Result<Self> {
        // (No output name yet: the caller names it.)
        let written = header.write_to(&mut writer).await.map_err(Error::io)?;
        Ok(Sink {
            writer,
            planned: header.header.clone(),
            next: 0,
            buf: ChunkBuffer::EMPTY,
            buffer_size: options.buffer_size.max(1),
            written,
            output: None,
            overflowed: 0,
        })
    }

    /// [`Sink::start`] for the output named `name`: every error about
    /// writing names it, the header's too.
    pub(crate) async fn start_named(
        writer: W,
        header: &EncodedHeader,
        options: SinkOptions,
        name: &str,
    ) -> Result<Self> {
        let sink = Sink::start(writer, header, options).await;
        Ok(sink
            .map_err(|e| e.with_output(name))?
            .with_output_name(name))
    }

    /// Names the output in errors about writing (`out.safetensors`, `-`).
    pub fn with_output_name(mut self, name: impl Into<String>) -> Self {
        self.output = Some(name.into());
        self
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Tensors still to write.
    pub fn remaining(&self) -> usize {
        self.planned.tensors.len() - self.next
    }

    /// The name of the next tensor the plan expects, if any.
    pub fn next_tensor(&self) -> Option<&str> {
        Some(&self.planned.tensors.get(self.next)?.meta.name)
    }

    /// Copies the next planned tensor from `reader`, which must yield exactly
    /// its planned length: fewer or more bytes is an error naming the tensor.
    pub async fn write_tensor<R: AsyncRead + Unpin + ?Sized>(
        &mut self,
        reader: &mut R,
    ) -> Result<u64> {
        self.write_transformed(Pin::new(reader), Transform::Identity, None)
            .await
    }

    /// Copies the next planned tensor from a source's [`TensorData`],
    /// applying its transform to each buffer, then `cast` if given (the
    /// plan's length is then the cast's output length).
    pub async fn write_tensor_data(
        &mut self,
        mut data: TensorData<'_>,
        cast: Option<Cast>,
    ) -> Result<u64> {
        let reader = data.reader.as_mut();
        self.write_transformed(reader, data.transform, cast).await
    }

    async fn write_transformed<R: AsyncRead + ?Sized>(
        &mut self,
        mut reader: Pin<&mut R>,
        transform: Transform,
        cast: Option<Cast>,
    ) -> Result<u64> {
        let Some(len) = self.planned.tensors.get(self.next).map(TensorEntry::len) else {
            return Err(ErrorKind::PastPlan.into());
        };
        let copied = async {
            // The buffer grows to at most buffer_size over the sink's life.
            let mut pump = Pump::new(len, transform, cast, &mut self.buf, self.buffer_size);
            while let Some(input) = pump.next()? {
                let got = fill_async(&mut reader, input).await?;
                let bytes = pump.process(got)?;
                let wrote = self.writer.write_all(bytes).await;
                wrote.map_err(|e| write_error(&self.output, e))?;
                self.written += bytes.len() as u64;
            }
            let more = reader.read(&mut [0u8; 1]).await? != 0;
            self.overflowed += pump.finish(more)?;
            Ok::<_, Error>(())
        };
        if let Err(e) = copied.await {
            return Err(e.with_tensor(self.next_tensor().unwrap_or_default()));
        }
        self.next += 1;
        Ok(len)
    }

    /// How many cast elements overflowed to infinity (finite in, infinite
    /// out) since the last call: call it after each tensor to name it.
    pub fn take_overflowed(&mut self) -> u64 {
        std::mem::take(&mut self.overflowed)
    }

    /// Flushes the writer, so that bytes then written to the same file by
    /// other means (see [`Sink::record_external`]) land after the sink's.
    ///
    /// Not `async` itself: the writer's flush, its error named, for the
    /// caller to await.
    pub(crate) fn flush(&mut self) -> impl std::future::Future<Output = Result<()>> + '_ {
        let output = &self.output;
        let flushed = self.writer.flush();
        flushed.map(move |r| r.map_err(|e| write_error(output, e)))
    }

    /// Writes bytes of the next planned tensors that went through the
    /// element pipeline elsewhere (a blocking thread's, which checked their
    /// lengths); [`Sink::record_external`] then counts those tensors.
    pub(crate) async fn write_external(&mut self, bytes: &[u8]) -> Result<()> {
        let wrote = self.writer.write_all(bytes).await;
        wrote.map_err(|e| write_error(&self.output, e))
    }

    /// Records that the next `count` planned tensors were written to the
    /// sink's destination by other means (a kernel copy into the same file),
    /// `bytes` in all; those must be exactly their planned lengths.
    pub(crate) fn record_external(&mut self, count: usize, bytes: u64) -> Result<()> {
        let range = self.next..self.next.saturating_add(count);
        let Some(tensors) = self.planned.tensors.get(range) else {
            return Err(ErrorKind::PastPlan.into());
        };
        // Laid out back to back: from the first's start to the last's end.
        let expected = tensors.last().map_or(0, |l| l.end - tensors[0].begin);
        if bytes != expected {
            let e = elements::too_short(expected, bytes);
            return Err(e.with_tensor(self.next_tensor().unwrap_or_default()));
        }
        self.next += count;
        self.written += bytes;
        Ok(())
    }

    /// Checks every planned tensor was written, flushes, and returns the writer.
    pub async fn finish(mut self) -> Result<W> {
        let missing = self.remaining();
        if missing > 0 {
            let e = Error::new(ErrorKind::Unfinished { missing });
            return Err(match self.next_tensor() {
                Some(t) => e.with_tensor(t),
                None => e,
            });
        }
        self.flush().await?;
        Ok(self.writer)
    }

    /// Gives up: returns the writer as it is, without flushing. What it holds
    /// is not a valid file; file outputs delete it.
    pub fn abort(self) -> W {
        self.writer
    }
}

/// An error writing to the output, named when the output has a name.
fn write_error(output: &Option<String>, e: std::io::Error) -> Error {
    match output {
        Some(name) => Error::io(e).with_output(name),
        None => Error::io(e),
    }
}
