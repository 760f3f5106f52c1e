//! The one protocol every destination follows: checked and resolved first
//! ([`super::check`]), then each output staged and written, then all
//! committed together, or all abandoned.

use std::path::PathBuf;

use super::files::FileSet;
use super::target::open_stream;
use super::writer::{DestOptions, OutWriter, Staged};
use super::{Resolved, WrittenFile};
use crate::plan::{Plan, ShardPlan};
use crate::Result;

/// A set of outputs being written.
pub(crate) enum Destination {
    Files(FileSet),
    /// Standard output (no path), or a device, FIFO or socket, by its name
    /// as given: bytes go out as they come, so a failure part-way leaves
    /// what was sent (only the exit code tells), and there is nothing to
    /// commit. One file: the check refused sharded plans.
    Stream(Option<PathBuf>, String),
    #[cfg(feature = "object-store")]
    Objects(super::objects::ObjectSet),
}

impl Destination {
    /// Readies the destination `resolved` names for `plan`: with
    /// `--index-only`, checks every shard is in place first.
    pub(crate) async fn open(
        resolved: Resolved,
        plan: &Plan,
        options: DestOptions,
    ) -> Result<Destination> {
        Ok(match resolved {
            Resolved::Stream(path, shown) => Destination::Stream(path, shown),
            Resolved::Files { shards, index } => {
                Destination::Files(FileSet::open(shards, index, plan, options)?)
            }
            #[cfg(feature = "object-store")]
            Resolved::Objects(url) => {
                let set = super::objects::ObjectSet::open(&url, plan, options).await?;
                Destination::Objects(set)
            }
        })
    }

    /// Starts writing shard `index` of the plan.
    #[cfg_attr(not(feature = "object-store"), allow(unused_variables))]
    pub(crate) async fn stage(&mut self, index: usize, shard: &ShardPlan) -> Result<Staged> {
        match self {
            Destination::Files(f) => f.stage(index),
            Destination::Stream(path, shown) => Ok(Staged {
                writer: match path {
                    None => OutWriter::Stdout(tokio::io::stdout()),
                    Some(path) => OutWriter::File(open_stream(path).await?),
                },
                file: None,
                name: shown.clone(),
            }),
            #[cfg(feature = "object-store")]
            Destination::Objects(o) => o.stage(index, shard).await,
        }
    }

    /// Takes back a staged output's writer once its bytes are all written
    /// (and flushed), with what the report says of it.
    pub(crate) fn finish(&mut self, writer: OutWriter, written: &WrittenFile) {
        match self {
            Destination::Files(f) => f.finish(writer, written),
            Destination::Stream(..) => {}
            #[cfg(feature = "object-store")]
            Destination::Objects(o) => o.finish(writer, written),
        }
    }

    /// Makes every output appear together (the index last, where there is
    /// one); returns the index's line of the report, if it wrote one.
    pub(crate) async fn commit(self, plan: &Plan) -> Result<Option<WrittenFile>> {
        match self {
            Destination::Files(f) => f.commit(plan).await,
            Destination::Stream(..) => Ok(None),
            #[cfg(feature = "object-store")]
            Destination::Objects(o) => o.commit(plan).await,
        }
    }

    /// Abandons every output: nothing staged appears (what a stream has
    /// sent stays sent).
    pub(crate) async fn abort(self) {
        match self {
            Destination::Files(f) => drop(f),
            Destination::Stream(..) => {}
            #[cfg(feature = "object-store")]
            Destination::Objects(o) => o.abort().await,
        }
    }
}
