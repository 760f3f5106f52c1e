//! The destination an output resolved to ([`super::check`]), opened: the
//! files, the stream or the objects, each following the one protocol
//! ([`Destination`]): each output staged and written, then all committed
//! together, or all abandoned.

use std::path::PathBuf;

use futures::future::BoxFuture;

use super::files::FileSet;
use super::target::open_stream;
use super::writer::{DestOptions, Destination, OutWriter, Staged};
use super::{Resolved, WrittenFile};
use crate::plan::{Plan, ShardPlan};
use crate::Result;

/// Readies the destination `resolved` names for `plan`: with
/// `--index-only`, checks every shard is in place first.
pub(crate) async fn open(
    resolved: Resolved,
    plan: &Plan,
    options: DestOptions,
) -> Result<Box<dyn Destination>> {
    Ok(match resolved {
        Resolved::Stream(path, shown) => Box::new(Stream { path, shown }),
        Resolved::Files { shards, index } => Box::new(FileSet::open(shards, index, plan, options)?),
        #[cfg(feature = "object-store")]
        Resolved::Objects(url) => {
            Box::new(super::objects::ObjectSet::open(&url, plan, options).await?)
        }
    })
}

/// Standard output (no path), or a device, FIFO or socket, by its name as
/// given: bytes go out as they come, so a failure part-way leaves what was
/// sent (only the exit code tells), and there is nothing to commit. One
/// file: the check refused sharded plans.
struct Stream {
    path: Option<PathBuf>,
    shown: String,
}

impl Destination for Stream {
    fn stage<'a>(&'a mut self, _: usize, _: &'a ShardPlan) -> BoxFuture<'a, Result<Staged>> {
        Box::pin(async move {
            Ok(Staged {
                writer: match &self.path {
                    None => OutWriter::Stdout(tokio::io::stdout()),
                    Some(path) => OutWriter::File(open_stream(path).await?),
                },
                file: None,
                name: self.shown.clone(),
            })
        })
    }

    fn finish(&mut self, _: OutWriter, _: &WrittenFile) {}

    fn commit<'a>(self: Box<Self>, _: &'a Plan) -> BoxFuture<'a, Result<Option<WrittenFile>>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    fn abort(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}
