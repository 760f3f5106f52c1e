//! The whole job as one library call: inputs and options in, files and a
//! [`Report`] out. The `convert` binary is a thin layer over this.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use tokio::io::AsyncWrite;

use crate::index::{IndexMetadata, ShardIndex};
use crate::plan::{plan, Plan, PlanOptions, ShardPlan};
use crate::sink::atomic::{close, commit_all, StagedFile};
use crate::sink::{Sink, SinkOptions};
use crate::source::input::open_input;
use crate::source::{Access, Listing, Source, SourceOptions};
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

/// Everything a conversion can be told.
#[derive(Clone)]
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
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            source: SourceOptions::default(),
            plan: PlanOptions::default(),
            sink: SinkOptions::default(),
            sync: true,
            notice: None,
        }
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
}

/// What a conversion did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The inputs, as named in messages.
    pub inputs: Vec<String>,
    /// Files written, shards first, then the index if any.
    pub outputs: Vec<WrittenFile>,
    /// Tensors written.
    pub tensors: usize,
    /// Tensor bytes written (headers excluded).
    pub data_bytes: u64,
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
    let quiet = |_: &str| {};
    let notice: &(dyn Fn(&str) + Send + Sync) = match &options.notice {
        Some(n) => n.as_ref(),
        None => &quiet,
    };
    let mut sources = Vec::with_capacity(inputs.len());
    for path in inputs {
        sources.push(open_input(path, &options.source, notice).await?);
    }
    convert_sources(&mut sources, output, options).await
}

/// Converts already-opened sources into `output`.
pub async fn convert_sources(
    sources: &mut [Box<dyn Source + '_>],
    output: &Output,
    options: &ConvertOptions,
) -> Result<Report> {
    let listings: Vec<Listing> = sources.iter().map(|s| Listing::of(s.as_ref())).collect();
    let plan = plan(&listings, &options.plan)?;
    check_access(&plan, sources)?;
    let outputs = match output {
        Output::Stdout if plan.shards.len() > 1 => {
            return Err(ErrorKind::Usage(
                "sharded output needs a file, not standard output".into(),
            )
            .into());
        }
        Output::Stdout => {
            let out = write_shard(
                tokio::io::stdout(),
                &plan.shards[0],
                sources,
                options.sink,
                "-",
            )
            .await?;
            drop(out);
            vec![WrittenFile {
                path: "-".into(),
                bytes: plan.file_len(),
                tensors: plan.tensor_count(),
            }]
        }
        Output::File(path) => write_files(path, &plan, sources, options).await?,
    };
    Ok(Report {
        inputs: listings.into_iter().map(|l| l.input).collect(),
        outputs,
        tensors: plan.tensor_count(),
        data_bytes: plan.data_len(),
    })
}

/// A source that reads only forward must be asked for its tensors in its
/// own order. (Inputs whose format needs random access are spooled to disk
/// when opened; a streamed .npy holds one tensor, so this rarely bites.)
fn check_access(plan: &Plan, sources: &[Box<dyn Source + '_>]) -> Result<()> {
    let mut last: Vec<Option<usize>> = vec![None; sources.len()];
    for r in plan.shards.iter().flat_map(|s| &s.refs) {
        let s = &sources[r.source];
        if s.access() == Access::Sequential {
            if last[r.source].is_some_and(|l| l >= r.index) {
                let msg = "this input can only be read forward, and the output order differs from its order; use --order input";
                return Err(Error::new(ErrorKind::Usage(msg.into())).with_input(s.input_name()));
            }
            last[r.source] = Some(r.index);
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
    let sink = Sink::start(writer, &shard.header, sink_options)
        .await
        .map_err(|e| e.with_input(output_name))?;
    let mut sink = sink.with_output_name(output_name);
    for r in &shard.refs {
        let source = &mut sources[r.source];
        let input = source.input_name().to_string();
        let tensor = source.tensors()[r.index].name.clone();
        let on_source = |e: Error| e.with_input(&input).with_tensor(&tensor);
        let data = source.open(r.index).await.map_err(on_source)?;
        sink.write_tensor_data(data, r.cast)
            .await
            .map_err(on_source)?;
    }
    sink.finish().await
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
) -> Result<Vec<WrittenFile>> {
    let (paths, index_path) = shard_paths(output, plan.shards.len());
    let mut staged = Vec::with_capacity(paths.len() + 1);
    let mut written = Vec::with_capacity(paths.len() + 1);
    for (shard, path) in plan.shards.iter().zip(&paths) {
        let (stage, file) = StagedFile::create(path)?;
        let name = path.display().to_string();
        let file = write_shard(file, shard, sources, options.sink, &name).await?;
        close(file, options.sync, path).await?;
        staged.push(stage);
        written.push(WrittenFile {
            path: name,
            bytes: shard.file_len(),
            tensors: shard.refs.len(),
        });
    }
    if let Some(index_path) = index_path {
        let bytes = index_json(plan, &paths);
        let (stage, mut file) = StagedFile::create(&index_path)?;
        tokio::io::AsyncWriteExt::write_all(&mut file, &bytes)
            .await
            .map_err(|e| Error::io(e).with_input(index_path.display()))?;
        close(file, options.sync, &index_path).await?;
        staged.push(stage);
        written.push(WrittenFile {
            path: index_path.display().to_string(),
            bytes: bytes.len() as u64,
            tensors: 0,
        });
    }
    commit_all(staged, options.sync)?;
    Ok(written)
}

/// The Hugging Face index: pretty JSON with sorted keys and a final newline,
/// as `huggingface_hub` writes it.
fn index_json(plan: &Plan, paths: &[PathBuf]) -> Vec<u8> {
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
