//! The whole job as one library call: inputs and options in, files and a
//! [`Report`] out. The `convert` binary is a thin layer over this. This
//! module only orchestrates: open -> plan -> check -> per shard {stage,
//! copy} -> inputs unchanged? -> commit; the options are [`ConvertOptions`]
//! and what a run tells is a [`Report`].

mod dry_run;
mod options;
mod report;

use std::path::PathBuf;
use std::sync::Mutex;

use crate::copy::policy::CopyPolicy;
use crate::copy::{copy_shard, Direct, Shard, Watch};
#[cfg(feature = "object-store")]
pub use crate::dest::objects::{open_uploads, PendingUploads};
use crate::dest::staged;
use crate::dest::writeback::Writeback;
use crate::dest::writer::DestOptions;
use crate::dest::Resolved;
pub use crate::dest::{Output, WrittenFile};
use crate::error::note::{Note, Notice};
pub use crate::error::NoticeFn;
use crate::location::{Location, Opened};
use crate::observe::ObservedWriter;
pub use crate::plan::layout::{shard_paths, Part};
pub use crate::plan::CastNote;
use crate::plan::{plan, Plan, ShardPlan};
use crate::source::Source;
use crate::{Error, ErrorKind, Result, Warning};
pub use dry_run::{dry_run, DryRun};
pub use options::ConvertOptions;
use report::plan_warnings;
pub use report::Report;

/// Converts the inputs at `inputs` (files of any supported kind, folders
/// for the checkpoint in them, object URLs, or `-` for standard input)
/// into `output`.
///
/// ```
/// use safetensors_stream::convert::{convert, ConvertOptions, Output};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let out = dir.path().join("model.safetensors");
/// let report = convert(
///     &["fixtures/example/model-input.safetensors".into()],
///     &Output::File(out.clone()),
///     &ConvertOptions::default(),
/// ).await?;
/// assert_eq!(report.tensors, 5);
/// assert_eq!(std::fs::read(&out).unwrap(), std::fs::read("fixtures/example/model-input.safetensors").unwrap());
/// # Ok::<(), safetensors_stream::Error>(())
/// # }).unwrap();
/// ```
pub async fn convert(
    inputs: &[PathBuf],
    output: &Output,
    options: &ConvertOptions,
) -> Result<Report> {
    let mut sources = open_inputs(inputs, options).await?;
    convert_sources(&mut sources, output, options).await
}

/// [`convert`] for code that is not async: runs the conversion on a
/// runtime of its own, on the calling thread (plus tokio's blocking pool for
/// file reads), and returns when it is done.
///
/// ```
/// use safetensors_stream::{convert_blocking, ConvertOptions, Output};
///
/// let dir = tempfile::tempdir()?;
/// let out = dir.path().join("model.safetensors");
/// let report = convert_blocking(
///     &["fixtures/example/model.npz".into()],
///     &Output::File(out.clone()),
///     &ConvertOptions::default(),
/// )?;
/// assert_eq!(std::fs::read(&out)?, std::fs::read("fixtures/example/model.safetensors")?);
/// assert_eq!(report.outputs.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Called from inside a tokio runtime it refuses (a runtime cannot block on
/// another): call [`convert`] there and `.await` it.
pub fn convert_blocking(
    inputs: &[PathBuf],
    output: &Output,
    options: &ConvertOptions,
) -> Result<Report> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(ErrorKind::BlockingInRuntime("convert_blocking").into());
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::io)?
        .block_on(convert(inputs, output, options))
}

/// Opens every input (files of any supported kind, folders, object URLs,
/// or `-`), reading headers only: each is parsed once into the
/// [`Location`] it names, then opened ([`open_locations`]).
pub async fn open_inputs(
    inputs: &[PathBuf],
    options: &ConvertOptions,
) -> Result<Vec<Box<dyn Source>>> {
    open_locations(&Location::parse_all(inputs)?, options).await
}

/// Opens every input at `locations`, reading headers only. Each source
/// reports the files and objects it read ([`Source::opened`]): what the
/// output is checked against.
///
/// Not `async` itself: it hands back the sources' own opening, with the
/// options' notice (none: nothing is told), for the caller to await.
pub fn open_locations<'a>(
    locations: &'a [Location],
    options: &'a ConvertOptions,
) -> impl std::future::Future<Output = Result<Vec<Box<dyn Source>>>> + Send + 'a {
    let notice: Notice<'a> = options.notice.as_deref().unwrap_or(&|_| {});
    crate::source::open_locations(locations, &options.source, notice)
}

/// Plans the conversion of opened sources: the whole layout, every header,
/// before a data byte is read ([`plan`], which also refuses an order that
/// a forward-only source cannot be read in). `--dry-run` stops here.
pub fn plan_sources(sources: &[Box<dyn Source + '_>], options: &ConvertOptions) -> Result<Plan> {
    plan(sources, &options.plan)
}

/// Converts already-opened sources into `output`, after the checks
/// [`dry_run`] lists: an output that is one of the files or objects the
/// sources read ([`Source::opened`]) is refused unless
/// [`ConvertOptions::overwrite_input`].
pub async fn convert_sources(
    sources: &mut [Box<dyn Source + '_>],
    output: &Output,
    options: &ConvertOptions,
) -> Result<Report> {
    let started = std::time::Instant::now();
    let mut plan = plan_sources(sources, options)?;
    let tensors = plan.tensor_count();
    plan.keep_only(options.part);
    // Planning a large input frees about as much as it keeps (the
    // listings' copies, the layout's scratch), some on other threads: the
    // caller may hand it back before the copy allocates its buffers.
    options.source.freed_memory.after_phase(tensors);
    write_planned(sources, &plan, output, options, started).await
}

/// [`convert_sources`] in two steps: `plan` is made by [`plan_sources`] from
/// these `sources` under these `options` (or elsewhere: a worker of a
/// fan-out loads the plan the others use), and may be looked at before
/// anything is written. [`Report::seconds`] counts from this call.
///
/// A plan whose tensors are not in `sources` is refused before anything is
/// written (a plan of other sources of the same shape writes their
/// tensors' bytes under its names: make it from these), and so is one that
/// asks a forward-only source for its tensors in another order.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use safetensors_stream::convert::{convert_planned, plan_sources, ConvertOptions, Output};
/// use safetensors_stream::source::{MemorySource, Source};
/// use safetensors_stream::Dtype;
///
/// let mut weights = MemorySource::new("weights");
/// weights.push("w", Dtype::U8, [2], vec![7, 9])?;
/// let mut other = MemorySource::new("other");
/// other.push("w", Dtype::U8, [3], vec![1, 2, 3])?;
///
/// let options = ConvertOptions::default();
/// let mut sources: Vec<Box<dyn Source>> = vec![Box::new(weights)];
/// let plan = plan_sources(&sources, &options)?;
/// let dir = tempfile::tempdir().unwrap();
/// let out = Output::File(dir.path().join("out.safetensors"));
///
/// // A plan of other tensors is refused, and nothing is written.
/// let mut others: Vec<Box<dyn Source>> = vec![Box::new(other)];
/// assert!(convert_planned(&mut others, &plan, &out, &options).await.is_err());
/// assert!(!dir.path().join("out.safetensors").exists());
///
/// let report = convert_planned(&mut sources, &plan, &out, &options).await?;
/// assert_eq!(report.data_bytes, 2);
/// # Ok::<(), safetensors_stream::Error>(())
/// # }).unwrap();
/// ```
pub async fn convert_planned(
    sources: &mut [Box<dyn Source + '_>],
    plan: &Plan,
    output: &Output,
    options: &ConvertOptions,
) -> Result<Report> {
    plan.check_made_from(sources)?;
    let started = std::time::Instant::now();
    write_planned(sources, plan, output, options, started).await
}

/// Every file and object `sources` read: what no output may be.
pub(crate) fn read_by(sources: &[Box<dyn Source + '_>]) -> Vec<Opened> {
    sources.iter().flat_map(|s| s.opened()).collect()
}

async fn write_planned(
    sources: &mut [Box<dyn Source + '_>],
    plan: &Plan,
    output: &Output,
    options: &ConvertOptions,
    started: std::time::Instant,
) -> Result<Report> {
    let mut warnings = plan_warnings(plan, sources);
    let (part, overwrite) = (options.part, options.overwrite_input);
    let read = read_by(sources);
    let (resolved, checked) = crate::dest::check(&read, output, plan, part, overwrite)?;
    warnings.extend(checked);
    let overflows = Mutex::new(Vec::new());
    let tell = |warnings: &[Warning]| {
        if let Some(notice) = &options.notice {
            warnings
                .iter()
                .for_each(|w| notice(&Note::Warning(w.clone())));
        }
    };
    tell(&warnings);
    if let Some(p) = &options.progress {
        // Progress counts only the shards this run writes.
        let shards = plan.shards.iter().enumerate();
        let part = shards.filter(|(i, _)| options.part.writes_shard(*i));
        p.start(plan, part.map(|(_, s)| s.file_len()).sum());
    }
    let outputs = write_outputs(resolved, plan, sources, options, &overflows).await?;
    if let Some(p) = &options.progress {
        p.finish();
    }
    let overflows = overflows.into_inner().unwrap_or_else(|e| e.into_inner());
    tell(&overflows);
    warnings.extend(overflows);
    Ok(Report {
        inputs: sources.iter().map(|s| s.listing().input.clone()).collect(),
        outputs,
        tensors: plan.tensor_count(),
        data_bytes: plan.data_len(),
        seconds: started.elapsed().as_secs_f64(),
        casts: plan.cast_notes(),
        warnings,
    })
}

/// The shard this run writes after shard `index`, if any.
fn next_written(plan: &Plan, index: usize, part: Part) -> Option<&ShardPlan> {
    let mut after = plan.shards.iter().enumerate().skip(index + 1);
    after.find(|(i, _)| part.writes_shard(*i)).map(|(_, s)| s)
}

/// Writes the plan where the checked output resolved to, one protocol for
/// files, streams and objects: each shard staged and written, the inputs
/// checked unchanged, then all committed together, or all abandoned.
async fn write_outputs(
    resolved: Resolved,
    plan: &Plan,
    sources: &mut [Box<dyn Source + '_>],
    options: &ConvertOptions,
    overflows: &Mutex<Vec<Warning>>,
) -> Result<Vec<WrittenFile>> {
    let dest_options = DestOptions {
        part: options.part,
        sync: options.sync,
        checksum: options.checksum,
        plan_id: options.plan.expect_plan.clone(),
        #[cfg(feature = "object-store")]
        uploads: options.uploads.clone(),
    };
    let mut dest = staged::open(resolved, plan, dest_options).await?;
    // This conversion's copy decisions, shard after shard.
    let mut policy = CopyPolicy::new(options.routes, options.checksum);
    let shards = async {
        let mut all = Vec::new();
        for (index, shard) in plan.shards.iter().enumerate() {
            if !options.part.writes_shard(index) {
                continue;
            }
            let staged = dest.stage(index, shard).await?;
            let w = ObservedWriter::new(staged.writer, options.checksum, options.progress.clone());
            let watch = Watch {
                progress: options.progress.clone(),
                shard: (index, plan.shards.len()),
            };
            let direct = staged.file.filter(|_| policy.file_routes());
            let to = Shard {
                name: &staged.name,
                sink_options: options.sink,
                watch: &watch,
                direct: direct.map(|out| Direct {
                    writeback: options.sync.then(|| Writeback::on_landed(out.clone())),
                    out,
                }),
                overflows: Some(overflows),
                next: next_written(plan, index, options.part),
            };
            let copied = copy_shard(w, shard, sources, to, &mut policy).await?;
            let (writer, sha256) = copied.into_parts();
            let written = WrittenFile {
                path: staged.name,
                bytes: shard.file_len(),
                tensors: shard.refs.len(),
                sha256,
            };
            dest.finish(writer, &written);
            all.push(written);
        }
        // Every range was checked against the inputs' lengths when opened:
        // an input that changed since is being rewritten under us. Refuse
        // the copy (a stream is sent already, but the exit code must not
        // call it good).
        sources.iter().try_for_each(|s| s.check_unchanged())?;
        Ok::<_, Error>(all)
    };
    match shards.await {
        Ok(mut written) => {
            written.extend(dest.commit(plan).await?);
            Ok(written)
        }
        Err(e) => {
            dest.abort().await;
            Err(explained_by_a_changed_input(e, sources))
        }
    }
}

/// A read that ran past the end of an input (an I/O error, unexpected end
/// of file: a positional read of a chunk, a block, a view) is explained by
/// the input having shrunk under us, when it did: that typed error (exit
/// 1, the input and both lengths named, the tensor kept) instead of a bare
/// I/O error that blames the environment.
fn explained_by_a_changed_input(e: Error, sources: &[Box<dyn Source + '_>]) -> Error {
    let eof =
        matches!(e.kind(), ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof);
    let changed = sources.iter().find_map(|s| s.check_unchanged().err());
    match (eof.then_some(changed).flatten(), e.tensor()) {
        (None, _) => e,
        (Some(changed), Some(tensor)) => changed.with_tensor(tensor),
        (Some(changed), None) => changed,
    }
}
