//! What every destination is: the protocol it follows ([`Destination`]),
//! and what it hands the copy: the writer of one staged output (a file,
//! standard output, a buffer, an upload), and the file itself where there
//! is one.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio::io::AsyncWrite;

use super::WrittenFile;
use crate::plan::layout::Part;
use crate::plan::{Plan, ShardPlan};
use crate::Result;

/// A set of outputs being written: each kind (files, a stream, objects) is
/// one implementation, driven the same way by the conversion: each shard
/// staged, written and finished, then all committed together, or all
/// abandoned. A new kind of destination is one more implementation.
pub(crate) trait Destination: Send {
    /// Starts writing shard `index` of the plan.
    fn stage<'a>(&'a mut self, index: usize, shard: &'a ShardPlan)
        -> BoxFuture<'a, Result<Staged>>;

    /// Takes back a staged output's writer once its bytes are all written
    /// (and flushed), with what the report says of it.
    fn finish(&mut self, writer: OutWriter, written: &WrittenFile);

    /// Makes every output appear together (the index last, where there is
    /// one); returns the index's line of the report, if it wrote one.
    fn commit<'a>(self: Box<Self>, plan: &'a Plan) -> BoxFuture<'a, Result<Option<WrittenFile>>>;

    /// Abandons every output: nothing staged appears (what a stream has
    /// sent stays sent).
    fn abort(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// The writer of one staged output.
pub(crate) enum OutWriter {
    /// A staged file, or a device or FIFO written in place.
    File(tokio::fs::File),
    /// Standard output.
    Stdout(tokio::io::Stdout),
    /// One small object, sent whole at the commit.
    #[cfg(feature = "object-store")]
    Buffer(Vec<u8>),
    /// A multipart upload, completed at the commit.
    #[cfg(feature = "object-store")]
    Upload(Box<super::objects::upload::PartUpload>),
}

/// One output being written.
pub(crate) struct Staged {
    pub(crate) writer: OutWriter,
    /// The file itself, for copies made beside the writer (the kernel's,
    /// positional writes); `None` for streams and objects.
    pub(crate) file: Option<Arc<std::fs::File>>,
    /// Its name in messages and the report.
    pub(crate) name: String,
}

/// What a destination is told besides where it writes.
#[derive(Debug, Clone)]
pub(crate) struct DestOptions {
    pub(crate) part: Part,
    /// Make files durable before reporting success.
    pub(crate) sync: bool,
    /// Report the index's SHA-256 too.
    pub(crate) checksum: bool,
    /// The plan id expected (`--expect-plan`): recorded with each shard
    /// written, and checked on every shard by `--index-only` (see
    /// [`super::record`]).
    pub(crate) plan_id: Option<String>,
    /// Where the uploads started stay registered until completed or aborted.
    #[cfg(feature = "object-store")]
    pub(crate) uploads: super::objects::upload::PendingUploads,
}

impl OutWriter {
    /// The writer inside.
    fn inner(&mut self) -> Pin<&mut (dyn AsyncWrite + Unpin)> {
        let w: &mut (dyn AsyncWrite + Unpin) = match self {
            OutWriter::File(w) => w,
            OutWriter::Stdout(w) => w,
            #[cfg(feature = "object-store")]
            OutWriter::Buffer(w) => w,
            #[cfg(feature = "object-store")]
            OutWriter::Upload(w) => w,
        };
        Pin::new(w)
    }
}

impl AsyncWrite for OutWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().inner().poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().inner().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_mut().inner().poll_shutdown(cx)
    }
}
