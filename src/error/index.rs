//! What can be wrong with a sharded checkpoint: its index
//! (`model.safetensors.index.json`, `pytorch_model.bin.index.json`) and
//! the shards it names.

use super::JsonError;

/// An index that is not JSON of the expected shape, names its shards
/// wrongly, or disagrees with what the shards hold; or a shard that is not
/// a regular file. Tensor names are quoted with escapes (`{:?}`).
///
/// Raised by the index reader ([`index`](crate::index): parsing the index,
/// opening the shards it names, checking it against their headers) and by
/// the PyTorch source when it checks a `.bin` index against its shards.
/// Nested in [`ErrorKind::Index`](super::ErrorKind::Index); each variant's
/// [`name`](IndexError::name) is the kind name reports give.
#[derive(Debug, thiserror::Error, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum IndexError {
    /// A file an input names (a shard) is a FIFO, a device, a socket or a
    /// folder: refused before any read, which could block or never end.
    #[error("is {0}, not a regular file: refused (reading it could block or never end)")]
    NotRegularFile(&'static str),
    /// A `*.safetensors.index.json` that is not valid JSON of the expected shape.
    #[error("index JSON: {0}")]
    IndexJson(#[source] JsonError),
    #[error("index names shard {0:?}, which is not a plain file name in the index's folder")]
    ShardName(String),
    #[error("weight_map puts tensor {tensor:?} in {shard}, which does not hold it")]
    IndexTensorMissing { tensor: String, shard: String },
    #[error("shard {shard} holds tensor {tensor:?}, which the weight_map {}", match .listed_in { Some(s) => format!("assigns to {s}"), None => "does not list".to_string() })]
    IndexTensorUnlisted {
        tensor: String,
        shard: String,
        listed_in: Option<String>,
    },
    /// A sharded checkpoint names or holds one tensor twice: which copy is it?
    #[error("tensor {tensor:?} appears twice: {place}")]
    IndexDuplicate { tensor: String, place: String },
    #[error("index metadata.total_size is {declared} but the shards hold {actual} tensor bytes")]
    IndexTotalSize { declared: u64, actual: u64 },
}

impl IndexError {
    /// The variant's name in snake case (`index_json`, `shard_name`): the
    /// [`ErrorKind::name`](super::ErrorKind::name) of the error it is in.
    pub fn name(&self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::tests::{assert_names_and_words, json};

    /// Each variant's kind name and words, as they were when these were
    /// variants of `ErrorKind`.
    #[test]
    fn names_and_messages_are_what_they_were() {
        let s = |t: &str| t.to_string();
        let cases: Vec<(IndexError, &str, &str)> = vec![
            (
                IndexError::NotRegularFile("a FIFO"),
                "not_regular_file",
                "is a FIFO, not a regular file: refused (reading it could block or never end)",
            ),
            (
                IndexError::IndexJson(json()),
                "index_json",
                "index JSON: expected value at line 1 column 6",
            ),
            (
                IndexError::ShardName(s("../x")),
                "shard_name",
                "index names shard \"../x\", which is not a plain file name in the index's folder",
            ),
            (
                IndexError::IndexTensorMissing {
                    tensor: s("w"),
                    shard: s("s1"),
                },
                "index_tensor_missing",
                "weight_map puts tensor \"w\" in s1, which does not hold it",
            ),
            (
                IndexError::IndexTensorUnlisted {
                    tensor: s("w"),
                    shard: s("s2"),
                    listed_in: Some(s("s1")),
                },
                "index_tensor_unlisted",
                "shard s2 holds tensor \"w\", which the weight_map assigns to s1",
            ),
            (
                IndexError::IndexTensorUnlisted {
                    tensor: s("w"),
                    shard: s("s2"),
                    listed_in: None,
                },
                "index_tensor_unlisted",
                "shard s2 holds tensor \"w\", which the weight_map does not list",
            ),
            (
                IndexError::IndexDuplicate {
                    tensor: s("w"),
                    place: s("shards s1 and s2 both hold it"),
                },
                "index_duplicate",
                "tensor \"w\" appears twice: shards s1 and s2 both hold it",
            ),
            (
                IndexError::IndexTotalSize {
                    declared: 10,
                    actual: 12,
                },
                "index_total_size",
                "index metadata.total_size is 10 but the shards hold 12 tensor bytes",
            ),
        ];
        assert_names_and_words(cases);
    }
}
