//! `_native.convert`: the library's `convert_blocking` for Python.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use safetensors_stream::convert::{ConvertOptions, Output};
use safetensors_stream::units::parse_size;
use safetensors_stream::{convert_blocking, Error, ErrorKind};

use crate::errors::to_py;
use crate::{parse_dtype, parse_order};

fn usage_error(message: String) -> Error {
    Error::new(ErrorKind::Usage(message))
}

/// Converts `inputs` into `output` (a path, or `-` for standard output) on a
/// current-thread runtime that lives for this call only, the GIL released.
/// Returns the report as the CLI's `--report json` prints it.
#[pyfunction]
#[pyo3(signature = (inputs, output, *, max_shard_size=None, cast_all=None, casts=Vec::new(),
    include=Vec::new(), exclude=Vec::new(), renames=Vec::new(), prefix=None, metadata=Vec::new(),
    order="canonical", checksum=false, sync=true, skip_non_npy=false, name=None))]
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
    prefix: Option<String>,
    metadata: Vec<(String, String)>,
    order: &str,
    checksum: bool,
    sync: bool,
    skip_non_npy: bool,
    name: Option<String>,
) -> PyResult<String> {
    let err = |e: Error| to_py(py, e);
    let notices = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut options = ConvertOptions::default();
    options.plan.max_shard_size = max_shard_size
        .map(|s| parse_size(&s).map_err(|e| usage_error(format!("max_shard_size: {}", e.0))))
        .transpose()
        .map_err(err)?;
    options.plan.cast_all = cast_all
        .as_deref()
        .map(parse_dtype)
        .transpose()
        .map_err(err)?;
    options.plan.casts = casts
        .iter()
        .map(|(from, to)| Ok((parse_dtype(from)?, parse_dtype(to)?)))
        .collect::<Result<_, Error>>()
        .map_err(err)?;
    options.plan.include = include;
    options.plan.exclude = exclude;
    options.plan.renames = renames;
    options.plan.prefix = prefix;
    options.plan.metadata = metadata;
    options.plan.order = parse_order(order).map_err(err)?;
    options.checksum = checksum;
    options.sync = sync;
    options.source.skip_non_npy = skip_non_npy;
    options.source.name = name;
    let collected = Arc::clone(&notices);
    options.notice = Some(Arc::new(move |msg: &str| {
        collected
            .lock()
            .expect("notices lock")
            .push(msg.to_string())
    }));
    let output = match output.as_os_str() == "-" {
        true => Output::Stdout,
        false => Output::File(output),
    };
    let report = py
        .detach(|| convert_blocking(&inputs, &output, &options))
        .map_err(err)?;
    let notices = notices.lock().expect("notices lock").clone();
    Ok(report.to_json(&notices))
}
