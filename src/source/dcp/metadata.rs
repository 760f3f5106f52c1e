//! A distributed checkpoint's `.metadata`: what torch's `FileSystemWriter`
//! pickles (`pickle.dump` of a `Metadata` dataclass; torch reads it back
//! with `pickle.load`, running whatever it names). Read here with the
//! PyTorch source's unpickler and a table of its own: the checkpoint's
//! dataclasses are built as records, torch's dtypes and `torch.Size` as
//! values; any other global is refused by name, nothing is run.
//!
//! What it holds, as torch 2.15 writes it:
//! - `state_dict_metadata`: each dotted name to a `TensorStorageMetadata`
//!   (`properties`, a `TensorProperties` whose state is the tuple
//!   `(dtype, layout, requires_grad, memory format, pin_memory[, strides])`;
//!   `size`; `chunks`, each `ChunkStorageMetadata(offsets, sizes)`, in rank
//!   order) or a `BytesStorageMetadata` (a non-tensor value);
//! - `storage_data`: each `MetadataIndex(fqn, offset)` (the chunk's
//!   offsets) to a `_StorageInfo(relative_path, offset, length)`, the
//!   item's place, with `transform_descriptors` when written through a
//!   stream transform;
//! - `planner_data`, `storage_meta` (a `pathlib` path among its values)
//!   and `version`: not needed to read the tensors.

use std::collections::HashMap;

use super::layout::Chunk;
use crate::error::dcp::DcpError;
use crate::source::pytorch::model::torch_dtype;
use crate::source::pytorch::pickle::{
    unpickle_with, Allow, Class, Global, Id, Limits, Node, Pickled,
};
use crate::{Dtype, Error, ErrorKind, Result};

const METADATA: &str = "torch.distributed.checkpoint.metadata";
const FILESYSTEM: &str = "torch.distributed.checkpoint.filesystem";

const ROOT: Class = Class::new(METADATA, "Metadata");
const TENSOR: Class = Class::new(METADATA, "TensorStorageMetadata");
const BYTES: Class = Class::new(METADATA, "BytesStorageMetadata");
const CHUNK: Class = Class::new(METADATA, "ChunkStorageMetadata");
const PROPERTIES: Class = Class::new(METADATA, "TensorProperties");
const INDEX: Class = Class::new(METADATA, "MetadataIndex");
const STORAGE_INFO: Class = Class::new(FILESYSTEM, "_StorageInfo");

/// The classes a `.metadata` may build: the checkpoint's records, and the
/// `pathlib` path `storage_meta.checkpoint_id` holds (`pathlib._local`
/// in Python 3.13 and later).
pub(crate) const CLASSES: &[Class] = &[
    ROOT,
    TENSOR,
    BYTES,
    CHUNK,
    PROPERTIES,
    INDEX,
    STORAGE_INFO,
    Class::new(METADATA, "_MEM_FORMAT_ENCODING"),
    Class::new(METADATA, "StorageMeta"),
    Class::new("pathlib", "PosixPath"),
    Class::new("pathlib", "PurePosixPath"),
    Class::new("pathlib", "WindowsPath"),
    Class::new("pathlib", "PureWindowsPath"),
    Class::new("pathlib._local", "PosixPath"),
    Class::new("pathlib._local", "PurePosixPath"),
    Class::new("pathlib._local", "WindowsPath"),
    Class::new("pathlib._local", "PureWindowsPath"),
];

/// torch's globals a `.metadata` may name: dtypes, `torch.Size`, layouts
/// (`_get_layout` is recorded, never called) and `OrderedDict`. No tensor
/// or storage: the metadata holds none.
fn globals(module: &str, name: &str) -> Option<Global> {
    Global::lookup(module, name).filter(|g| {
        matches!(
            g,
            Global::Dtype(_)
                | Global::Size
                | Global::GetLayout
                | Global::Layout(_)
                | Global::OrderedDict
        )
    })
}

/// What `.metadata` may name.
pub(crate) const ALLOW: Allow = Allow {
    globals,
    classes: CLASSES,
};

/// One tensor as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<u64>,
    /// Its chunks, each with its item's place (`None`: no storage entry).
    pub(crate) chunks: Vec<(Chunk, Option<Stored>)>,
}

/// Where the metadata says a chunk's item is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// The file, relative to the checkpoint's folder.
    pub(crate) path: String,
    /// The item's first byte there.
    pub(crate) offset: u64,
    pub(crate) length: u64,
    /// The stream transforms it was written through (none: plain).
    pub(crate) transforms: Vec<String>,
}

/// A checkpoint's metadata: its tensors in its order, and the names of
/// its non-tensor values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) tensors: Vec<Entry>,
    /// The non-tensor values (`BytesStorageMetadata`).
    pub(crate) skipped: Vec<String>,
}

fn shape_err(what: impl Into<String>, expected: &'static str, found: String) -> Error {
    Error::new(DcpError::Shape {
        what: what.into(),
        expected,
        found,
    })
}

/// Parses `.metadata`'s bytes.
pub(crate) fn parse(data: &[u8]) -> Result<Parsed> {
    let (p, _) = unpickle_with(data, Limits::for_input(data.len()), ALLOW)?;
    let r = Reader { p: &p };
    r.object(p.root, ROOT, "the metadata")?;
    let stored = r.storage_data(p.root)?;
    let sdm = r.attr(p.root, "state_dict_metadata", ROOT)?;
    let mut out = Parsed::default();
    let mut seen = std::collections::HashSet::new();
    for &(k, v) in r.dict(sdm, "Metadata.state_dict_metadata")? {
        let name = r
            .string(k, "a key of Metadata.state_dict_metadata")?
            .to_string();
        if !seen.insert(name.clone()) {
            return Err(Error::new(DcpError::Twice {
                what: "tensor",
                name,
            }));
        }
        match p.get(v) {
            Node::Object { class, .. } if class == BYTES => out.skipped.push(name),
            Node::Object { class, .. } if class == TENSOR => {
                let entry = r.tensor(v, name, &stored)?;
                out.tensors.push(entry);
            }
            other => {
                let what = format!("the value of {name:?} in Metadata.state_dict_metadata");
                return Err(shape_err(
                    what,
                    "a TensorStorageMetadata or BytesStorageMetadata",
                    describe(other),
                ));
            }
        }
    }
    Ok(out)
}

/// What a value is, for messages.
fn describe(n: Node) -> String {
    match n {
        Node::None => "None".into(),
        Node::Bool(b) => format!("{b}"),
        Node::Int(i) => format!("{i}"),
        Node::BigInt => "an int past 64 bits".into(),
        Node::Float(f) => format!("{f}"),
        Node::Str(s) => format!("{:?}", s.chars().take(40).collect::<String>()),
        Node::Bytes(b) => format!("{} bytes", b.len()),
        Node::Tuple(v) => format!("a tuple of {}", v.len()),
        Node::List(v) => format!("a list of {}", v.len()),
        Node::Dict(v) => format!("a dict of {}", v.len()),
        Node::Set(v) => format!("a set of {}", v.len()),
        Node::Global(g) => format!("the global {g:?}"),
        Node::Call { func, .. } => format!("a call of {func:?}"),
        Node::Object { class, .. } => format!("a {}.{}", class.module, class.name),
        Node::Persistent(_) => "a persistent id".into(),
    }
}

/// Storage entries by tensor and chunk offsets.
type StorageMap = HashMap<(String, Vec<u64>), Stored>;

struct Reader<'a> {
    p: &'a Pickled,
}

impl Reader<'_> {
    fn object(&self, id: Id, class: Class, what: &str) -> Result<()> {
        match self.p.get(id) {
            Node::Object { class: c, .. } if c == class => Ok(()),
            other => Err(shape_err(what, class.name, describe(other))),
        }
    }

    /// Attribute `name` of the `class` record `id`.
    fn attr(&self, id: Id, name: &str, class: Class) -> Result<Id> {
        self.p.attribute(id, name).ok_or_else(|| {
            let what = format!("{}.{name}", class.name);
            shape_err(what, "present", "missing".into())
        })
    }

    fn dict(&self, id: Id, what: &str) -> Result<&[(Id, Id)]> {
        match self.p.get(id) {
            Node::Dict(items) => Ok(items),
            other => Err(shape_err(what, "a dict", describe(other))),
        }
    }

    fn string(&self, id: Id, what: &str) -> Result<&str> {
        match self.p.get(id) {
            Node::Str(s) => Ok(s),
            other => Err(shape_err(what, "a str", describe(other))),
        }
    }

    fn uint(&self, id: Id, what: &str) -> Result<u64> {
        match self.p.get(id) {
            Node::Int(i) if i >= 0 => Ok(i as u64),
            other => Err(shape_err(what, "an int >= 0", describe(other))),
        }
    }

    /// A `torch.Size` (built as a tuple), a tuple or a list of ints >= 0.
    fn ints(&self, id: Id, what: &str) -> Result<Box<[u64]>> {
        let items = match self.p.get(id) {
            Node::Tuple(v) | Node::List(v) => v,
            other => return Err(shape_err(what, "a torch.Size", describe(other))),
        };
        items.iter().map(|&i| self.uint(i, what)).collect()
    }

    /// `Metadata.storage_data`: every item's place by tensor and offsets.
    fn storage_data(&self, root: Id) -> Result<StorageMap> {
        let mut map = StorageMap::new();
        let Some(sd) = self.p.attribute(root, "storage_data") else {
            return Ok(map);
        };
        if self.p.get(sd) == Node::None {
            return Ok(map);
        }
        for &(k, v) in self.dict(sd, "Metadata.storage_data")? {
            self.object(k, INDEX, "a key of Metadata.storage_data")?;
            let fqn = self.string(self.attr(k, "fqn", INDEX)?, "MetadataIndex.fqn")?;
            // A non-tensor value's entry has no offset.
            let offset = match self.p.attribute(k, "offset").map(|o| (o, self.p.get(o))) {
                None | Some((_, Node::None)) => continue,
                Some((o, _)) => self.ints(o, "MetadataIndex.offset")?.into_vec(),
            };
            let stored = self.stored(v)?;
            let key = (fqn.to_string(), offset);
            if map.contains_key(&key) {
                let name = format!("{} at {:?}", key.0, key.1);
                return Err(Error::new(DcpError::Twice {
                    what: "storage entry",
                    name,
                }));
            }
            map.insert(key, stored);
        }
        Ok(map)
    }

    /// A `_StorageInfo`.
    fn stored(&self, id: Id) -> Result<Stored> {
        self.object(id, STORAGE_INFO, "a value of Metadata.storage_data")?;
        let path = self.attr(id, "relative_path", STORAGE_INFO)?;
        let offset = self.attr(id, "offset", STORAGE_INFO)?;
        let length = self.attr(id, "length", STORAGE_INFO)?;
        let mut transforms = Vec::new();
        if let Some(t) = self.p.attribute(id, "transform_descriptors") {
            match self.p.get(t) {
                Node::None => {}
                Node::List(v) | Node::Tuple(v) => {
                    for &d in v {
                        let d = self.string(d, "_StorageInfo.transform_descriptors")?;
                        transforms.push(d.to_string());
                    }
                }
                other => {
                    let what = "_StorageInfo.transform_descriptors";
                    return Err(shape_err(what, "a list of str", describe(other)));
                }
            }
        }
        Ok(Stored {
            path: self.string(path, "_StorageInfo.relative_path")?.to_string(),
            offset: self.uint(offset, "_StorageInfo.offset")?,
            length: self.uint(length, "_StorageInfo.length")?,
            transforms,
        })
    }

    /// A `TensorStorageMetadata` named `name`.
    fn tensor(&self, id: Id, name: String, stored: &StorageMap) -> Result<Entry> {
        let on = |e: Error| e.with_tensor(&name);
        let props = self.attr(id, "properties", TENSOR).map_err(on)?;
        let dtype = self.properties(props, &name).map_err(on)?;
        let size = self.attr(id, "size", TENSOR).map_err(on)?;
        let shape = self
            .ints(size, "TensorStorageMetadata.size")
            .map_err(on)?
            .into_vec();
        let list = self.attr(id, "chunks", TENSOR).map_err(on)?;
        let items = match self.p.get(list) {
            Node::List(v) | Node::Tuple(v) => v,
            other => {
                return Err(on(shape_err(
                    "TensorStorageMetadata.chunks",
                    "a list",
                    describe(other),
                )))
            }
        };
        let mut chunks = Vec::with_capacity(items.len().min(1 << 16));
        for &c in items {
            self.object(c, CHUNK, "an item of TensorStorageMetadata.chunks")
                .map_err(on)?;
            let offsets = self.attr(c, "offsets", CHUNK).map_err(on)?;
            let sizes = self.attr(c, "sizes", CHUNK).map_err(on)?;
            let chunk = Chunk {
                offsets: self
                    .ints(offsets, "ChunkStorageMetadata.offsets")
                    .map_err(on)?,
                sizes: self.ints(sizes, "ChunkStorageMetadata.sizes").map_err(on)?,
            };
            let place = stored.get(&(name.clone(), chunk.offsets.to_vec())).cloned();
            chunks.push((chunk, place));
        }
        Ok(Entry {
            name,
            dtype,
            shape,
            chunks,
        })
    }

    /// A `TensorProperties`' dtype, its layout checked strided. Its state
    /// is the tuple its `__getstate__` gives (5 items, 6 since `strides`),
    /// or a plain dataclass's dict.
    fn properties(&self, id: Id, tensor: &str) -> Result<Dtype> {
        self.object(id, PROPERTIES, "TensorStorageMetadata.properties")?;
        let (dtype, layout) = match self.p.get(id) {
            Node::Object { state: Some(s), .. } => match self.p.get(s) {
                Node::Tuple(v) if v.len() >= 2 => (Some(v[0]), Some(v[1])),
                Node::Dict(_) => (
                    self.p.attribute(id, "dtype"),
                    self.p.attribute(id, "layout"),
                ),
                other => {
                    return Err(shape_err(
                        "TensorProperties' state",
                        "a tuple",
                        describe(other),
                    ))
                }
            },
            _ => (None, None),
        };
        let dtype = dtype
            .ok_or_else(|| shape_err("TensorProperties.dtype", "present", "missing".into()))?;
        let name = match self.p.get(dtype) {
            Node::Global(Global::Dtype(d)) => d,
            other => {
                return Err(shape_err(
                    "TensorProperties.dtype",
                    "a torch dtype",
                    describe(other),
                ))
            }
        };
        if let Some(layout) = layout {
            self.strided(layout, tensor)?;
        }
        torch_dtype(name).map_err(|e| Error::new(ErrorKind::PyTorch(e)))
    }

    /// Refuses a layout other than `torch.strided`.
    fn strided(&self, id: Id, tensor: &str) -> Result<()> {
        let layout = match self.p.get(id) {
            Node::Call {
                func: Global::GetLayout,
                args,
                ..
            } => match self.p.get(args) {
                Node::Tuple([a]) => match self.p.get(*a) {
                    Node::Str(s) => s.to_string(),
                    other => describe(other),
                },
                other => describe(other),
            },
            Node::Global(Global::Layout(l)) => format!("torch.{l}"),
            Node::None => return Ok(()),
            other => describe(other),
        };
        if layout == "torch.strided" {
            return Ok(());
        }
        Err(Error::new(DcpError::Layout { layout }).with_tensor(tensor))
    }
}
