//! Checkpoints written by torch's `HuggingFaceStorageWriter` with
//! `save_distributed=True` (torch 2.15, `distributed/checkpoint/hf_storage.py`):
//! a folder of safetensors files, one a rank
//! (`shard-0000R-model-0000I-of-0000N.safetensors`), each tensor there the
//! rank's local shard stored whole, its place in the full tensor in the
//! header's `__metadata__["DCP_SHARDING_INFO"]`, a JSON object
//! `{fqn: {"saved_offsets": [..]}}`. There is no `.metadata`: as torch's
//! `HuggingFaceStorageReader` does, the full shape is where the chunks end
//! (the largest offset plus size on each dimension); unlike it, the
//! chunks must then tile that shape exactly (`super::layout`).

use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;

use serde_json::Value;

use super::item::{Form, Item};
use super::layout::Chunk;
use super::Files;
use crate::error::dcp::DcpError;
use crate::header::{read::read_header, Header, Rules};
use crate::{Dtype, Error, Result};

/// A tensor as the files give it: its dtype, full shape and chunks.
pub(crate) struct Tensor {
    pub(crate) name: String,
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<u64>,
    pub(crate) chunks: Vec<(Chunk, Item)>,
}

/// The `__metadata__` key holding each tensor's offsets.
const SHARDING_KEY: &str = "DCP_SHARDING_INFO";

/// The `.safetensors` files of `dir` by name (hidden ones left out), sorted.
fn safetensors_files(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".safetensors") && !n.starts_with('.'))
        .collect();
    names.sort();
    Ok(names)
}

/// True if folder `dir`'s first `.safetensors` file (by name) has
/// `DCP_SHARDING_INFO` in its metadata.
pub(crate) fn is_checkpoint(dir: &Path) -> bool {
    let Some(first) = safetensors_files(dir)
        .ok()
        .and_then(|n| n.into_iter().next())
    else {
        return false;
    };
    crate::header::read::read_path_header(&dir.join(first), Rules::SOURCE)
        .is_ok_and(|h| h.metadata.is_some_and(|m| m.contains_key(SHARDING_KEY)))
}

fn bad_info(file: &str, reason: impl Into<String>) -> Error {
    Error::new(DcpError::ShardingInfo {
        file: file.to_string(),
        reason: reason.into(),
    })
}

/// Each tensor's offsets in `header`'s sharding info, by name.
fn offsets(file: &str, header: &Header) -> Result<HashMap<String, Vec<u64>>> {
    let text = header
        .metadata
        .as_ref()
        .and_then(|m| m.get(SHARDING_KEY))
        .ok_or_else(|| bad_info(file, "is missing"))?;
    let info: Value =
        serde_json::from_str(text).map_err(|e| bad_info(file, format!("is not JSON: {e}")))?;
    let Value::Object(info) = info else {
        return Err(bad_info(file, "is not a JSON object"));
    };
    let mut out = HashMap::with_capacity(info.len());
    for (name, v) in info {
        let list = v.get("saved_offsets").and_then(Value::as_array);
        let offsets: Option<Vec<u64>> = list.and_then(|l| l.iter().map(Value::as_u64).collect());
        let offsets = offsets.ok_or_else(|| {
            bad_info(
                file,
                format!("gives {name:?} no saved_offsets list of integers"),
            )
        })?;
        out.insert(name, offsets);
    }
    Ok(out)
}

/// Reads every safetensors file of `dir`: each tensor's chunks, in the
/// order the files (by name) first list them, and its full shape.
pub(crate) fn read(dir: &Path, files: &mut Files) -> Result<Vec<Tensor>> {
    let names = safetensors_files(dir).map_err(Error::io)?;
    let mut tensors: Vec<Tensor> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for file_name in &names {
        let (i, len) = files.get(file_name)?;
        let file = files.opened[i as usize].0.clone();
        let header = read_header(&mut BufReader::new(&*file), len, Rules::SOURCE)
            .map_err(|e| e.with_input(file_name))?;
        let offsets = offsets(file_name, &header)?;
        for t in &header.tensors {
            let meta = &t.meta;
            let on = |e: Error| e.with_tensor(&meta.name);
            let offsets = offsets
                .get(&meta.name)
                .ok_or_else(|| on(bad_info(file_name, "does not place it")))?;
            if offsets.len() != meta.shape.len() {
                return Err(on(Error::new(DcpError::ChunkRank {
                    chunk: format!("{offsets:?}"),
                    dims: meta.shape.len(),
                    chunk_dims: offsets.len(),
                })));
            }
            let chunk = Chunk {
                offsets: offsets.clone().into(),
                sizes: meta.shape.clone().into(),
            };
            let item = Item {
                file: i,
                offset: header.data_start() + t.begin,
                length: t.len(),
                form: Form::Plain,
            };
            let k = *by_name.entry(meta.name.clone()).or_insert_with(|| {
                tensors.push(Tensor {
                    name: meta.name.clone(),
                    dtype: meta.dtype,
                    shape: vec![0; meta.shape.len()],
                    chunks: Vec::new(),
                });
                tensors.len() - 1
            });
            let tensor = &mut tensors[k];
            if tensor.dtype != meta.dtype || tensor.shape.len() != meta.shape.len() {
                return Err(on(Error::new(DcpError::ItemTensor {
                    chunk: chunk.label(),
                    expected: format!("{} in {} dimensions", tensor.dtype, tensor.shape.len()),
                    found: format!("{} of shape {:?}", meta.dtype, meta.shape),
                })));
            }
            for ((end, &o), &s) in tensor.shape.iter_mut().zip(offsets).zip(&meta.shape) {
                let reach = o.checked_add(s).ok_or_else(|| {
                    on(Error::new(DcpError::TooLarge {
                        shape: offsets.clone(),
                    }))
                })?;
                *end = (*end).max(reach);
            }
            tensor.chunks.push((chunk, item));
        }
    }
    Ok(tensors)
}
