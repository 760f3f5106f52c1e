//! Helpers for the pipeline tests (pipeline, sink_adversaries, cli::convert,
//! and memory's bound): building inputs with the reference writer, reading outputs
//! back with the reference reader, runtimes, and small in-memory sources.

pub use super::{block_on, fixtures, listing, pattern, write, SplitMix, BIN};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use safetensors::tensor::{SafeTensors, TensorView};
use safetensors_stream::Dtype;

/// Every `fixtures/reference/*.safetensors`, sorted by name.
pub fn reference_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures().join("reference"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    v.sort();
    v
}

/// One tensor, owned: what a test builds inputs from and compares outputs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct T {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

impl T {
    /// A tensor whose bytes are a deterministic pattern seeded by its name.
    pub fn new(name: &str, dtype: Dtype, shape: &[u64]) -> T {
        let len = dtype.byte_len(shape).unwrap() as usize;
        let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        T {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            data: pattern(seed, len),
        }
    }

    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

/// Our dtype as the reference crate's.
pub fn ref_dtype(d: Dtype) -> safetensors::Dtype {
    serde_json::from_value(serde_json::Value::String(d.as_str().to_string())).unwrap()
}

/// The reference writer's bytes for `tensors` (it sorts them itself).
pub fn ref_serialize(tensors: &[T], metadata: Option<&[(&str, &str)]>) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|t| {
            let shape = t.shape.iter().map(|&d| d as usize).collect();
            (
                t.name.clone(),
                TensorView::new(ref_dtype(t.dtype), shape, &t.data).unwrap(),
            )
        })
        .collect();
    let md = metadata.map(|m| {
        m.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>()
    });
    safetensors::tensor::serialize(views, md).unwrap()
}

/// What the reference reader sees in a file: name -> (dtype, shape, bytes).
pub type RefTensors = BTreeMap<String, (String, Vec<usize>, Vec<u8>)>;

/// Reads `bytes` with the reference reader; panics with `what` if it refuses.
pub fn ref_read(bytes: &[u8], what: &str) -> RefTensors {
    let st = SafeTensors::deserialize(bytes)
        .unwrap_or_else(|e| panic!("the reference refuses {what}: {e:?}"));
    st.iter()
        .map(|(name, v)| {
            (
                name.to_string(),
                (
                    format!("{:?}", v.dtype()),
                    v.shape().to_vec(),
                    v.data().to_vec(),
                ),
            )
        })
        .collect()
}

/// The reference reader's view of `tensors` (what a correct file holds).
pub fn expected_tensors(tensors: &[T]) -> RefTensors {
    tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                (
                    format!("{:?}", ref_dtype(t.dtype)),
                    t.shape.iter().map(|&d| d as usize).collect(),
                    t.data.clone(),
                ),
            )
        })
        .collect()
}

/// The reference reader's `__metadata__`, sorted.
pub fn ref_metadata(bytes: &[u8]) -> Option<BTreeMap<String, String>> {
    let (_, md) = SafeTensors::read_metadata(bytes).unwrap();
    md.metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Tensor names in offset order, from the file's own header.
pub fn names_in_offset_order(bytes: &[u8]) -> Vec<String> {
    let (_, md) = SafeTensors::read_metadata(bytes).unwrap();
    md.offset_keys()
}
