//! The files a plan lays out, decided without I/O: the shards' names and
//! the index's JSON (the same for files and objects), and which part of a
//! sharded plan a run writes (`--shard K`, `--index-only`).
//!
//! One plan, many independent workers: every worker plans the whole
//! conversion from the headers alone, so all of them agree on the layout
//! without talking to each other; worker K writes shard K only,
//! byte-identical to the shard a single run writes.

use std::path::{Path, PathBuf};

use crate::header::encode::encode_entries;
use crate::index::{IndexMetadata, ShardIndex, INDEX_SUFFIX};
use crate::plan::{Plan, ShardPlan};
use crate::{Error, ErrorKind, Result};

/// Whether the output names a folder to write into: its name ends in `/`.
pub(crate) fn names_folder(output: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    output.as_os_str().as_bytes().ends_with(b"/")
}

/// The paths of a sharded set: `BASE-00001-of-0000N.safetensors` beside
/// `output`, and `BASE.safetensors.index.json`. One shard is just `output`.
/// An output named as a folder (`out/`) holds `model.safetensors`, or its shards
/// and index, as a checkpoint folder does.
///
/// ```
/// use safetensors_stream::convert::shard_paths;
/// use std::path::Path;
///
/// let (shards, index) = shard_paths(Path::new("out/"), 2);
/// assert_eq!(shards[1], Path::new("out/model-00002-of-00002.safetensors"));
/// assert_eq!(index.unwrap(), Path::new("out/model.safetensors.index.json"));
/// assert_eq!(shard_paths(Path::new("out/"), 1).0, [Path::new("out/model.safetensors")]);
/// assert_eq!(shard_paths(Path::new("m.safetensors"), 1).0, [Path::new("m.safetensors")]);
/// ```
pub fn shard_paths(output: &Path, shards: usize) -> (Vec<PathBuf>, Option<PathBuf>) {
    if names_folder(output) {
        // The name Hugging Face's tools use.
        return shard_paths(&output.join("model.safetensors"), shards);
    }
    if shards <= 1 {
        return (vec![output.to_path_buf()], None);
    }
    let name = output.file_name().unwrap_or_default().to_string_lossy();
    let base = name
        .strip_suffix(INDEX_SUFFIX)
        .or_else(|| name.strip_suffix(".safetensors"))
        .unwrap_or(&name);
    let dir = output.parent().unwrap_or(Path::new(""));
    let paths = (1..=shards)
        .map(|k| dir.join(format!("{base}-{k:05}-of-{shards:05}.safetensors")))
        .collect();
    let index = dir.join(format!("{base}{INDEX_SUFFIX}"));
    (paths, Some(index))
}

/// The Hugging Face index: pretty JSON with sorted keys and a final newline,
/// as `huggingface_hub` writes it.
pub(crate) fn index_json(plan: &Plan, paths: &[PathBuf]) -> Vec<u8> {
    let mut weight_map = std::collections::BTreeMap::new();
    for (shard, path) in plan.shards.iter().zip(paths) {
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        for t in &shard.header.header.tensors {
            weight_map.insert(t.meta.name.clone(), file.to_string());
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

/// Which files of the plan a run writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Part {
    /// Every shard, then the index (the default).
    #[default]
    All,
    /// Shard K only (1-based: the K of `-0000K-of-0000N`), no index.
    /// Running it twice writes the same bytes.
    Shard(usize),
    /// Shards `first`, `first + step`, `first + 2 * step`, ... (1-based),
    /// no index: worker `first` of `step` workers, in one process that
    /// plans once for all its shards (`--shard K --shard-stride N`).
    Stride {
        /// The first shard written, 1-based.
        first: usize,
        /// Shards between two written, at least 1.
        step: usize,
    },
    /// No shard: check that every planned shard is there at its planned
    /// length, then write the index. A plan of one file has no index: the
    /// file is checked, and nothing is written, so a fan-out's last step is
    /// the same command for any number of shards.
    IndexOnly,
}

impl Part {
    /// Refuses a part the plan does not have: a shard number out of range.
    pub fn check(self, plan: &Plan) -> Result<()> {
        let count = plan.shards.len();
        match self {
            Part::Shard(k) | Part::Stride { first: k, .. } if !(1..=count).contains(&k) => {
                let s = if count == 1 { "" } else { "s" };
                let msg = format!("--shard {k}: the plan has {count} shard{s} (numbered from 1)");
                Err(ErrorKind::Usage(msg).into())
            }
            Part::Stride { step: 0, .. } => {
                Err(ErrorKind::Usage("--shard-stride 0: the stride is at least 1".into()).into())
            }
            _ => Ok(()),
        }
    }

    /// Whether the shard at `index` (0-based) is written by this run.
    pub fn writes_shard(self, index: usize) -> bool {
        match self {
            Part::All => true,
            Part::Shard(k) => k == index + 1,
            Part::Stride { first, step } => {
                index + 1 >= first && step > 0 && (index + 1 - first) % step == 0
            }
            Part::IndexOnly => false,
        }
    }

    /// Whether this run writes the index (when the plan has one).
    pub fn writes_index(self) -> bool {
        matches!(self, Part::All | Part::IndexOnly)
    }
}

impl Plan {
    /// Drops the shards a run writing `part` does not write: a fan-out
    /// worker (`--shard K`, or `--shard-stride`'s shards) keeps its shards' entries, refs and header bytes,
    /// and the others become empty shells, so it holds one shard's plan
    /// through the copy, not all of them. Their count
    /// stays, which is all a worker needs of them: the `-of-0000N` in every
    /// name. Call it after the plan id is checked (it is made from every
    /// shard's header); [`Plan::tensor_count`] and [`Plan::data_len`] then
    /// count what this run writes. [`Part::All`] and [`Part::IndexOnly`]
    /// (which checks every shard's length) keep everything.
    ///
    /// ```
    /// use safetensors_stream::{Dtype, header::TensorMeta, source::Listing};
    /// use safetensors_stream::plan::{plan, PlanOptions};
    /// use safetensors_stream::convert::Part;
    ///
    /// let input = Listing {
    ///     input: "a.safetensors".into(),
    ///     tensors: (0..4).map(|i| TensorMeta::new(format!("t{i}"), Dtype::U8, [8])).collect(),
    ///     metadata: None,
    /// };
    /// let mut p = plan(&[input], &PlanOptions::default().max_shard_size(Some(16)))?;
    /// assert_eq!((p.shards.len(), p.tensor_count()), (2, 4));
    /// p.keep_only(Part::Shard(2));
    /// assert_eq!((p.shards.len(), p.tensor_count()), (2, 2));
    /// assert!(p.shards[0].refs.is_empty() && p.shards[1].refs.len() == 2);
    /// # Ok::<(), safetensors_stream::Error>(())
    /// ```
    pub fn keep_only(&mut self, part: Part) {
        if !matches!(part, Part::Shard(_) | Part::Stride { .. }) {
            return;
        }
        for (index, shard) in self.shards.iter_mut().enumerate() {
            if !part.writes_shard(index) {
                *shard = ShardPlan::shell();
            }
        }
    }
}

impl ShardPlan {
    /// A shard this run does not write: no tensor, no metadata.
    fn shell() -> ShardPlan {
        let header = encode_entries(Vec::new(), None).expect("an empty header encodes");
        ShardPlan {
            header,
            refs: Vec::new(),
        }
    }
}

/// A shard found at `found` bytes (`None`: not there) against its plan.
pub(crate) fn check_shard_len(shown: &str, found: Option<u64>, planned: u64) -> Result<()> {
    let detail = match found {
        Some(len) if len == planned => return Ok(()),
        Some(len) => format!("it holds {len} bytes, the plan {planned}"),
        None => "it does not exist".to_string(),
    };
    Err(Error::new(ErrorKind::ShardNotWritten {
        shard: shown.to_string(),
        detail,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_select_shards_and_index() {
        assert!(Part::All.writes_shard(3) && Part::All.writes_index());
        assert!(Part::Shard(2).writes_shard(1));
        assert!(!Part::Shard(2).writes_shard(0) && !Part::Shard(2).writes_index());
        assert!(!Part::IndexOnly.writes_shard(0) && Part::IndexOnly.writes_index());
        let second_of_three = Part::Stride { first: 2, step: 3 };
        let written: Vec<usize> = (0..9)
            .filter(|&i| second_of_three.writes_shard(i))
            .collect();
        assert_eq!(written, [1, 4, 7]);
        assert!(!second_of_three.writes_index());
        assert!(!Part::Stride { first: 2, step: 0 }.writes_shard(1));
    }
}
