//! The whole job as one library call: inputs and options in, files and a
//! [`Report`] out. The `convert` binary is a thin layer over this.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::io::AsyncWrite;

use crate::header::HUB_HEADER_LIMIT;
use crate::index::{IndexMetadata, ShardIndex};
use crate::observe::{ObservedWriter, Progress};
pub use crate::output::check_output;
use crate::output::fanout::check_shard_files;
pub use crate::output::fanout::Part;
use crate::output::folders::CreatedFolders;
use crate::output::target::{open_stream, resolve, Target};
use crate::plan::{plan, Plan, PlanOptions, ShardPlan, TensorRef};
use crate::sink::atomic::{close, commit_all, sync_files, StagedFile};
use crate::sink::fast::{copy_spans, SpanJob};
use crate::sink::parallel::{write_parallel, ReaderJob};
use crate::sink::writeback::Writeback;
use crate::sink::{Sink, SinkOptions};
use crate::source::input::open_input;
use crate::source::{Access, Source, SourceOptions, TensorData};
use crate::{Error, ErrorKind, Result};

/// Where the output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A file, written atomically; with sharding, the base of the shard names.
    File(PathBuf),
    /// Standard output (`-o -`); no sharding.
    Stdout,
}

/// A callback for things worth telling that are not errors ("spooling ...").
pub type NoticeFn = Arc<dyn Fn(&str) + Send + Sync>;

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
    /// Told of notable events; `None` keeps quiet.
    pub notice: Option<NoticeFn>,
    /// Told how the writing advances.
    pub progress: Option<Arc<dyn Progress>>,
    /// Compute each output file's SHA-256 while streaming.
    pub checksum: bool,
    /// Copy tensors whose bytes lie in files straight into an output file,
    /// by the kernel where they pass unchanged (default on). Off, every
    /// byte goes through the async sink; the output is the same either way.
    pub fast_path: bool,
    /// Allow the output to replace one of the inputs (refused by default:
    /// see [`crate::output::check_output`]). The input is still read from
    /// its old bytes, and replaced atomically at the end.
    pub overwrite_input: bool,
    /// Which files of a sharded plan to write: all (the default), one
    /// shard (`--shard K`), or the index alone (`--index-only`).
    pub part: Part,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            source: SourceOptions::default(),
            plan: PlanOptions::default(),
            sink: SinkOptions::default(),
            sync: true,
            notice: None,
            progress: None,
            checksum: false,
            fast_path: true,
            overwrite_input: false,
            part: Part::All,
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
    fast_path: bool,
    overwrite_input: bool,
    part: Part,
});

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
            .field("fast_path", &self.fast_path)
            .field("overwrite_input", &self.overwrite_input)
            .field("part", &self.part)
            .finish()
    }
}

/// One file written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WrittenFile {
    /// Its path (`-` for standard output).
    pub path: String,
    /// Its length in bytes.
    pub bytes: u64,
    /// Tensors it holds (0 for an index).
    pub tensors: usize,
    /// Its SHA-256, hex, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A cast that a conversion applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CastNote {
    /// The output tensor.
    pub tensor: String,
    /// Its dtype in the input.
    pub from: String,
    /// Its dtype in the output.
    pub to: String,
}

/// What a conversion did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The inputs, as named in messages.
    pub inputs: Vec<String>,
    /// Files written, shards first, then the index if any.
    pub outputs: Vec<WrittenFile>,
    /// Tensors written.
    pub tensors: usize,
    /// Tensor bytes written (headers excluded).
    pub data_bytes: u64,
    /// Wall time of the whole job.
    pub seconds: f64,
    /// The casts applied.
    pub casts: Vec<CastNote>,
    /// Things worth knowing that did not stop the job.
    pub warnings: Vec<String>,
}

impl Report {
    /// The report as the CLI's `--report json` prints it (and the Python
    /// package returns it): this report's fields, `"ok": true`, and the
    /// notices collected during the run appended to `warnings`, except a
    /// `warning: ...` notice of a warning the report holds already. One
    /// function for both, so the two agree by construction.
    ///
    /// ```
    /// use safetensors_stream::{convert_blocking, ConvertOptions, Output};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let out = Output::File(dir.path().join("m.safetensors"));
    /// let report = convert_blocking(&["fixtures/example/model.npz".into()], &out, &ConvertOptions::default())?;
    /// let json: serde_json::Value = serde_json::from_str(&report.to_json(&["a notice".into()]))?;
    /// assert_eq!(json["ok"], true);
    /// assert_eq!(json["tensors"], report.tensors);
    /// assert_eq!(json["warnings"].as_array().unwrap().last().unwrap(), "a notice");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_json(&self, notices: &[String]) -> String {
        let mut v = serde_json::to_value(self).expect("JSON of a report");
        v["ok"] = serde_json::Value::Bool(true);
        if let Some(w) = v["warnings"].as_array_mut() {
            let fresh = fresh_notices(notices, &self.warnings);
            w.extend(fresh.cloned().map(serde_json::Value::String));
        }
        v.to_string()
    }
}

/// The notices that say something `warnings` does not: a warning the
/// library also told as a `warning: ...` notice is listed once.
///
/// ```
/// use safetensors_stream::convert::fresh_notices;
///
/// let warnings = ["big header".to_string()];
/// let notices = ["warning: big header".to_string(), "spooling".to_string()];
/// assert_eq!(fresh_notices(&notices, &warnings).collect::<Vec<_>>(), ["spooling"]);
/// ```
pub fn fresh_notices<'a>(
    notices: &'a [String],
    warnings: &'a [String],
) -> impl Iterator<Item = &'a String> + 'a {
    notices.iter().filter(|n| {
        !n.strip_prefix("warning: ")
            .is_some_and(|bare| warnings.iter().any(|w| w == bare))
    })
}

/// Converts the inputs at `inputs` (files of any supported kind, or `-`
/// for standard input) into `output`.
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
    convert_opened(inputs, &mut sources, output, options).await
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

/// Opens every input (files of any supported kind, or `-`), reading headers only.
pub async fn open_inputs(
    inputs: &[PathBuf],
    options: &ConvertOptions,
) -> Result<Vec<Box<dyn Source>>> {
    let quiet = |_: &str| {};
    let notice: &(dyn Fn(&str) + Send + Sync) = match &options.notice {
        Some(n) => n.as_ref(),
        None => &quiet,
    };
    let mut sources = Vec::with_capacity(inputs.len());
    for path in inputs {
        let resolved = crate::folder::resolve_input(path)?;
        if resolved != *path {
            notice(&format!(
                "{}: reading {}",
                path.display(),
                resolved.display()
            ));
        }
        sources.push(open_input(&resolved, &options.source, notice).await?);
    }
    crate::source::quantized::wrap(sources, &options.source, notice)
}

/// Plans the conversion of opened sources: the whole layout, every header,
/// before a data byte is read. `--dry-run` stops here.
pub fn plan_sources(sources: &[Box<dyn Source + '_>], options: &ConvertOptions) -> Result<Plan> {
    let plan = plan(sources, &options.plan)?;
    check_access(&plan, sources)?;
    Ok(plan)
}

/// The casts a plan applies, for reports.
pub fn cast_notes(plan: &Plan) -> Vec<CastNote> {
    plan.shards
        .iter()
        .flat_map(|s| s.refs.iter().zip(&s.header.header().tensors))
        .filter_map(|(r, t)| {
            r.cast().map(|c| CastNote {
                tensor: t.meta.name.clone(),
                from: c.from().to_string(),
                to: c.to().to_string(),
            })
        })
        .collect()
}

/// Warnings about a plan: headers the Hugging Face Hub would refuse.
pub fn plan_warnings(plan: &Plan) -> Vec<String> {
    plan.shards
        .iter()
        .filter(|s| s.header.header().header_len > HUB_HEADER_LIMIT)
        .map(|s| {
            format!(
                "a header of {} bytes exceeds the {} bytes the Hugging Face Hub accepts",
                s.header.header().header_len,
                HUB_HEADER_LIMIT
            )
        })
        .collect()
}

/// Converts already-opened sources into `output`. The output is checked
/// as [`check_output`] does, except against the input files, which only
/// [`convert_opened`] knows.
pub async fn convert_sources(
    sources: &mut [Box<dyn Source + '_>],
    output: &Output,
    options: &ConvertOptions,
) -> Result<Report> {
    convert_opened(&[], sources, output, options).await
}

/// Converts sources opened from the files `inputs` (by [`open_inputs`])
/// into `output`, after [`check_output`]: an output that is one of those
/// files is refused unless [`ConvertOptions::overwrite_input`].
pub async fn convert_opened(
    inputs: &[PathBuf],
    sources: &mut [Box<dyn Source + '_>],
    output: &Output,
    options: &ConvertOptions,
) -> Result<Report> {
    let started = std::time::Instant::now();
    let plan = plan_sources(sources, options)?;
    write_planned(inputs, sources, &plan, output, options, started).await
}

/// [`convert_opened`] in two steps: `plan` is made by [`plan_sources`] from
/// these `sources` under these `options`, and may be looked at (or the
/// memory its making freed, as the `convert` binary does) before anything
/// is written. [`Report::seconds`] counts from this call.
///
/// A plan whose tensors are not in `sources` is refused before anything is
/// written (a plan of other sources of the same shape writes their
/// tensors' bytes under its names: make it from these).
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
/// assert!(convert_planned(&[], &mut others, &plan, &out, &options).await.is_err());
/// assert!(!dir.path().join("out.safetensors").exists());
///
/// let report = convert_planned(&[], &mut sources, &plan, &out, &options).await?;
/// assert_eq!(report.data_bytes, 2);
/// # Ok::<(), safetensors_stream::Error>(())
/// # }).unwrap();
/// ```
pub async fn convert_planned(
    inputs: &[PathBuf],
    sources: &mut [Box<dyn Source + '_>],
    plan: &Plan,
    output: &Output,
    options: &ConvertOptions,
) -> Result<Report> {
    check_refs(plan, sources)?;
    let started = std::time::Instant::now();
    write_planned(inputs, sources, plan, output, options, started).await
}

async fn write_planned(
    inputs: &[PathBuf],
    sources: &mut [Box<dyn Source + '_>],
    plan: &Plan,
    output: &Output,
    options: &ConvertOptions,
    started: std::time::Instant,
) -> Result<Report> {
    let mut warnings = plan_warnings(plan);
    warnings.extend(check_output(inputs, output, plan, options)?);
    let overflows = Mutex::new(Vec::new());
    if let Some(notice) = &options.notice {
        warnings
            .iter()
            .for_each(|w| notice(&format!("warning: {w}")));
    }
    if let Some(p) = &options.progress {
        p.start(plan, part_len(plan, options.part));
    }
    let outputs = write_outputs(output, plan, sources, options, &overflows).await?;
    if let Some(p) = &options.progress {
        p.finish();
    }
    let overflows = overflows.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(notice) = &options.notice {
        overflows
            .iter()
            .for_each(|w| notice(&format!("warning: {w}")));
    }
    warnings.extend(overflows);
    Ok(Report {
        inputs: sources.iter().map(|s| s.input_name().to_string()).collect(),
        outputs,
        tensors: plan.tensor_count(),
        data_bytes: plan.data_len(),
        seconds: started.elapsed().as_secs_f64(),
        casts: cast_notes(plan),
        warnings,
    })
}

/// Every tensor a plan takes is one `sources` have, of its shape and
/// dtype (or its cast's): a plan made from other sources is refused.
fn check_refs(plan: &Plan, sources: &[Box<dyn Source + '_>]) -> Result<()> {
    for shard in &plan.shards {
        for (r, t) in shard.refs.iter().zip(&shard.header.header().tensors) {
            let meta = sources
                .get(r.source())
                .and_then(|s| s.tensors().get(r.index()));
            let fits = meta.is_some_and(|m| {
                let dtype = r.cast().map_or(m.dtype, |c| c.to());
                r.cast().is_none_or(|c| c.from() == m.dtype)
                    && dtype == t.meta.dtype
                    && m.shape == t.meta.shape
            });
            if !fits {
                return Err(Error::new(ErrorKind::Usage(
                    "the plan was not made from these sources".to_string(),
                ))
                .with_tensor(t.meta.name.clone()));
            }
        }
    }
    Ok(())
}

/// Writes the plan where `output` names: objects for an object URL
/// (`s3://`, `gs://`, `az://`; with the object-store feature), else files
/// or a stream.
async fn write_outputs(
    output: &Output,
    plan: &Plan,
    sources: &mut [Box<dyn Source + '_>],
    options: &ConvertOptions,
    overflows: &Mutex<Vec<String>>,
) -> Result<Vec<WrittenFile>> {
    #[cfg(feature = "object-store")]
    if let Output::File(path) = output {
        if let Some(url) = path.to_str().filter(|_| crate::store::is_url(path)) {
            let write = crate::store::write::write_objects(url, plan, sources, options, overflows);
            return write.await;
        }
    }
    write_local(output, plan, sources, options, overflows).await
}

/// Writes to a file, a set of files, standard output or a stream.
async fn write_local(
    output: &Output,
    plan: &Plan,
    sources: &mut [Box<dyn Source + '_>],
    options: &ConvertOptions,
    overflows: &Mutex<Vec<String>>,
) -> Result<Vec<WrittenFile>> {
    let target = match output {
        Output::Stdout => Target::Stdout,
        Output::File(path) => resolve(path)?,
    };
    Ok(match target {
        Target::Stdout => {
            let out = tokio::io::stdout();
            write_stream(out, "-", plan, sources, options, overflows).await?
        }
        Target::Stream(path) => {
            let file = open_stream_output(&path).await?;
            let name = match output {
                Output::File(given) => given.display().to_string(),
                Output::Stdout => "-".into(),
            };
            write_stream(file, &name, plan, sources, options, overflows).await?
        }
        Target::Replace(_) => match output {
            Output::File(path) => write_files(path, plan, sources, options, overflows).await?,
            Output::Stdout => unreachable!("standard output is never replaced"),
        },
    })
}

/// The bytes of shards a run writes (progress counts only those).
fn part_len(plan: &Plan, part: Part) -> u64 {
    plan.shards
        .iter()
        .enumerate()
        .filter(|(i, _)| part.writes_shard(*i))
        .map(|(_, s)| s.file_len())
        .sum()
}

/// Writes the one planned file to a stream (standard output, a device, a
/// FIFO): bytes go out as they come, so a failure part-way leaves what was
/// sent; only the exit code tells. Sharded plans were refused before.
async fn write_stream<W: AsyncWrite + Unpin>(
    writer: W,
    name: &str,
    plan: &Plan,
    sources: &mut [Box<dyn Source + '_>],
    options: &ConvertOptions,
    overflows: &Mutex<Vec<String>>,
) -> Result<Vec<WrittenFile>> {
    let w = ObservedWriter::new(writer, options.checksum, options.progress.clone());
    let ctx = ShardCtx {
        index: 0,
        count: 1,
        options,
        overflows,
    };
    let (_, sha256) = write_observed(w, &plan.shards[0], sources, name, &ctx, None)
        .await?
        .into_parts();
    // Written already, but the exit code must not call it good.
    check_unchanged(sources)?;
    Ok(vec![WrittenFile {
        path: name.to_string(),
        bytes: plan.file_len(),
        tensors: plan.tensor_count(),
        sha256,
    }])
}

/// Opens a device, FIFO or socket output, off the runtime's threads (a FIFO
/// waits for its reader, and a signal must still end the run meanwhile).
async fn open_stream_output(path: &Path) -> Result<tokio::fs::File> {
    use std::io::IsTerminal;
    let on_path = |e: std::io::Error| Error::io(e).with_output(path.display());
    let owned = path.to_path_buf();
    let file = tokio::task::spawn_blocking(move || open_stream(&owned))
        .await
        .map_err(|e| on_path(std::io::Error::other(e)))?
        .map_err(on_path)?;
    if file.is_terminal() {
        return Err(Error::new(ErrorKind::TerminalOutput).with_output(path.display()));
    }
    Ok(tokio::fs::File::from_std(file))
}

/// A source that reads only forward must be asked for its tensors in its
/// own order. (Inputs whose format needs random access are spooled to disk
/// when opened; a streamed .npy holds one tensor, so this rarely bites.)
fn check_access(plan: &Plan, sources: &[Box<dyn Source + '_>]) -> Result<()> {
    let mut last: Vec<Option<usize>> = vec![None; sources.len()];
    for r in plan.shards.iter().flat_map(|s| &s.refs) {
        let s = &sources[r.source()];
        if s.access() == Access::Sequential {
            if last[r.source()].is_some_and(|l| l >= r.index()) {
                let msg = "this input can only be read forward, and the output order differs from its order; use --order input";
                return Err(Error::new(ErrorKind::ReadOnce(msg)).with_input(s.input_name()));
            }
            last[r.source()] = Some(r.index());
        }
    }
    Ok(())
}

/// Writes one planned file to any `AsyncWrite`, pulling each tensor from its source.
pub async fn write_shard<W: AsyncWrite + Unpin>(
    writer: W,
    shard: &ShardPlan,
    sources: &mut [Box<dyn Source + '_>],
    sink_options: SinkOptions,
    output_name: &str,
) -> Result<W> {
    write_tensors(
        writer,
        shard,
        sources,
        sink_options,
        output_name,
        |_| {},
        None,
        None,
    )
    .await
}

/// Which shard is being written, for progress; where casts' overflows go.
pub(crate) struct ShardCtx<'a> {
    pub(crate) index: usize,
    pub(crate) count: usize,
    pub(crate) options: &'a ConvertOptions,
    pub(crate) overflows: &'a Mutex<Vec<String>>,
}

pub(crate) async fn write_observed<W: AsyncWrite + Unpin>(
    writer: ObservedWriter<W>,
    shard: &ShardPlan,
    sources: &mut [Box<dyn Source + '_>],
    output_name: &str,
    ctx: &ShardCtx<'_>,
    direct: Option<Arc<std::fs::File>>,
) -> Result<ObservedWriter<W>> {
    let progress = ctx.options.progress.clone();
    let on_tensor = |name: &str| {
        if let Some(p) = &progress {
            p.tensor(ctx.index, ctx.count, name);
        }
    };
    let fast = direct.map(|out| Direct {
        writeback: ctx
            .options
            .sync
            .then(|| Arc::new(Writeback::new(out.clone()))),
        out,
        name: output_name.to_string(),
        progress: ctx.options.progress.clone(),
        shard: (ctx.index, ctx.count),
    });
    write_tensors(
        writer,
        shard,
        sources,
        ctx.options.sink,
        output_name,
        on_tensor,
        fast,
        Some(ctx.overflows),
    )
    .await
}

/// The output file itself, for tensors copied without the async writer.
struct Direct {
    out: Arc<std::fs::File>,
    name: String,
    progress: Option<Arc<dyn Progress>>,
    /// This shard's index and the count of shards, for progress.
    shard: (usize, usize),
    /// Writeback started as bytes land, when the file is to be fsync'd.
    writeback: Option<Arc<Writeback>>,
}

impl Direct {
    /// What to call as bytes land in the file: progress, and writeback.
    fn on_landed(&self) -> impl Fn(u64) + Send + Sync + 'static {
        let (progress, writeback) = (self.progress.clone(), self.writeback.clone());
        move |n| {
            if let Some(p) = &progress {
                p.bytes(n);
            }
            if let Some(w) = &writeback {
                w.landed(n);
            }
        }
    }
}

/// Tensors copied per trip to the blocking pool.
const BATCH: usize = 16384;

#[allow(clippy::too_many_arguments)]
async fn write_tensors<W: AsyncWrite + Unpin>(
    writer: W,
    shard: &ShardPlan,
    sources: &mut [Box<dyn Source + '_>],
    sink_options: SinkOptions,
    output_name: &str,
    on_tensor: impl Fn(&str),
    direct: Option<Direct>,
    overflows: Option<&Mutex<Vec<String>>>,
) -> Result<W> {
    let overflowed = |k: usize, count: u64| {
        if let (Some(list), Some(c)) = (overflows, shard.refs[k].cast()) {
            let name = &shard.header.header().tensors[k].meta.name;
            let msg = overflow_warning(name, c, count);
            list.lock().unwrap_or_else(|e| e.into_inner()).push(msg);
        }
    };
    let sink = Sink::start(writer, &shard.header, sink_options)
        .await
        .map_err(|e| e.with_output(output_name))?;
    let mut sink = sink.with_output_name(output_name);
    let tensors = &shard.header.header().tensors;
    let mut ahead: Option<(usize, Result<TensorData<'static>>)> = None;
    let mut k = 0;
    while k < shard.refs.len() {
        if let Some(d) = &direct {
            // Tensors whose bytes lie in files, or else deflated members
            // (read side by side): straight into the file.
            let spans = span_jobs(&shard.refs[k..], sources);
            let size = sink_options.buffer_size;
            let copied = if !spans.is_empty() {
                on_tensor(&tensors[k].meta.name);
                let n = spans.len();
                Some((n, copy_direct(&mut sink, d, spans, size).await))
            } else {
                let readers = reader_jobs(shard, k, sources);
                match readers.len() {
                    0 => None,
                    n => Some((
                        n,
                        write_readers(&mut sink, d, shard, k, readers, size).await,
                    )),
                }
            };
            if let Some((n, copied)) = copied {
                let over = copied.map_err(|(i, e)| {
                    name_error(e, sources, &shard.refs[k + i], &tensors[k + i].meta.name)
                })?;
                over.into_iter().for_each(|(i, n)| overflowed(k + i, n));
                k += n;
                continue;
            }
        }
        let (r, t) = (&shard.refs[k], &tensors[k]);
        on_tensor(&t.meta.name);
        // Start the next tensor now, if its source can: it then reads (an
        // npz member inflates) on another core while this one is written.
        // (Into a file, such tensors are read side by side instead, above.)
        let prefetched = match ahead.take() {
            Some((at, data)) if at == k => Some(data),
            _ => None,
        };
        if let (Some(next), None) = (shard.refs.get(k + 1), &direct) {
            if let Some(data) = sources[next.source()].open_ahead(next.index()) {
                ahead = Some((k + 1, data));
            }
        }
        let written: Result<u64> = {
            let source = &mut sources[r.source()];
            let opened = match prefetched {
                Some(data) => data,
                None => source.open(r.index()).await,
            };
            match opened {
                Ok(data) => sink.write_tensor_data(data, r.cast()).await,
                Err(e) => Err(e),
            }
        };
        if let Err(e) = written {
            return Err(name_error(e, sources, r, &t.meta.name));
        }
        match sink.take_overflowed() {
            0 => {}
            n => overflowed(k, n),
        }
        k += 1;
    }
    sink.finish().await
}

/// A cast's overflows to infinity, as a report's warning.
fn overflow_warning(tensor: &str, cast: crate::cast::Cast, count: u64) -> String {
    let values = if count == 1 { "value" } else { "values" };
    format!(
        "tensor {tensor:?}: {count} finite {values} overflowed to infinity casting {} to {}",
        cast.from(),
        cast.to()
    )
}

/// Names the input, and the tensor as the input knows it (and as it is
/// written, if renamed).
fn name_error(e: Error, sources: &[Box<dyn Source + '_>], r: &TensorRef, out_name: &str) -> Error {
    let Some(source) = sources.get(r.source()) else {
        return e.set_tensor(out_name);
    };
    let in_name = &source.tensors()[r.index()].name;
    let tensor = if in_name == out_name {
        in_name.clone()
    } else {
        format!("{in_name} (written as {out_name})")
    };
    e.with_input(source.input_name()).set_tensor(tensor)
}

/// The run of tensors from the start of `refs` whose bytes lie in files.
fn span_jobs(refs: &[TensorRef], sources: &[Box<dyn Source + '_>]) -> Vec<SpanJob> {
    refs.iter()
        .take(BATCH)
        .map_while(|r| {
            let span = sources[r.source()].file_span(r.index())?;
            Some(SpanJob {
                span,
                cast: r.cast(),
            })
        })
        .collect()
}

/// Copies a batch of file-backed tensors straight into the output file, on
/// the blocking pool, after what the sink has written. Returns the casts'
/// overflows to infinity as (index in the batch, elements).
async fn copy_direct<W: AsyncWrite + Unpin>(
    sink: &mut Sink<W>,
    d: &Direct,
    jobs: Vec<SpanJob>,
    buffer_size: usize,
) -> std::result::Result<Vec<(usize, u64)>, (usize, Error)> {
    sink.flush().await.map_err(|e| (0, e))?;
    let out = d.out.clone();
    let out_name = d.name.clone();
    let landed = d.on_landed();
    let count = jobs.len();
    let copied = tokio::task::spawn_blocking(move || {
        copy_spans(&out, &out_name, &jobs, buffer_size, landed)
    })
    .await
    .map_err(|e| (0, Error::io(std::io::Error::other(e))))??;
    let (copied, overflows) = copied;
    sink.record_external(count, copied).map_err(|e| (0, e))?;
    Ok(overflows)
}

/// The run of tensors from `start` that only blocking readers produce
/// (deflated npz members), to read side by side.
fn reader_jobs(
    shard: &ShardPlan,
    start: usize,
    sources: &[Box<dyn Source + '_>],
) -> Vec<ReaderJob> {
    let header = shard.header.header();
    shard.refs[start..]
        .iter()
        .zip(&header.tensors[start..])
        .take(BATCH)
        .map_while(|(r, t)| {
            let open = sources[r.source()].open_blocking(r.index())?;
            Some(ReaderJob {
                open,
                out_len: t.len(),
                at: header.data_start() + t.begin,
                cast: r.cast(),
            })
        })
        .collect()
}

/// Writes a run of tensors from blocking readers straight into the output
/// file, several at once, each at its planned offset (on the blocking
/// pool, after what the sink has written); then moves the file's offset
/// past them, where the sink goes on. Returns the casts' overflows to
/// infinity as (index in the run, elements).
async fn write_readers<W: AsyncWrite + Unpin>(
    sink: &mut Sink<W>,
    d: &Direct,
    shard: &ShardPlan,
    start: usize,
    jobs: Vec<ReaderJob>,
    buffer_size: usize,
) -> std::result::Result<Vec<(usize, u64)>, (usize, Error)> {
    sink.flush().await.map_err(|e| (0, e))?;
    let count = jobs.len();
    let header = shard.header.header();
    let entries = &header.tensors[start..start + count];
    let bytes: u64 = entries.iter().map(|t| t.len()).sum();
    let end = header.data_start() + entries.last().map_or(0, |t| t.end);
    let names: Vec<String> = entries.iter().map(|t| t.meta.name.clone()).collect();
    let out = d.out.clone();
    let out_name = d.name.clone();
    let progress = d.progress.clone();
    let landed = d.on_landed();
    let (shard_index, shards) = d.shard;
    let written = tokio::task::spawn_blocking(move || {
        let started = |i: usize| {
            if let Some(p) = &progress {
                p.tensor(shard_index, shards, &names[i]);
            }
        };
        let over = write_parallel(&out, &out_name, jobs, buffer_size, &started, &landed)?;
        // The sink writes at the file's offset: past these tensors.
        std::io::Seek::seek(&mut &*out, std::io::SeekFrom::Start(end))
            .map_err(|e| (count - 1, Error::io(e).with_output(&out_name)))?;
        Ok(over)
    })
    .await
    .map_err(|e| (0, Error::io(std::io::Error::other(e))))?;
    let overflows = written?;
    sink.record_external(count, bytes).map_err(|e| (0, e))?;
    Ok(overflows)
}

/// The paths of a sharded set: `BASE-00001-of-0000N.safetensors` beside
/// `output`, and `BASE.safetensors.index.json`. One shard is just `output`.
pub fn shard_paths(output: &Path, shards: usize) -> (Vec<PathBuf>, Option<PathBuf>) {
    if shards <= 1 {
        return (vec![output.to_path_buf()], None);
    }
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = name
        .strip_suffix(crate::index::INDEX_SUFFIX)
        .or_else(|| name.strip_suffix(".safetensors"))
        .unwrap_or(&name);
    let dir = output.parent().unwrap_or(Path::new(""));
    let paths = (1..=shards)
        .map(|k| dir.join(format!("{base}-{k:05}-of-{shards:05}.safetensors")))
        .collect();
    let index = dir.join(format!("{base}{}", crate::index::INDEX_SUFFIX));
    (paths, Some(index))
}

async fn write_files(
    output: &Path,
    plan: &Plan,
    sources: &mut [Box<dyn Source + '_>],
    options: &ConvertOptions,
    overflows: &Mutex<Vec<String>>,
) -> Result<Vec<WrittenFile>> {
    let (paths, index_path) = shard_paths(output, plan.shards.len());
    let index_path = index_path.filter(|_| options.part.writes_index());
    if options.part == Part::IndexOnly {
        check_shard_files(plan, &paths)?;
    }
    let written_paths = paths
        .iter()
        .enumerate()
        .filter(|(i, _)| options.part.writes_shard(*i))
        .map(|(_, p)| p);
    // Declared before the staged files, so dropped after them on failure:
    // temp files go first, then the folders made for them.
    let mut folders = Vec::with_capacity(paths.len() + 1);
    for path in written_paths.chain(&index_path) {
        if let Target::Replace(dest) = resolve(path)? {
            folders.push(CreatedFolders::create_for(&dest)?);
        }
    }
    let mut staged = Vec::with_capacity(paths.len() + 1);
    let mut written = Vec::with_capacity(paths.len() + 1);
    // Synced together at the end, as one `sync` would.
    let mut unsynced = Vec::with_capacity(paths.len() + 1);
    let count = plan.shards.len();
    for (index, (shard, path)) in plan.shards.iter().zip(&paths).enumerate() {
        if !options.part.writes_shard(index) {
            continue;
        }
        let (stage, file) = StagedFile::create(path)?;
        let name = path.display().to_string();
        let w = ObservedWriter::new(file, options.checksum, options.progress.clone());
        let ctx = ShardCtx {
            index,
            count,
            options,
            overflows,
        };
        // A checksum must see every byte: no kernel copies then.
        let direct = match options.fast_path && !options.checksum {
            true => Some(Arc::new(
                stage
                    .handle()
                    .map_err(|e| Error::io(e).with_output(&name))?,
            )),
            false => None,
        };
        let (file, sha256) = write_observed(w, shard, sources, &name, &ctx, direct)
            .await?
            .into_parts();
        close(file, false, path).await?;
        unsynced.push((file_for_sync(&stage, path)?, path.clone()));
        staged.push(stage);
        written.push(WrittenFile {
            path: name,
            bytes: shard.file_len(),
            tensors: shard.refs.len(),
            sha256,
        });
    }
    if let Some(index_path) = index_path {
        let bytes = index_json(plan, &paths);
        let (stage, mut file) = StagedFile::create(&index_path)?;
        tokio::io::AsyncWriteExt::write_all(&mut file, &bytes)
            .await
            .map_err(|e| Error::io(e).with_output(index_path.display()))?;
        close(file, false, &index_path).await?;
        unsynced.push((file_for_sync(&stage, &index_path)?, index_path.clone()));
        staged.push(stage);
        let sha256 = options.checksum.then(|| sha256_hex(&bytes));
        written.push(WrittenFile {
            path: index_path.display().to_string(),
            bytes: bytes.len() as u64,
            tensors: 0,
            sha256,
        });
    }
    check_unchanged(sources)?;
    if options.sync {
        sync_files(unsynced).await?;
    }
    commit_all(staged, options.sync)?;
    folders.into_iter().for_each(CreatedFolders::keep);
    Ok(written)
}

/// Every range was checked against the inputs' lengths when opened: an
/// input that changed since is being rewritten under us. Refuse the copy.
pub(crate) fn check_unchanged(sources: &[Box<dyn Source + '_>]) -> Result<()> {
    sources.iter().try_for_each(|s| s.check_unchanged())
}

/// A handle on a staged file, to sync it later.
fn file_for_sync(stage: &StagedFile, path: &Path) -> Result<tokio::fs::File> {
    let f = stage
        .handle()
        .map_err(|e| Error::io(e).with_output(path.display()))?;
    Ok(tokio::fs::File::from_std(f))
}

/// The Hugging Face index: pretty JSON with sorted keys and a final newline,
/// as `huggingface_hub` writes it.
pub(crate) fn index_json(plan: &Plan, paths: &[PathBuf]) -> Vec<u8> {
    let mut weight_map = std::collections::BTreeMap::new();
    for (shard, path) in plan.shards.iter().zip(paths) {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for t in &shard.header.header().tensors {
            weight_map.insert(t.meta.name.clone(), file.clone());
        }
    }
    let index = ShardIndex {
        metadata: IndexMetadata {
            total_size: plan.data_len(),
            other: Default::default(),
        },
        weight_map,
    };
    let mut bytes = serde_json::to_vec_pretty(&index).expect("JSON of an index");
    bytes.push(b'\n');
    bytes
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
