//! From an unpickled checkpoint to named tensors: which storage, which
//! dtype, which view. Non-tensor leaves are counted and skipped; tensor
//! kinds we cannot write are refused with the tensor named.
//!
//! Nothing is dropped silently: a tensor where no name can reach it (in a
//! set, as a dict key, among a constructor's arguments) is an error naming
//! where it was found. The names the walk joins are charged to the
//! pickle's [`Budget`]: a key shared through the memo costs its length
//! every time a path goes through it.

use std::borrow::Cow;

use super::pickle::{Budget, Global, Id, Node, Pickled};
use super::strided::{c_strides, View};
use super::{bad, Storages};
use crate::header::names::NameIndex;
use crate::header::TensorMeta;
use crate::{Dtype, Error, ErrorKind, PickleError, PyTorchError, Result, StorageShape};

/// Bytes of a value's id.
const ID: usize = std::mem::size_of::<Id>();

/// Bytes of a dimension in a shape or stride.
const U64: usize = std::mem::size_of::<u64>();

/// Deeper nesting than this is refused (a checkpoint is a few levels deep).
pub const MAX_DEPTH: usize = 256;

/// Values visited while naming: a shared-reference DAG can name
/// exponentially many paths; past this we refuse.
pub const MAX_VISITS: usize = 4_000_000;

/// How to name what the checkpoint holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Naming {
    /// Take only this key's value (dotted for nested dicts), without it in the names.
    pub root: Option<String>,
    /// The name of a checkpoint that is one bare tensor.
    pub bare: Option<String>,
}

/// What a storage's persistent id declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageDecl {
    /// Bytes per element of the storage's own type (1 for untyped).
    pub elem: u64,
    /// Elements it declares.
    pub numel: u64,
    /// The element type of its storage class (`None` for untyped).
    pub dtype: Option<Dtype>,
}

impl StorageDecl {
    /// Its length in bytes.
    pub fn bytes(&self) -> Option<u64> {
        self.elem.checked_mul(self.numel)
    }
}

/// Where one tensor lies: its file (set by the source that holds several),
/// its storage (an index in the [`Storages`] the walk resolved it
/// against) and its first element. 16 bytes; its name, dtype and shape
/// are its [`TensorMeta`]'s, and strides other than C order's are listed
/// apart ([`Tree::strides`]): few tensors have them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The file's index among a sharded checkpoint's (0 from the walk).
    pub file: u32,
    /// The storage it views: its index in the [`Storages`].
    pub storage: u32,
    /// Its first element's index in the storage.
    pub offset: u64,
}

/// Strides in elements other than C order's, by the index of their tensor,
/// in order.
pub type Strides = Vec<(u32, Box<[u64]>)>;

/// The strides `strides` lists for tensor `k`; `None`: C order's.
pub fn stride_of(strides: &[(u32, Box<[u64]>)], k: usize) -> Option<&[u64]> {
    let i = strides
        .binary_search_by_key(&k, |(i, _)| *i as usize)
        .ok()?;
    Some(&strides[i].1)
}

/// Tensor `t`'s view of its storage, at `p` with `stride` (`None`: C order).
pub fn view(t: &TensorMeta, p: Place, stride: Option<&[u64]>) -> View {
    View {
        offset: p.offset,
        shape: t.shape.clone(),
        stride: stride.map_or_else(|| c_strides(&t.shape), <[u64]>::to_vec),
        width: width(t.dtype),
    }
}

/// Every tensor, where it lies, and how many leaves were skipped. The
/// walk builds what the source keeps (a [`TensorMeta`] and a [`Place`]
/// a tensor) and nothing beside it: a million tensors' records are built
/// once, while the pickle's values are still held.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Tensors in the checkpoint's order.
    pub tensors: Vec<TensorMeta>,
    /// Where each of them lies, in the same order.
    pub places: Vec<Place>,
    /// The strides of those not in C order.
    pub strides: Strides,
    /// Non-tensor leaves skipped (numbers, strings, None...).
    pub skipped: usize,
    /// Where the first [`MAX_SKIPPED_PATHS`] skipped leaves were (dotted paths).
    pub skipped_paths: Vec<String>,
    /// With no root asked for, a top-level dict holding no tensor itself,
    /// only under its keys: those keys and how many tensors each holds
    /// (what `--pt-root` could take). Empty otherwise.
    pub under_keys: Vec<(String, usize)>,
}

/// Past this many top-level keys holding tensors, the checkpoint is not
/// one `--pt-root` is suggested for (a training checkpoint has a few).
const MAX_UNDER_KEYS: usize = 16;

/// A tensor as its rebuild call gives it: dtype, shape, place and strides
/// unless they are C order's.
type Built = (Dtype, Vec<u64>, Place, Option<Box<[u64]>>);

/// What the walk charges a tensor's records (its [`TensorMeta`] and
/// [`Place`]) to: one for each call in the arena, and more when a shared
/// call is named along several paths.
const TENSOR_RECORDS: &str = "tensor records";

/// What the walk charges shapes and strides to: each path to a tensor
/// copies its own, however many paths share the tuples they come from.
const SHAPES: &str = "shapes and strides";

/// Skipped leaves listed by path; past this only the count grows.
pub const MAX_SKIPPED_PATHS: usize = 1000;

/// The safetensors twin of a `torch` dtype, or why there is none.
pub fn torch_dtype(name: &str) -> std::result::Result<Dtype, PyTorchError> {
    Ok(match name {
        "float32" | "float" => Dtype::F32,
        "float64" | "double" => Dtype::F64,
        "float16" | "half" => Dtype::F16,
        "bfloat16" => Dtype::BF16,
        "int64" | "long" => Dtype::I64,
        "int32" | "int" => Dtype::I32,
        "int16" | "short" => Dtype::I16,
        "int8" => Dtype::I8,
        "uint8" => Dtype::U8,
        "uint16" => Dtype::U16,
        "uint32" => Dtype::U32,
        "uint64" => Dtype::U64,
        "bool" => Dtype::BOOL,
        "complex64" | "cfloat" => Dtype::C64,
        "float8_e4m3fn" => Dtype::F8_E4M3,
        "float8_e5m2" => Dtype::F8_E5M2,
        "float8_e4m3fnuz" => Dtype::F8_E4M3FNUZ,
        "float8_e5m2fnuz" => Dtype::F8_E5M2FNUZ,
        "float8_e8m0fnu" => Dtype::F8_E8M0,
        "complex128" | "cdouble" | "complex32" | "chalf" => {
            return Err(PyTorchError::NoSafetensorsDtype(name.into()))
        }
        n if n.starts_with('q') => return Err(PyTorchError::QuantizedDtype(name.into())),
        n => return Err(PyTorchError::NoSafetensorsDtype(n.into())),
    })
}

/// The element type of a typed storage class, `None` for `UntypedStorage`.
fn storage_dtype(class: &str) -> std::result::Result<Option<Dtype>, PyTorchError> {
    let torch = match class {
        "UntypedStorage" => return Ok(None),
        "FloatStorage" => "float32",
        "DoubleStorage" => "float64",
        "HalfStorage" => "float16",
        "BFloat16Storage" => "bfloat16",
        "LongStorage" => "int64",
        "IntStorage" => "int32",
        "ShortStorage" => "int16",
        "CharStorage" => "int8",
        "ByteStorage" => "uint8",
        "BoolStorage" => "bool",
        "ComplexFloatStorage" => "complex64",
        "ComplexDoubleStorage" => "complex128",
        q => return Err(PyTorchError::QuantizedStorage(q.into())),
    };
    torch_dtype(torch).map(Some)
}

/// Bytes per element of a dtype we map (all are whole bytes).
pub fn width(d: Dtype) -> u64 {
    d.bits() / 8
}

/// A storage's first declaration, as [`Walker::declared`] keeps it: its
/// dtype (`None`: untyped) once declared. The element count follows from
/// the file's length, which the first declaration must match: one byte a
/// storage, not a copy of its key and declaration.
type FirstDecl = Option<Option<Dtype>>;

struct Walker<'a> {
    p: &'a Pickled,
    /// The storages the checkpoint's file holds, by key.
    storages: &'a Storages,
    /// Each storage's first declaration, by its index in `storages`.
    declared: Vec<FirstDecl>,
    tree: Tree,
    visits: usize,
    budget: Budget,
    /// A tensor (or a key that is not a string) holds tensors at the top
    /// level: no `--pt-root` to suggest.
    tensor_at_top: bool,
}

impl<'a> Walker<'a> {
    fn new(p: &'a Pickled, storages: &'a Storages) -> Self {
        Walker {
            p,
            storages,
            declared: Vec::new(),
            tree: Tree::default(),
            visits: 0,
            budget: p.budget,
            tensor_at_top: false,
        }
    }
}

/// Finds every tensor in `p`, named as [`Naming`] says, each resolved
/// against `storages` (the file's): a storage the file lacks, or whose
/// length is not what the pickle declares, is refused naming the tensor.
pub fn tensors(p: &Pickled, naming: &Naming, storages: &Storages) -> Result<Tree> {
    let mut w = Walker::new(p, storages);
    // Room for every tensor call the arena holds: the lists are built
    // once at their size (a Vec doubling holds up to 3x while it moves).
    let calls = (0..p.len() as Id)
        .filter(|&id| w.tensor_call(id).is_some())
        .count();
    let record = std::mem::size_of::<TensorMeta>() + std::mem::size_of::<Place>();
    w.budget
        .charge(calls.saturating_mul(record), TENSOR_RECORDS)?;
    w.tree.tensors.reserve_exact(calls);
    w.tree.places.reserve_exact(calls);
    w.declared = vec![None; storages.len()];
    let mut root = p.root;
    let mut prefix = String::new();
    if let Some(key) = &naming.root {
        for part in key.split('.') {
            root = w.child(root, part).ok_or_else(|| {
                bad(PyTorchError::RootMissing {
                    root: key.to_string(),
                    part: part.to_string(),
                })
            })?;
        }
        if let Some(what) = leaf(p.get(root)) {
            return Err(bad(PyTorchError::RootLeaf {
                root: key.to_string(),
                what,
            }));
        }
    } else if let Some(sd) = w.child(root, "state_dict") {
        // A training checkpoint: the model's weights without the prefix,
        // everything else (optimizer state) under its own key. A bare
        // tensor there keeps the key as its name (never an empty one).
        if w.tensor_call(sd).is_some() {
            prefix.push_str("state_dict");
        }
        w.walk(sd, &mut prefix, 1)?;
        prefix.clear();
        if let Node::Dict(items) = p.get(root) {
            for &(k, v) in items {
                if matches!(p.get(k), Node::Str(s) if s == "state_dict") {
                    continue;
                }
                w.entry(k, v, &mut prefix, 1)?;
            }
        }
        return Ok(w.tree);
    }
    if w.tensor_call(root).is_some() {
        // One bare tensor: `--name`, else the key it was under, else "tensor".
        let under = naming.root.as_deref().and_then(|r| r.rsplit('.').next());
        prefix = (naming.bare.as_deref().or(under).unwrap_or("tensor")).to_string();
    }
    w.walk(root, &mut prefix, 0)?;
    if naming.root.is_some() || w.tensor_at_top {
        w.tree.under_keys.clear();
    }
    Ok(w.tree)
}

/// What a plain value is, for a `--pt-root` that names one (`epoch`):
/// `None` for containers and calls, which may hold tensors.
fn leaf(node: Node) -> Option<String> {
    const SHOWN: usize = 40;
    Some(match node {
        Node::None => "None".into(),
        Node::Bool(b) => format!("a bool ({})", if b { "True" } else { "False" }),
        Node::Int(i) => format!("an int ({i})"),
        Node::BigInt => "an int".into(),
        Node::Float(f) => format!("a float ({f})"),
        Node::Str(s) if s.chars().count() > SHOWN => {
            format!("a str of {} characters", s.chars().count())
        }
        Node::Str(s) => format!("a str ({s:?})"),
        Node::Bytes(b) => format!("{} bytes", b.len()),
        _ => return None,
    })
}

/// Every storage any persistent id in `p` declares, reached by a tensor or
/// not: the legacy format needs each one's size to find the next.
pub fn all_storages(p: &Pickled) -> Result<Vec<(Box<str>, StorageDecl)>> {
    declarations(p, true)
}

/// Each storage as the first persistent id in `p` that declares it well
/// does: a table like a file's (one length a key), for checking a pickle's
/// views with no file at hand, where the walk still refuses what the
/// tensors reach (a bad persistent id, a second declaration that differs).
#[cfg(any(test, feature = "internals"))]
pub(crate) fn first_declarations(p: &Pickled) -> Vec<(Box<str>, StorageDecl)> {
    declarations(p, false).unwrap_or_default()
}

/// The storages `p`'s persistent ids declare, each key once; `strict`:
/// a persistent id that is not a storage's, or a key declared twice
/// differently, is refused, else skipped.
fn declarations(p: &Pickled, strict: bool) -> Result<Vec<(Box<str>, StorageDecl)>> {
    let none = Storages::default();
    let w = Walker::new(p, &none);
    let mut list: Vec<(Box<str>, StorageDecl)> = Vec::new();
    let mut keys = NameIndex::with_capacity(0);
    for id in 0..p.len() as Id {
        if !matches!(p.get(id), Node::Persistent(_)) {
            continue;
        }
        let (key, decl) = match w.declaration(Some(&id)) {
            Ok(d) => d,
            Err(e) if strict => return Err(e),
            Err(_) => continue,
        };
        let next = list.len();
        match keys.insert(next, &key, |i| &list[i].0) {
            Some(i) if strict => same_declaration(&key, list[i].1, decl)?,
            Some(_) => {}
            None => list.push((key.into(), decl)),
        }
    }
    Ok(list)
}

/// Refuses a storage declared twice, differently: torch keeps the first
/// declaration, other readers the last, so two different ones are two
/// answers (torch.save itself refuses to write one storage as two types).
fn same_declaration(key: &str, first: StorageDecl, second: StorageDecl) -> Result<()> {
    if first == second {
        return Ok(());
    }
    let shape = |d: StorageDecl| StorageShape {
        numel: d.numel,
        dtype: d.dtype,
    };
    Err(bad(PyTorchError::DeclaredTwice {
        key: key.into(),
        first: shape(first),
        second: shape(second),
    }))
}

impl<'a> Walker<'a> {
    /// The value under string key `key` of dict `id`.
    fn child(&self, id: Id, key: &str) -> Option<Id> {
        let Node::Dict(items) = self.p.get(id) else {
            return None;
        };
        items
            .iter()
            .find(|(k, _)| matches!(self.p.get(*k), Node::Str(s) if s == key))
            .map(|&(_, v)| v)
    }

    /// The tensor-building call `id` is, if it is one.
    fn tensor_call(&self, id: Id) -> Option<(Global, Id, Option<Id>)> {
        match self.p.get(id) {
            Node::Call { func, args, state } => match func {
                Global::RebuildTensor
                | Global::RebuildTensorV2
                | Global::RebuildTensorV3
                | Global::RebuildParameter
                | Global::RebuildParameterWithState
                | Global::RebuildFromType
                | Global::RefusedTensor(_) => Some((func, args, state)),
                _ => None,
            },
            _ => None,
        }
    }

    fn entry(&mut self, k: Id, v: Id, name: &mut String, depth: usize) -> Result<()> {
        self.no_tensor_in(k, "used as a dict key", name)?;
        let p = self.p;
        let number;
        let key = match p.get(k) {
            Node::Str(s) => s,
            Node::Int(i) => {
                number = i.to_string();
                number.as_str()
            }
            // Python's spelling, as `str(key)` gives it.
            Node::Bool(true) => "True",
            Node::Bool(false) => "False",
            Node::None => "None",
            _ => {
                // A tuple or float key names nothing we could write: skip
                // what it holds unless it holds a tensor.
                self.no_tensor_in(v, "under a key that is not a string or a number", name)?;
                self.skip(name);
                return Ok(());
            }
        };
        self.child_name(name, key, |w, name| w.walk(v, name, depth + 1))
    }

    /// Runs `f` with `part` appended to `name` (dotted), charging its bytes.
    fn child_name(
        &mut self,
        name: &mut String,
        part: &str,
        f: impl FnOnce(&mut Self, &mut String) -> Result<()>,
    ) -> Result<()> {
        self.budget
            .charge(part.len() + 1, "names joined from keys")?;
        let len = name.len();
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(part);
        let r = f(self, name);
        name.truncate(len);
        r
    }

    /// Notes top-level key `k` of the root dict as holding `n` tensors
    /// under it ([`Tree::under_keys`]), or that tensors sit at the top.
    fn count_under(&mut self, k: Id, v: Id, n: usize) {
        if n == 0 || self.tensor_at_top {
            return;
        }
        match self.p.get(k) {
            Node::Str(key) if self.tensor_call(v).is_none() => {
                let room = self.tree.under_keys.len() < MAX_UNDER_KEYS;
                if room && self.budget.charge(key.len(), "top-level keys").is_ok() {
                    self.tree.under_keys.push((key.to_string(), n));
                    return;
                }
            }
            _ => {}
        }
        self.tensor_at_top = true;
        self.tree.under_keys.clear();
    }

    /// Counts a skipped non-tensor value and keeps its path for the report.
    fn skip(&mut self, name: &str) {
        self.tree.skipped += 1;
        if self.tree.skipped_paths.len() < MAX_SKIPPED_PATHS
            && self.budget.charge(name.len(), "skipped paths").is_ok()
        {
            self.tree.skipped_paths.push(name.to_string());
        }
    }

    /// Refuses a tensor anywhere inside `id`: a place no name reaches.
    /// What the search holds (the ids seen, those to see) is charged and
    /// given back after.
    fn no_tensor_in(&mut self, id: Id, place: &'static str, name: &str) -> Result<()> {
        let mut held = 0;
        let r = self.search(id, place, name, &mut held);
        self.budget.release(held);
        r
    }

    fn search(&mut self, id: Id, place: &'static str, name: &str, held: &mut usize) -> Result<()> {
        // Each id pushed: a list item (doubling, old and new live at once
        // as it moves) and then a set entry (4 bytes and a control byte in
        // a table at most 8/7 full, doubling likewise). A leaf (a key's
        // string) holds one of each, and costs nothing more.
        const TODO: usize = 3 * ID + 24;
        let mut seen = std::collections::HashSet::new();
        let mut todo = vec![id];
        while let Some(id) = todo.pop() {
            if !seen.insert(id) {
                continue;
            }
            self.visits += 1;
            if self.visits > MAX_VISITS {
                return Err(Error::new(ErrorKind::Pickle(PickleError::VisitsLimit(
                    MAX_VISITS as u64,
                ))));
            }
            if self.tensor_call(id).is_some() {
                let at = if name.is_empty() {
                    "the top level"
                } else {
                    name
                };
                return Err(bad(PyTorchError::Unnamed {
                    place,
                    at: at.to_string(),
                }));
            }
            let more = match self.p.get(id) {
                Node::Tuple(v) | Node::List(v) | Node::Set(v) => v.len(),
                Node::Dict(items) => 2 * items.len(),
                Node::Call { .. } | Node::Object { .. } => 2,
                _ => 0,
            };
            let cost = more.saturating_mul(TODO);
            self.budget.charge(cost, "a search for tensors")?;
            *held += cost;
            match self.p.get(id) {
                Node::Tuple(v) | Node::List(v) | Node::Set(v) => todo.extend(v),
                Node::Dict(items) => todo.extend(items.iter().flat_map(|&(k, v)| [k, v])),
                Node::Call { args, state, .. } | Node::Object { args, state, .. } => {
                    todo.extend(std::iter::once(args).chain(state))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn walk(&mut self, id: Id, name: &mut String, depth: usize) -> Result<()> {
        self.visits += 1;
        if self.visits > MAX_VISITS {
            return Err(Error::new(ErrorKind::Pickle(PickleError::VisitsLimit(
                MAX_VISITS as u64,
            ))));
        }
        if depth > MAX_DEPTH {
            return Err(Error::new(ErrorKind::Pickle(PickleError::DepthLimit(
                MAX_DEPTH as u64,
            ))));
        }
        if let Some((func, args, _)) = self.tensor_call(id) {
            let (dtype, shape, place, stride) = self
                .tensor(func, args, 0)
                .map_err(|e| e.with_tensor(&*name))?;
            if name.is_empty() {
                return Err(bad(PyTorchError::EmptyName));
            }
            self.budget.charge(name.len(), "tensor names")?;
            // Past the records reserved for the arena's calls (a call
            // shared by several paths), the lists grow, charged.
            self.budget
                .reserve(&mut self.tree.tensors, 1, TENSOR_RECORDS)?;
            self.budget
                .reserve(&mut self.tree.places, 1, TENSOR_RECORDS)?;
            self.tree
                .tensors
                .push(TensorMeta::new(name.clone(), dtype, shape));
            if let Some(stride) = stride {
                let k = self.tree.places.len() as u32;
                self.budget.reserve(&mut self.tree.strides, 1, SHAPES)?;
                self.tree.strides.push((k, stride));
            }
            self.tree.places.push(place);
            return Ok(());
        }
        match self.p.get(id) {
            Node::Dict(items) => {
                for &(k, v) in items {
                    let before = self.tree.tensors.len();
                    self.entry(k, v, name, depth)?;
                    if depth == 0 {
                        self.count_under(k, v, self.tree.tensors.len() - before);
                    }
                }
            }
            Node::List(items) | Node::Tuple(items) => {
                for (i, &v) in items.iter().enumerate() {
                    self.child_name(name, &i.to_string(), |w, name| w.walk(v, name, depth + 1))?;
                }
            }
            Node::Set(_) => {
                self.no_tensor_in(id, "inside a set", name)?;
                self.skip(name);
            }
            Node::Call { .. } | Node::Object { .. } => {
                self.no_tensor_in(id, "among an object's constructor arguments", name)?;
                self.skip(name);
            }
            _ => self.skip(name),
        }
        Ok(())
    }

    fn args(&self, args: Id) -> Result<&[Id]> {
        match self.p.get(args) {
            Node::Tuple(v) => Ok(v),
            _ => Err(bad(PyTorchError::ArgsNotTuple)),
        }
    }

    fn int(&self, id: Option<&Id>, what: &'static str) -> Result<u64> {
        match id.map(|&i| self.p.get(i)) {
            Some(Node::Int(v)) => {
                u64::try_from(v).map_err(|_| bad(PyTorchError::Negative { what, value: v }))
            }
            _ => Err(bad(PyTorchError::NotInteger(what))),
        }
    }

    /// A tuple or list of ints, in a list of its exact length (collecting
    /// through a `Result` would give a shape of one dimension room for
    /// four, 24 bytes more a tensor), charged: a tuple shared by many
    /// tensors, or a tensor named along many paths, is copied each time.
    fn ints(&mut self, id: Option<&Id>, what: &'static str) -> Result<Vec<u64>> {
        let Some(Node::Tuple(v) | Node::List(v)) = id.map(|&i| self.p.get(i)) else {
            return Err(bad(PyTorchError::NotTuple(what)));
        };
        self.budget.charge(v.len().saturating_mul(U64), SHAPES)?;
        let mut out = Vec::with_capacity(v.len());
        for i in v {
            out.push(self.int(Some(i), what)?);
        }
        Ok(out)
    }

    /// A tensor from its rebuild call (parameters unwrap to their data).
    fn tensor(&mut self, func: Global, args: Id, depth: usize) -> Result<Built> {
        if depth > 4 {
            return Err(bad(PyTorchError::WrappedTooDeeply));
        }
        // A copy for the time the call is read, given back after.
        let copy = self.args(args)?.len().saturating_mul(ID);
        self.budget.charge(copy, "call arguments")?;
        let a = self.args(args)?.to_vec();
        let r = self.tensor_of(func, &a, depth);
        self.budget.release(copy);
        r
    }

    fn tensor_of(&mut self, func: Global, a: &[Id], depth: usize) -> Result<Built> {
        match func {
            Global::RefusedTensor(what) => Err(bad(PyTorchError::Unsupported(what))),
            Global::RebuildParameter | Global::RebuildParameterWithState => {
                let data = *a
                    .first()
                    .ok_or_else(|| bad(PyTorchError::ParameterWithoutData))?;
                let (f, args, _) = self
                    .tensor_call(data)
                    .ok_or_else(|| bad(PyTorchError::ParameterDataNotTensor))?;
                self.tensor(f, args, depth + 1)
            }
            Global::RebuildFromType => {
                // (func, type, args, state): func(*args), typed as a Tensor or Parameter.
                let (f, ty, inner) = match (a.first(), a.get(1), a.get(2)) {
                    (Some(&f), Some(&t), Some(&i)) => (f, t, i),
                    _ => return Err(bad(PyTorchError::FromTypeArgs)),
                };
                if self.p.get(ty) != Node::Global(Global::TensorType) {
                    return Err(bad(PyTorchError::Subclass));
                }
                match self.p.get(f) {
                    Node::Global(g) => self.tensor(g, inner, depth + 1),
                    _ => Err(bad(PyTorchError::FromTypeNotFunction)),
                }
            }
            Global::RebuildTensor | Global::RebuildTensorV2 | Global::RebuildTensorV3 => {
                self.rebuild(func, a)
            }
            _ => Err(bad(PyTorchError::NotATensor)),
        }
    }

    fn rebuild(&mut self, func: Global, a: &[Id]) -> Result<Built> {
        let (index, decl) = self.storage(a.first())?;
        let storage_dtype = decl.dtype;
        let key = self.storages.get(index).0;
        let offset = self.int(a.get(1), "storage_offset")?;
        let shape = self.ints(a.get(2), "size")?;
        let stride = self.ints(a.get(3), "stride")?;
        let (dtype, meta) = match func {
            Global::RebuildTensorV3 => {
                let d = match a.get(6).map(|&i| self.p.get(i)) {
                    Some(Node::Global(Global::Dtype(n))) => torch_dtype(n).map_err(bad)?,
                    _ => return Err(bad(PyTorchError::V3WithoutDtype)),
                };
                (d, a.get(7))
            }
            _ => {
                let d = storage_dtype.ok_or_else(|| bad(PyTorchError::UntypedWithoutDtype))?;
                (d, a.get(6))
            }
        };
        if let Some(Node::Dict(items)) = meta.map(|&m| self.p.get(m)) {
            for &(k, v) in items {
                if let (Node::Str(bit), Node::Bool(true)) = (self.p.get(k), self.p.get(v)) {
                    return Err(bad(PyTorchError::BitSet(bit.to_string())));
                }
            }
        }
        if shape.len() != stride.len() {
            return Err(bad(PyTorchError::StrideDims {
                size: shape.len(),
                stride: stride.len(),
            }));
        }
        let view = View {
            offset,
            shape,
            stride,
            width: width(dtype),
        };
        // Bounds: every element the view reaches lies inside the storage.
        let storage_len = decl
            .bytes()
            .ok_or_else(|| bad(PyTorchError::StorageOverflow(key.to_string())))?;
        let needed = view
            .needed_bytes()
            .ok_or_else(|| bad(PyTorchError::ViewOverflow))?;
        if needed > storage_len {
            return Err(bad(PyTorchError::ViewPastStorage {
                needed,
                key: key.to_string(),
                len: storage_len,
            }));
        }
        // C order's strides, for a moment; the view's are kept only if they
        // differ (a shape's worth given back if not).
        let dims = view.shape.len().saturating_mul(U64);
        self.budget.charge(dims, SHAPES)?;
        let c_order = view.stride == c_strides(&view.shape);
        self.budget.release(if c_order { 2 * dims } else { dims });
        let stride = (!c_order).then(|| view.stride.into());
        let place = Place {
            file: 0,
            storage: index,
            offset: view.offset,
        };
        Ok((dtype, view.shape, place, stride))
    }

    /// `('storage', class, key, location, numel[, view_metadata])`: the
    /// storage's index in the file's [`Storages`] and its declaration,
    /// which must give the file's length and agree with any declaration
    /// of the same key before it.
    fn storage(&mut self, id: Option<&Id>) -> Result<(u32, StorageDecl)> {
        let (key, decl) = self.declaration(id)?;
        let (index, loc) = self
            .storages
            .find(&key)
            .ok_or_else(|| bad(PyTorchError::NotInFile(key.to_string())))?;
        match self.declared[index as usize] {
            Some(dtype) => {
                let elem = dtype.map_or(1, width);
                let first = StorageDecl {
                    elem,
                    numel: loc.len / elem,
                    dtype,
                };
                same_declaration(&key, first, decl)?;
            }
            None => {
                let bytes = decl
                    .bytes()
                    .ok_or_else(|| bad(PyTorchError::StorageOverflow(key.to_string())))?;
                if bytes != loc.len {
                    return Err(bad(PyTorchError::StorageSize {
                        key: key.to_string(),
                        bytes: loc.len,
                        numel: decl.numel,
                        elem: decl.elem,
                    }));
                }
                self.declared[index as usize] = Some(decl.dtype);
            }
        }
        Ok((index, decl))
    }

    /// The key and declaration of persistent id `id`.
    fn declaration(&self, id: Option<&Id>) -> Result<(Cow<'a, str>, StorageDecl)> {
        let p: &'a Pickled = self.p;
        let pid = match id.map(|&i| p.get(i)) {
            Some(Node::Persistent(pid)) => pid,
            _ => return Err(bad(PyTorchError::StorageNotPersistent)),
        };
        let Node::Tuple(f) = p.get(pid) else {
            return Err(bad(PyTorchError::PersistentIdNotTuple));
        };
        if !matches!(f.first().map(|&i| p.get(i)), Some(Node::Str(s)) if s == "storage") {
            return Err(bad(PyTorchError::PersistentIdNotStorage));
        }
        let dtype = match f.get(1).map(|&i| p.get(i)) {
            Some(Node::Global(Global::Storage(c))) => storage_dtype(c).map_err(bad)?,
            _ => return Err(bad(PyTorchError::StorageTypeNotClass)),
        };
        let key = match f.get(2).map(|&i| p.get(i)) {
            Some(Node::Str(s)) => Cow::Borrowed(s),
            Some(Node::Int(i)) => Cow::Owned(i.to_string()),
            _ => return Err(bad(PyTorchError::StorageKeyNotString)),
        };
        match f.get(3).map(|&i| p.get(i)) {
            Some(Node::Str(loc)) if loc == "cpu" || loc.starts_with("cuda") || loc == "mps" => {}
            Some(Node::Str(loc)) => return Err(bad(PyTorchError::Device(loc.to_string()))),
            _ => return Err(bad(PyTorchError::LocationNotString)),
        }
        let numel = self.int(f.get(4), "storage size")?;
        if let Some(&vm) = f.get(5) {
            if p.get(vm) != Node::None {
                return Err(bad(PyTorchError::LegacyView));
            }
        }
        let decl = StorageDecl {
            elem: dtype.map_or(1, width),
            numel,
            dtype,
        };
        Ok((key, decl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_map() {
        assert_eq!(torch_dtype("float8_e8m0fnu"), Ok(Dtype::F8_E8M0));
        assert_eq!(torch_dtype("uint64"), Ok(Dtype::U64));
        assert!(torch_dtype("complex128").is_err());
        assert!(torch_dtype("qint8").is_err());
        assert_eq!(storage_dtype("UntypedStorage"), Ok(None));
        assert_eq!(storage_dtype("BFloat16Storage"), Ok(Some(Dtype::BF16)));
        assert!(storage_dtype("QInt8Storage").is_err());
    }
}
