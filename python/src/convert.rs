//! `_native.convert`: the library's `convert_blocking` for Python. Its
//! keywords are the CLI's flags, by the table in `options.rs` (the tests
//! check both sides against it).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::ffi::CString;

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit, PyUserWarning};
use pyo3::prelude::*;
use safetensors_stream::convert::{
    convert_sources as run, dry_run as plan, open_locations, ConvertOptions, Output, Part,
};
use safetensors_stream::location::Location;
use safetensors_stream::observe::Progress;
use safetensors_stream::plan::Plan;
use safetensors_stream::source::{Names, RawSpec, RawTensor};
use safetensors_stream::units::parse_size;
use safetensors_stream::{Dtype, Error, ErrorKind, Note, Warning};

use crate::errors::to_py;
use crate::options::pythonic;
use crate::{parse_dtype, parse_order};

fn usage_error(message: String) -> Error {
    Error::new(ErrorKind::Usage(message))
}

/// The raw-dump reading the `raw_*` keywords ask for, as the CLI's
/// `--raw-*` flags (`raw_shape` is the CLI's text: `"4,256"`, `"scalar"`).
#[allow(clippy::too_many_arguments)] // one per raw_* keyword
fn raw_spec(
    name: &Option<String>,
    dtype: Option<&str>,
    shape: Option<&str>,
    offset: u64,
    byte_order: &str,
    manifest: Option<PathBuf>,
    allow_trailing: bool,
    limits: &safetensors_stream::Limits,
) -> Result<Option<RawSpec>, Error> {
    let big_endian = match byte_order {
        "little" => false,
        "big" => true,
        other => {
            return Err(usage_error(format!(
                "raw_byte_order must be \"little\" or \"big\", not {other:?}"
            )))
        }
    };
    let mut spec = match (manifest, dtype, shape) {
        (Some(_), Some(_), _) => {
            return Err(usage_error(
                "raw_manifest names each tensor's dtype: give it or raw_dtype, not both".into(),
            ))
        }
        (Some(path), None, _) => RawSpec::from_manifest_file_within(&path, limits)?,
        (None, Some(dtype), Some(shape)) => RawSpec {
            tensors: vec![RawTensor {
                name: name.clone().unwrap_or_default(),
                dtype: parse_dtype(dtype)?,
                shape: RawSpec::parse_shape(shape)?,
                offset,
            }],
            ..RawSpec::default()
        },
        (None, Some(_), None) | (None, None, Some(_)) => {
            return Err(usage_error(
                "a raw dump needs both raw_dtype and raw_shape".into(),
            ))
        }
        (None, None, None) => return Ok(None),
    };
    spec.big_endian = big_endian;
    spec.allow_trailing = allow_trailing;
    Ok(Some(spec))
}

/// Progress for a Python callable `progress(done, total, tensor)`: called
/// when the plan is made, at most ten times a second while bytes move, and
/// at the end. An exception it raises is reported as unraisable (the
/// conversion goes on), except a `KeyboardInterrupt` or `SystemExit` (Ctrl-C
/// lands in the callback when it runs Python code): kept in `stop`, it ends
/// the run ([`interrupted`]).
struct PyProgress {
    callback: Py<PyAny>,
    total: AtomicU64,
    done: AtomicU64,
    last: Mutex<Instant>,
    tensor: Mutex<String>,
    stop: Arc<Mutex<Option<PyErr>>>,
}

impl PyProgress {
    fn call(&self) {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let tensor = self.tensor.lock().map(|t| t.clone()).unwrap_or_default();
        Python::attach(|py| {
            let Err(e) = self.callback.call1(py, (done, total, tensor)) else {
                return;
            };
            let ends =
                e.is_instance_of::<PyKeyboardInterrupt>(py) || e.is_instance_of::<PySystemExit>(py);
            match self.stop.lock() {
                Ok(mut stop) if ends => *stop = stop.take().or(Some(e)),
                _ => e.write_unraisable(py, Some(self.callback.bind(py))),
            }
        });
    }
}

/// How often a run checks for Ctrl-C: Python runs its signal handlers
/// only when it runs Python code, which a run holding no GIL never does.
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Resolves when the run must end: Ctrl-C (or another signal whose Python
/// handler raises), or an exception the progress callback kept in `stop`.
/// Signal handlers run on the main thread only: a run on another thread is
/// ended by the callback's exception alone.
async fn interrupted(stop: &Mutex<Option<PyErr>>) -> PyErr {
    loop {
        tokio::time::sleep(SIGNAL_CHECK).await;
        if let Some(e) = stop.lock().ok().and_then(|mut s| s.take()) {
            return e;
        }
        if let Err(e) = Python::attach(|py| py.check_signals()) {
            return e;
        }
    }
}

/// Why a run ended without its report.
enum Ended {
    /// The library refused or failed.
    Failed(Error),
    /// Ctrl-C or the progress callback: the Python exception, raised as it is.
    Interrupted(PyErr),
}

impl Progress for PyProgress {
    fn start(&self, _plan: &Plan, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        self.call();
    }
    fn tensor(&self, shard: usize, shards: usize, name: &str) {
        if let Ok(mut t) = self.tensor.lock() {
            *t = match shards > 1 {
                true => format!("shard {}/{shards} {name}", shard + 1),
                false => name.to_string(),
            };
        }
    }
    fn bytes(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
        let due = self.last.lock().is_ok_and(|mut last| {
            let due = last.elapsed() >= Duration::from_millis(100);
            if due {
                *last = Instant::now();
            }
            due
        });
        if due {
            self.call();
        }
    }
    fn finish(&self) {
        self.call();
    }
}

/// Converts `inputs` into `output` (a path, or `-` for standard output) on a
/// current-thread runtime that lives for this call only, the GIL released.
/// Returns the report as the CLI's `--report json` prints it; with
/// `dry_run`, the plan as `--dry-run --json` prints it, nothing written.
/// Messages and notices name the options as Python keywords; the typed
/// warnings among the notices are also issued as `UserWarning`s.
#[pyfunction]
#[pyo3(signature = (inputs, output, *, max_shard_size=None, cast_all=None, casts=Vec::new(),
    include=Vec::new(), exclude=Vec::new(), renames=Vec::new(), strip_prefix=None,
    rename_regex=Vec::new(), prefix=None, metadata=Vec::new(), order="canonical",
    checksum=false, sync=true, skip_non_npy=false, name=None, allow_empty=false,
    overwrite_input=false, npy_void_as=None, dry_run=false, dedupe_tied=false, pt_root=None,
    allow_expanded_views=false, dequantize=false, dequantize_to=None, gguf_metadata=false, names=None,
    raw_dtype=None, raw_shape=None, raw_offset=0, raw_byte_order="little", raw_manifest=None,
    raw_allow_trailing=false, shard=None, shard_stride=None, index_only=false, expect_plan=None,
    buffer_size=None, limits=Vec::new(), progress=None))]
#[allow(clippy::too_many_arguments)] // one keyword per CLI flag
pub(crate) fn convert(
    py: Python<'_>,
    inputs: Vec<PathBuf>,
    output: PathBuf,
    max_shard_size: Option<String>,
    cast_all: Option<String>,
    casts: Vec<(String, String)>,
    include: Vec<String>,
    exclude: Vec<String>,
    renames: Vec<(String, String)>,
    strip_prefix: Option<String>,
    rename_regex: Vec<(String, String)>,
    prefix: Option<String>,
    metadata: Vec<(String, String)>,
    order: &str,
    checksum: bool,
    sync: bool,
    skip_non_npy: bool,
    name: Option<String>,
    allow_empty: bool,
    overwrite_input: bool,
    npy_void_as: Option<String>,
    dry_run: bool,
    dedupe_tied: bool,
    pt_root: Option<String>,
    allow_expanded_views: bool,
    dequantize: bool,
    dequantize_to: Option<String>,
    gguf_metadata: bool,
    names: Option<String>,
    raw_dtype: Option<String>,
    raw_shape: Option<String>,
    raw_offset: u64,
    raw_byte_order: &str,
    raw_manifest: Option<PathBuf>,
    raw_allow_trailing: bool,
    shard: Option<u64>,
    shard_stride: Option<u64>,
    index_only: bool,
    expect_plan: Option<String>,
    buffer_size: Option<String>,
    limits: Vec<(String, String)>,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let err = |e: Error| to_py(py, e);
    let notices = Arc::new(Mutex::new(Vec::<Note>::new()));
    let size = |keyword: &str, s: Option<String>| {
        s.map(|s| parse_size(&s).map_err(|e| usage_error(format!("{keyword}: {e}"))))
            .transpose()
            .map_err(err)
    };
    let mut options = ConvertOptions::default();
    options.plan.max_shard_size = size("max_shard_size", max_shard_size)?;
    if let Some(bytes) = size("buffer_size", buffer_size)? {
        options.sink.buffer_size = usize::try_from(bytes).unwrap_or(usize::MAX);
    }
    let dtype = |s: &str| parse_dtype(s);
    options.plan.cast_all = cast_all.as_deref().map(dtype).transpose().map_err(err)?;
    options.plan.casts = casts
        .iter()
        .map(|(from, to)| Ok((parse_dtype(from)?, parse_dtype(to)?)))
        .collect::<Result<_, Error>>()
        .map_err(err)?;
    options.plan.include = include;
    options.plan.exclude = exclude;
    options.plan.renames = renames;
    options.plan.strip_prefix = strip_prefix;
    options.plan.rename_regex = rename_regex;
    options.plan.prefix = prefix;
    options.plan.metadata = metadata;
    options.plan.allow_empty = allow_empty;
    options.plan.order = parse_order(order).map_err(err)?;
    options.plan.expect_plan = expect_plan;
    options.checksum = checksum;
    options.sync = sync;
    options.overwrite_input = overwrite_input;
    options.part = match (shard, index_only) {
        (Some(_), true) => {
            return Err(err(usage_error(
                "shard writes one shard and index_only the index alone: give one of them".into(),
            )))
        }
        (Some(0), false) => {
            return Err(err(usage_error(
                "shard is 1-based (the K of -0000K-of-0000N), not 0".into(),
            )))
        }
        (Some(k), false) => {
            let index = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            match shard_stride {
                Some(n) => Part::Stride {
                    first: index(k),
                    step: index(n),
                },
                None => Part::Shard(index(k)),
            }
        }
        (None, true) => Part::IndexOnly,
        (None, false) => Part::All,
    };
    if shard_stride.is_some() && shard.is_none() {
        return Err(err(usage_error(
            "shard_stride N goes with shard K: worker K of N writes shards K, K+N, ...".into(),
        )));
    }
    // Limits first: the raw manifest is read under them.
    for (limit, value) in &limits {
        options
            .source
            .limits
            .set_named(limit, value)
            .map_err(|e| err(usage_error(pythonic(&e.to_string()))))?;
    }
    options.source.raw = raw_spec(
        &name,
        raw_dtype.as_deref(),
        raw_shape.as_deref(),
        raw_offset,
        raw_byte_order,
        raw_manifest,
        raw_allow_trailing,
        &options.source.limits,
    )
    .map_err(err)?;
    options.source.npy.skip_non_npy = skip_non_npy;
    options.source.name = name;
    options.source.npy.void_as = npy_void_as.as_deref().map(dtype).transpose().map_err(err)?;
    options.source.torch.dedupe_tied = dedupe_tied;
    options.source.torch.root = pt_root;
    options.source.torch.allow_expanded_views = allow_expanded_views;
    options.source.gguf.metadata = gguf_metadata;
    options.source.names = match names.as_deref() {
        None | Some("stored") => Names::Stored,
        Some("hf") => Names::Hf,
        Some(other) => {
            let said = format!("names={other:?}: expected \"stored\" or \"hf\"");
            return Err(pyo3::exceptions::PyValueError::new_err(said));
        }
    };
    // `dequantize_to` implies `dequantize`; alone, `dequantize` is BF16 (as the CLI).
    options.source.dequantize = match dequantize_to.as_deref().map(dtype).transpose() {
        Ok(Some(d @ (Dtype::F32 | Dtype::F16 | Dtype::BF16))) => Some(d),
        Ok(Some(d)) => {
            return Err(err(usage_error(format!(
                "dequantize_to: dequantized weights are F32, F16 or BF16, not {d}"
            ))))
        }
        Ok(None) => dequantize.then_some(Dtype::BF16),
        Err(e) => return Err(err(e)),
    };
    let stop = Arc::new(Mutex::new(None));
    options.progress = progress.map(|callback| {
        Arc::new(PyProgress {
            callback,
            total: AtomicU64::new(0),
            done: AtomicU64::new(0),
            last: Mutex::new(Instant::now()),
            tensor: Mutex::new(String::new()),
            stop: Arc::clone(&stop),
        }) as Arc<dyn Progress>
    });
    let collected = Arc::clone(&notices);
    // What the run tells in words (not a typed warning) names keywords.
    options.notice = Some(Arc::new(move |note: &Note| {
        let note = match note {
            Note::Info(text) => Note::Info(pythonic(text)),
            other => other.clone(),
        };
        collected.lock().expect("notices lock").push(note)
    }));
    // Each named once, here: what it names, parsed.
    let output = Output::parse(&output).map_err(err)?;
    let inputs = Location::parse_all(&inputs).map_err(err)?;
    let (text, warnings) = py
        .detach(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Ended::Failed(Error::io(e)))?
                .block_on(async {
                    let notices = || notices.lock().expect("notices lock").clone();
                    let job = async {
                        let mut sources = open_locations(&inputs, &options).await?;
                        if dry_run {
                            let planned = plan(&sources, &output, &options)?;
                            let warned = told_warnings(&notices(), planned.warnings());
                            Ok::<_, Error>((planned.to_json(&notices()), warned))
                        } else {
                            let report = run(&mut sources, &output, &options).await?;
                            let warned = told_warnings(&notices(), &report.warnings);
                            Ok((report.to_json(&notices()), warned))
                        }
                    };
                    // Dropped when interrupted: what it staged is removed,
                    // nothing is committed; then, as the CLI on a signal,
                    // the multipart uploads it left open are aborted.
                    let ended = tokio::select! {
                        done = job => {
                            // A callback's interruption the run outran:
                            // raised still, the output complete.
                            let kept = stop.lock().ok().and_then(|mut s| s.take());
                            return match kept {
                                Some(e) => Err(Ended::Interrupted(e)),
                                None => done.map_err(Ended::Failed),
                            };
                        }
                        e = interrupted(&stop) => e,
                    };
                    // The interruption is what is raised; a failed abort
                    // leaves parts the bucket's lifecycle rule expires.
                    let _ = options.uploads.abort_all().await;
                    Err(Ended::Interrupted(ended))
                })
        })
        .map_err(|e| match e {
            Ended::Failed(e) => err(e),
            Ended::Interrupted(e) => e,
        })?;
    for w in warnings {
        let text = CString::new(pythonic(&w.to_string()).replace('\0', " "))?;
        // Stack level 2: the warning names the caller's line, not the wrapper's.
        PyErr::warn(py, &py.get_type::<PyUserWarning>(), &text, 2)?;
    }
    Ok(pythonic_warnings(&text))
}

/// Every typed warning of a run, once: those `reported` and those told as
/// `notes` (a checkpoint's skipped values, its tied weights), in order.
fn told_warnings(notes: &[Note], reported: &[Warning]) -> Vec<Warning> {
    let mut all = reported.to_vec();
    for note in notes {
        if let Note::Warning(w) = note {
            if !all.contains(w) {
                all.push(w.clone());
            }
        }
    }
    all
}

/// The report's JSON with each of its `warnings` naming keywords, not
/// flags (a typed warning's text is the library's, as the CLI prints it).
fn pythonic_warnings(text: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(text) else {
        return text.to_string();
    };
    if let Some(list) = v["warnings"].as_array_mut() {
        for w in list.iter_mut() {
            if let Some(said) = w.as_str() {
                *w = serde_json::Value::String(pythonic(said));
            }
        }
    }
    v.to_string()
}

/// The option table, for the Python tests and `help()`: (CLI flag, Python
/// keyword or `""`, what Python does instead when there is no keyword).
#[pyfunction]
pub(crate) fn convert_options() -> Vec<(&'static str, &'static str, &'static str)> {
    crate::options::CONVERT_OPTIONS
        .iter()
        .map(|o| match o.kind {
            crate::options::Kind::CliOnly(why) => (o.flag, "", why),
            _ => (o.flag, o.keyword, ""),
        })
        .collect()
}
