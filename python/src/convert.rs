//! `_native.convert`: the library's `convert_blocking` for Python.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use safetensors_stream::convert::{
    convert as run, dry_run as plan, open_inputs, ConvertOptions, Output,
};
use safetensors_stream::units::parse_size;
use safetensors_stream::{Error, ErrorKind, Note};

use crate::errors::to_py;
use crate::{parse_dtype, parse_order};

fn usage_error(message: String) -> Error {
    Error::new(ErrorKind::Usage(message))
}

/// Converts `inputs` into `output` (a path, or `-` for standard output) on a
/// current-thread runtime that lives for this call only, the GIL released.
/// Returns the report as the CLI's `--report json` prints it; with
/// `dry_run`, the plan as `--dry-run --json` prints it, nothing written.
#[pyfunction]
#[pyo3(signature = (inputs, output, *, max_shard_size=None, cast_all=None, casts=Vec::new(),
    include=Vec::new(), exclude=Vec::new(), renames=Vec::new(), strip_prefix=None,
    rename_regex=Vec::new(), prefix=None, metadata=Vec::new(), order="canonical",
    checksum=false, sync=true, skip_non_npy=false, name=None, allow_empty=false,
    overwrite_input=false, npy_void_as=None, dry_run=false))]
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
) -> PyResult<String> {
    let err = |e: Error| to_py(py, e);
    let notices = Arc::new(Mutex::new(Vec::<Note>::new()));
    let mut options = ConvertOptions::default();
    options.plan.max_shard_size = max_shard_size
        .map(|s| parse_size(&s).map_err(|e| usage_error(format!("max_shard_size: {e}"))))
        .transpose()
        .map_err(err)?;
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
    options.checksum = checksum;
    options.sync = sync;
    options.overwrite_input = overwrite_input;
    options.source.npy.skip_non_npy = skip_non_npy;
    options.source.name = name;
    options.source.npy.void_as = npy_void_as.as_deref().map(dtype).transpose().map_err(err)?;
    let collected = Arc::clone(&notices);
    options.notice = Some(Arc::new(move |note: &Note| {
        collected.lock().expect("notices lock").push(note.clone())
    }));
    let output = match output.as_os_str() == "-" {
        true => Output::Stdout,
        false => Output::File(output),
    };
    let text = py
        .detach(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(Error::io)?
                .block_on(async {
                    let notices = || notices.lock().expect("notices lock").clone();
                    if dry_run {
                        let sources = open_inputs(&inputs, &options).await?;
                        let planned = plan(&inputs, &sources, &output, &options)?;
                        Ok(planned.to_json(&notices()))
                    } else {
                        let report = run(&inputs, &output, &options).await?;
                        Ok(report.to_json(&notices()))
                    }
                })
        })
        .map_err(err)?;
    Ok(text)
}
