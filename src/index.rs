//! Sharded checkpoints: the Hugging Face `*.safetensors.index.json` and the
//! shard files it names.
//!
//! The index is a convention, not part of the format:
//! `{"metadata": {"total_size": N, ...}, "weight_map": {tensor: shard file}}`,
//! with `total_size` the sum of tensor bytes (headers excluded).
//!
//! Layer: header. Owns the index's model, its parsing and its check against
//! the shards' headers, the capped reads of small JSON files, and opening a
//! file an index names (regular files only). May import
//! the header and error layers; opening a checkpoint's files and reading
//! their headers is the source layer's (`source::safetensors`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::header::Header;
use crate::limits::{Limit, Limits};
use crate::location::Location;
use crate::{Error, ErrorKind, IndexError, JsonError, Result};

/// The suffix that marks an index file.
pub const INDEX_SUFFIX: &str = ".safetensors.index.json";

/// A parsed `*.safetensors.index.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardIndex {
    /// `total_size` and any other keys the writer put there.
    pub metadata: IndexMetadata,
    /// Tensor name to shard file name, sorted by tensor name.
    pub weight_map: BTreeMap<String, String>,
}

/// The index's `metadata` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexMetadata {
    /// Sum of every tensor's byte length, headers excluded.
    pub total_size: u64,
    /// Other keys, kept as they were.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// The index as written: the weight_map's entries in document order, so
/// that a tensor listed twice is seen (a map would keep the last silently).
#[derive(Deserialize)]
struct IndexText {
    metadata: IndexMetadata,
    weight_map: Entries,
}

/// A JSON object's entries, every one kept.
struct Entries(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of tensor names to shard file names")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, String>()? {
                    // The entry in the list (room for two as it grows) and
                    // in the map it becomes, and the two names.
                    let cost = ENTRY_COST + entry.0.len() + entry.1.len();
                    charge_json(cost as u64)?;
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// What a weight_map entry costs held beyond its two names: in the list
/// as read (48 bytes, room for twice that as it grows), then in the sorted
/// map, and the allocator's share of four strings (benches/README.md,
/// "Costs charged per entry").
const ENTRY_COST: usize = 224;

thread_local! {
    /// Bytes of JSON read on this thread by the parse under way, and bytes
    /// of memory charged to it ([`charge_json`]).
    static JSON_PARSE: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Starts the count of a JSON parse on this thread: `read` bytes are
/// there already (a text parsed from memory), more are added as they are
/// read.
pub(crate) fn start_json_parse(read: u64) {
    JSON_PARSE.with(|c| c.set((read, 0)));
}

/// A reader that adds the bytes it reads to [`JSON_PARSE`].
struct CountedJson<R>(R);

impl<R: std::io::Read> std::io::Read for CountedJson<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        JSON_PARSE.with(|c| {
            let (read, charged) = c.get();
            c.set((read + n as u64, charged));
        });
        Ok(n)
    }
}

/// Charges `bytes` of memory, held by what a visitor builds from an index
/// or a raw manifest, against the bound for the bytes read so far
/// ([`within_memory_bound`](crate::header::within_memory_bound)). Over it,
/// the parse fails with that error's words.
pub(crate) fn charge_json<E: serde::de::Error>(bytes: u64) -> std::result::Result<(), E> {
    JSON_PARSE.with(|c| {
        let (read, charged) = c.get();
        let charged = charged.saturating_add(bytes);
        c.set((read, charged));
        crate::header::within_memory_bound(charged, read).map_err(E::custom)
    })
}

impl ShardIndex {
    /// Parses an index's JSON text; a tensor listed twice in the
    /// weight_map is refused, naming it.
    pub fn from_json(text: &[u8]) -> Result<ShardIndex> {
        start_json_parse(text.len() as u64);
        let raw: IndexText = serde_json::from_slice(text)
            .map_err(|e| Error::new(IndexError::IndexJson(JsonError::new(e))))?;
        Self::from_text(raw)
    }

    /// Reads and parses the index file at `path` as a stream: a file that
    /// is not JSON (`/dev/zero`, a binary) fails at its first bad byte, one
    /// that never ends at [`MAX_HEADER_LEN`](crate::header::MAX_HEADER_LEN) bytes; errors name the path.
    pub fn from_json_file(path: &Path) -> Result<ShardIndex> {
        Self::from_json_file_within(path, &Limits::default())
    }

    /// [`from_json_file`](Self::from_json_file) refusing an index over the
    /// caller's `index-bytes` limit.
    pub fn from_json_file_within(path: &Path, limits: &Limits) -> Result<ShardIndex> {
        let raw: IndexText = json_file(path, "index file", limits, |e| {
            IndexError::IndexJson(JsonError::new(e)).into()
        })?;
        Self::from_text(raw).map_err(|e| e.with_input(path.display()))
    }

    fn from_text(raw: IndexText) -> Result<ShardIndex> {
        let mut weight_map = BTreeMap::new();
        for (tensor, shard) in raw.weight_map.0 {
            if let Some(first) = weight_map.get(&tensor) {
                let place = format!("the weight_map lists it twice (in {first} and in {shard})");
                return Err(Error::new(IndexError::IndexDuplicate { tensor, place }));
            }
            weight_map.insert(tensor, shard);
        }
        Ok(ShardIndex {
            metadata: raw.metadata,
            weight_map,
        })
    }

    /// Shard file names in first-seen order of the sorted weight_map, deduplicated,
    /// each checked to be a plain file name (never a path).
    pub fn shard_names(&self) -> Result<Vec<&str>> {
        let mut names: Vec<&str> = self.weight_map.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        for name in &names {
            check_plain_name(name)?;
        }
        Ok(names)
    }
}

/// Parses the JSON file at `path` as it is read, through a 64 KiB buffer:
/// the parse stops at the first byte that cannot continue a JSON document,
/// and past the `index-bytes` limit (by default [`MAX_HEADER_LEN`](crate::header::MAX_HEADER_LEN) bytes;
/// refused, naming it). The whole text is never held, only what it parses
/// into. `kind` words a syntax error.
pub(crate) fn json_file<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &'static str,
    limits: &Limits,
    kind: impl FnOnce(serde_json::Error) -> ErrorKind,
) -> Result<T> {
    let cap = limits.get(Limit::IndexBytes);
    use std::io::Read;
    let on_path = |e: Error| e.with_input(path.display());
    let file = std::fs::File::open(path).map_err(|e| on_path(Error::io(e)))?;
    start_json_parse(0);
    let counted = CountedJson(file.take(cap.saturating_add(1)));
    let mut capped = std::io::BufReader::with_capacity(64 * 1024, counted);
    let parsed = serde_json::from_reader::<_, T>(&mut capped);
    let read = cap.saturating_add(1) - capped.get_ref().0.limit();
    if read > cap {
        let over = format!("the {what} is over {cap} bytes");
        return Err(on_path(limits.refuse(Limit::IndexBytes, over)));
    }
    parsed.map_err(|e| match e.io_error_kind() {
        Some(_) => on_path(Error::io(e.into())),
        None => {
            let offset = (e.line() == 1).then_some(e.column().saturating_sub(1) as u64);
            let err = on_path(Error::new(kind(e)));
            match offset {
                Some(o) => err.at_offset(o),
                None => err,
            }
        }
    })
}

/// Opens a file an input names (a shard of an index) for reading, refusing
/// anything but a regular file without blocking
/// ([`open_if_regular`](crate::io_util::open_if_regular)).
pub(crate) fn open_regular(path: &Path) -> Result<std::fs::File> {
    let on_path = |e: Error| e.with_input(path.display());
    match crate::io_util::open_if_regular(path).map_err(|e| on_path(Error::io(e)))? {
        Ok(file) => Ok(file),
        Err(what) => Err(on_path(Error::new(IndexError::NotRegularFile(what)))),
    }
}

/// True if `path`'s file name ends in `.safetensors.index.json`.
pub fn is_index_path(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(INDEX_SUFFIX))
}

/// Refuses anything but a plain file name: no separator, no `..`, not empty.
fn check_plain_name(name: &str) -> Result<()> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && !name.contains('\0');
    if plain {
        Ok(())
    } else {
        Err(IndexError::ShardName(name.to_string()).into())
    }
}

/// A checkpoint opened for reading: one file, or an index and its shards.
/// Opened from a path by [`Checkpoint::open`] (in the source layer, which
/// says what a file that is not safetensors is) or from object storage.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The index, when the checkpoint was opened through one.
    pub index: Option<ShardIndex>,
    /// Each file (or object) with its validated header, in the index's
    /// shard order.
    pub files: Vec<(Location, Header)>,
}

impl Checkpoint {
    /// Every tensor's byte length, summed over all files.
    pub fn data_len(&self) -> u64 {
        self.files.iter().map(|(_, h)| h.data_len()).sum()
    }

    /// Number of tensors over all files.
    pub fn tensor_count(&self) -> usize {
        self.files.iter().map(|(_, h)| h.tensors.len()).sum()
    }
}

/// The name an index gives a shard at `path`: its file name.
pub(crate) fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The weight_map and total_size must describe exactly what the shards
/// hold: each shard by the name the index gives it, with its header.
pub(crate) fn check_against_shards<'a>(
    index: &ShardIndex,
    files: &'a [(String, &'a Header)],
) -> Result<()> {
    let held = |(shard, h): &'a (String, &'a Header)| {
        (
            shard.as_str(),
            h.tensors.iter().map(|t| t.meta.name.as_str()),
        )
    };
    check_weight_map(index, files.iter().map(held), true)?;
    let actual = files.iter().map(|(_, h)| h.data_len()).sum();
    if index.metadata.total_size != actual {
        return Err(IndexError::IndexTotalSize {
            declared: index.metadata.total_size,
            actual,
        }
        .into());
    }
    Ok(())
}

/// The weight_map must say where each tensor of `shards` (each shard's
/// name, in the index's words, and its tensors' names) is: each tensor held
/// listed for the shard that holds it, in one shard only if
/// `refuse_twice`, and each tensor listed held there.
pub(crate) fn check_weight_map<'a, N: Iterator<Item = &'a str>>(
    index: &ShardIndex,
    shards: impl Iterator<Item = (&'a str, N)> + Clone,
    refuse_twice: bool,
) -> Result<()> {
    // Which shard holds each tensor, by its position: 92k tensors at
    // DeepSeek-V3's structure, so no name of a shard copied per tensor.
    let held: usize = shards.clone().map(|(_, names)| names.count()).sum();
    let mut holder: HashMap<&str, usize> = HashMap::with_capacity(held);
    let mut shard_names = Vec::new();
    for (k, (shard, names)) in shards.enumerate() {
        shard_names.push(shard);
        for name in names {
            if let Some(first) = holder.insert(name, k).filter(|_| refuse_twice) {
                return Err(IndexError::IndexDuplicate {
                    tensor: name.to_string(),
                    place: format!("shards {} and {shard} both hold it", shard_names[first]),
                }
                .into());
            }
            let listed = index.weight_map.get(name);
            if listed.map(String::as_str) != Some(shard) {
                return Err(IndexError::IndexTensorUnlisted {
                    tensor: name.to_string(),
                    shard: shard.to_string(),
                    listed_in: listed.cloned(),
                }
                .into());
            }
        }
    }
    // Every tensor held is listed where it is, each once: as many listed
    // as held means every listed one is held there; only when fewer are
    // held is the listing searched for the one missing.
    if holder.len() != index.weight_map.len() {
        for (tensor, shard) in &index.weight_map {
            if holder.get(tensor.as_str()).map(|&k| shard_names[k]) != Some(shard) {
                return Err(IndexError::IndexTensorMissing {
                    tensor: tensor.clone(),
                    shard: shard.clone(),
                }
                .into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_only() {
        for bad in [
            "",
            ".",
            "..",
            "../x.safetensors",
            "/etc/passwd",
            "a/b",
            "a\\b",
        ] {
            assert!(check_plain_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_plain_name("model-00001-of-00002.safetensors").is_ok());
    }

    #[test]
    fn index_json_keeps_other_metadata() {
        let text =
            br#"{"metadata":{"total_size":12,"format":"pt"},"weight_map":{"a":"m.safetensors"}}"#;
        let idx = ShardIndex::from_json(text).unwrap();
        assert_eq!(idx.metadata.total_size, 12);
        assert_eq!(idx.metadata.other["format"], "pt");
        assert_eq!(idx.shard_names().unwrap(), ["m.safetensors"]);
    }

    #[test]
    fn index_suffix() {
        assert!(is_index_path(Path::new("x/model.safetensors.index.json")));
        assert!(!is_index_path(Path::new("model.safetensors")));
    }
}
