//! Everything a conversion can be told.

use std::sync::Arc;

use crate::copy::policy::Routes;
use crate::error::NoticeFn;
use crate::observe::Progress;
use crate::plan::layout::Part;
use crate::plan::PlanOptions;
use crate::sink::SinkOptions;
use crate::source::SourceOptions;

/// Everything a conversion can be told. Start from the default and set what
/// differs:
///
/// ```
/// use safetensors_stream::{ConvertOptions, Dtype, PlanOptions};
///
/// let options = ConvertOptions::default()
///     .plan(PlanOptions::default().cast_all(Some(Dtype::BF16)))
///     .sync(false);
/// assert!(!options.sync);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ConvertOptions {
    /// How inputs are read.
    pub source: SourceOptions,
    /// What to take and how to lay it out.
    pub plan: PlanOptions,
    /// The sink's buffer.
    pub sink: SinkOptions,
    /// fsync files and their folder before reporting success (default on).
    pub sync: bool,
    /// Told of notable events and warnings as they happen; `None` keeps quiet.
    pub notice: Option<NoticeFn>,
    /// Told how the writing advances.
    pub progress: Option<Arc<dyn Progress>>,
    /// Compute each output file's SHA-256 while streaming.
    pub checksum: bool,
    /// The routes tensors may take straight into an output file: all (the
    /// default), or none ([`fast_path`](Self::fast_path) off).
    pub(crate) routes: Routes,
    /// Allow the output to replace one of the inputs (refused by default:
    /// see [`dry_run`](super::dry_run)). The input is still read from
    /// its old bytes, and replaced atomically at the end.
    pub overwrite_input: bool,
    /// Which files of a sharded plan to write: all (the default), one
    /// shard (`--shard K`), or the index alone (`--index-only`).
    pub part: Part,
    /// The multipart uploads the conversion starts and has not completed:
    /// after dropping a conversion part-way (a signal), abort them with
    /// [`PendingUploads::abort_all`](super::PendingUploads::abort_all).
    /// Clones of these options share it.
    #[cfg(feature = "object-store")]
    pub uploads: super::PendingUploads,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            source: SourceOptions::DEFAULT,
            plan: PlanOptions::DEFAULT,
            sink: SinkOptions::DEFAULT,
            sync: true,
            notice: None,
            progress: None,
            checksum: false,
            routes: Routes::ALL,
            overwrite_input: false,
            part: Part::All,
            #[cfg(feature = "object-store")]
            uploads: Default::default(),
        }
    }
}

crate::setters::setters!(ConvertOptions {
    source: SourceOptions,
    plan: PlanOptions,
    sink: SinkOptions,
    sync: bool,
    notice: Option<NoticeFn>,
    progress: Option<Arc<dyn Progress>>,
    checksum: bool,
    overwrite_input: bool,
    part: Part,
});

impl ConvertOptions {
    /// Copy tensors whose bytes lie in files straight into an output file,
    /// by the kernel where they pass unchanged (default on). Off, every
    /// byte goes through the async sink; the output is the same either way.
    #[must_use]
    pub fn fast_path(mut self, on: bool) -> Self {
        self.routes = if on { Routes::ALL } else { Routes::NONE };
        self
    }

    /// Which routes into an output file may be taken, one by one, and how
    /// verbatim bytes are copied: for the conformance suite, which forces
    /// each in turn.
    #[cfg(any(test, feature = "internals"))]
    #[must_use]
    pub fn routes(mut self, routes: Routes) -> Self {
        self.routes = routes;
        self
    }
}

impl std::fmt::Debug for ConvertOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConvertOptions")
            .field("source", &self.source)
            .field("plan", &self.plan)
            .field("sink", &self.sink)
            .field("sync", &self.sync)
            .field("notice", &self.notice.is_some())
            .field("progress", &self.progress.is_some())
            .field("checksum", &self.checksum)
            .field("routes", &self.routes)
            .field("overwrite_input", &self.overwrite_input)
            .field("part", &self.part)
            .finish()
    }
}
