//! A restricted unpickler: reads the pickle opcodes that PyTorch checkpoints
//! use and builds values in our own model. It never calls anything.
//!
//! Python's `pickle` imports whatever a `GLOBAL` names and calls whatever a
//! `REDUCE` hands it, which is how a checkpoint runs `os.system`. Here a
//! global is looked up in an allow-list ([`Global`]) and anything else is
//! refused by name; `REDUCE` on an allowed global records the call as a
//! [`Node::Call`] (a few, like `OrderedDict()`, become the plain value they
//! would build). Nothing is imported, nothing is run.
//!
//! Sans-I/O: it reads a byte slice. Values live in an arena and refer to
//! each other by index, so memo references (`BINGET`) share instead of
//! copy (a memo bomb stays linear) and dropping deep nests needs no
//! recursion. Limits bound the arena, the memo, the stack and the bytes.
//!
//! Sharing keeps the arena linear, but a shared value can still be
//! *expanded*: copied by a constructor (`set(x)`, `bytearray(x)`,
//! `torch.Size(x)`, `_codecs.encode(x)`) or named once per path by the
//! walk that names tensors. Every byte built that way is charged to one
//! [`Budget`] per pickle, [`BUDGET_FACTOR`] times its size plus
//! [`BUDGET_FLOOR`]; a value used again costs what building it again costs,
//! so a DAG that expands to gigabytes is refused after a few MiB.

use std::collections::HashMap;

use crate::{Error, ErrorKind, Result};

/// An index into [`Pickled::nodes`].
pub type Id = u32;

/// Bounds on what one pickle may build.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Values built (every opcode builds at most one).
    pub nodes: usize,
    /// Entries in the memo.
    pub memo: usize,
    /// Open MARKs at once.
    pub marks: usize,
    /// Bytes of strings and bytes, summed.
    pub bytes: usize,
    /// Bytes of values built in all ([`Budget`]).
    pub budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            nodes: 8_000_000,
            memo: 4_000_000,
            marks: 10_000,
            bytes: 64 << 20,
            budget: BUDGET_FLOOR,
        }
    }
}

impl Limits {
    /// The default limits with the [`Budget`] of a pickle of `len` bytes;
    /// a pickle past 8 MB may also build a value per byte and memoize one
    /// per two (an opcode builds at most one, a `BINPUT` takes two bytes:
    /// a million tensors take 9 million values and 8 million entries).
    pub fn for_input(len: usize) -> Limits {
        let d = Limits::default();
        Limits {
            nodes: d.nodes.max(len),
            memo: d.memo.max(len / 2),
            budget: Budget::for_input(len).limit(),
            ..d
        }
    }
}

/// A pickle may build this many times its own size in values...
pub const BUDGET_FACTOR: usize = 32;
/// ...plus this many bytes, so that a small checkpoint is never short.
pub const BUDGET_FLOOR: usize = 16 << 20;

/// Bytes a pickle may materialise: the arena's values, the items of its
/// containers, its strings, the copies its allowed constructors make and
/// the names the walk joins from nested keys. One budget per pickle, spent
/// by the unpickler and then by the naming walk ([`Pickled::budget`]).
///
/// ```
/// use safetensors_stream::internals::pickle::Budget;
///
/// let mut b = Budget::for_input(1000);
/// assert_eq!(b.limit(), 32 * 1000 + (16 << 20));
/// assert!(b.charge(1 << 20, "a name").is_ok());
/// assert!(b.charge(usize::MAX, "a name").is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    limit: usize,
    used: usize,
}

impl Budget {
    /// A budget of `limit` bytes, none spent.
    pub fn new(limit: usize) -> Budget {
        Budget { limit, used: 0 }
    }

    /// The budget of a pickle of `len` bytes:
    /// `BUDGET_FACTOR * len + BUDGET_FLOOR`.
    pub fn for_input(len: usize) -> Budget {
        Budget::new(
            len.saturating_mul(BUDGET_FACTOR)
                .saturating_add(BUDGET_FLOOR),
        )
    }

    /// Bytes allowed in all.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes spent so far.
    #[cfg(any(test, feature = "internals"))]
    pub fn used(&self) -> usize {
        self.used
    }

    /// Spends `n` bytes on `what`, or refuses with [`ErrorKind::PickleBudget`].
    pub fn charge(&mut self, n: usize, what: &'static str) -> Result<()> {
        match self.used.checked_add(n).filter(|&u| u <= self.limit) {
            Some(u) => {
                self.used = u;
                Ok(())
            }
            None => Err(Error::new(ErrorKind::PickleBudget {
                limit: self.limit as u64,
                what,
            })),
        }
    }
}

/// The globals a checkpoint may name. Everything else is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Global {
    /// `collections.OrderedDict`.
    OrderedDict,
    /// `torch._utils._rebuild_tensor` (storage, offset, size, stride).
    RebuildTensor,
    /// `torch._utils._rebuild_tensor_v2`.
    RebuildTensorV2,
    /// `torch._utils._rebuild_tensor_v3` (with a dtype).
    RebuildTensorV3,
    /// `torch._utils._rebuild_parameter`.
    RebuildParameter,
    /// `torch._utils._rebuild_parameter_with_state`.
    RebuildParameterWithState,
    /// `torch._tensor._rebuild_from_type_v2` (a tensor with Python state).
    RebuildFromType,
    /// `torch.Tensor` or `torch.nn.parameter.Parameter`, as a type argument.
    TensorType,
    /// A tensor kind we recognise and refuse (quantized, sparse, nested, meta...).
    RefusedTensor(&'static str),
    /// A storage class: `torch.FloatStorage`, ..., `torch.UntypedStorage`.
    Storage(&'static str),
    /// A `torch` dtype such as `torch.float32`.
    Dtype(&'static str),
    /// `torch.Size`.
    Size,
    /// `torch.device`.
    Device,
    /// `_codecs.encode` (how protocol 2 pickles bytes).
    CodecsEncode,
    /// `builtins.set` / `frozenset`.
    Set,
    /// `builtins.complex`.
    Complex,
    /// `builtins.bytearray`.
    ByteArray,
    /// `torch.serialization._get_layout`: recorded, never called.
    GetLayout,
    /// A layout or quantization scheme constant (`torch.strided`, `torch.sparse_coo`,
    /// `torch.per_tensor_affine`): only ever an argument to a refused tensor.
    Layout(&'static str),
}

const STORAGES: &[&str] = &[
    "FloatStorage",
    "DoubleStorage",
    "HalfStorage",
    "BFloat16Storage",
    "LongStorage",
    "IntStorage",
    "ShortStorage",
    "CharStorage",
    "ByteStorage",
    "BoolStorage",
    "ComplexFloatStorage",
    "ComplexDoubleStorage",
    "QInt8Storage",
    "QUInt8Storage",
    "QInt32Storage",
    "QUInt4x2Storage",
    "QUInt2x4Storage",
    "UntypedStorage",
];

const DTYPES: &[&str] = &[
    "float32",
    "float",
    "float64",
    "double",
    "float16",
    "half",
    "bfloat16",
    "int64",
    "long",
    "int32",
    "int",
    "int16",
    "short",
    "int8",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "cfloat",
    "complex128",
    "cdouble",
    "complex32",
    "chalf",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "qint8",
    "quint8",
    "qint32",
    "quint4x2",
    "quint2x4",
    "bits8",
    "bits16",
    "bits1x8",
    "bits2x4",
    "bits4x2",
];

const LAYOUTS: &[&str] = &[
    "strided",
    "sparse_coo",
    "sparse_csr",
    "sparse_csc",
    "sparse_bsr",
    "sparse_bsc",
    "_mkldnn",
    "jagged",
    "per_tensor_affine",
    "per_channel_affine",
    "per_tensor_symmetric",
    "per_channel_symmetric",
    "per_channel_affine_float_qparams",
];

const REFUSED_TENSORS: &[(&str, &str)] = &[
    ("_rebuild_qtensor", "a quantized tensor"),
    ("_rebuild_sparse_tensor", "a sparse tensor"),
    ("_rebuild_sparse_csr", "a sparse tensor"),
    ("_rebuild_nested_tensor", "a nested tensor"),
    (
        "_rebuild_meta_tensor_no_storage",
        "a meta tensor (it has no data)",
    ),
    (
        "_rebuild_wrapper_subclass",
        "a tensor subclass without storage",
    ),
    (
        "_rebuild_device_tensor_from_numpy",
        "a device tensor saved through numpy",
    ),
    ("_rebuild_xla_tensor", "an XLA tensor"),
    ("_rebuild_mtia_tensor", "an MTIA tensor"),
    ("_rebuild_mkldnn_tensor", "an MKL-DNN tensor"),
];

impl Global {
    /// Looks `module.name` up in the allow-list.
    pub fn lookup(module: &str, name: &str) -> Option<Global> {
        let find = |list: &'static [&'static str]| list.iter().find(|s| **s == name).copied();
        Some(match (module, name) {
            ("collections", "OrderedDict") => Global::OrderedDict,
            ("torch._utils", "_rebuild_tensor") => Global::RebuildTensor,
            ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
            ("torch._utils", "_rebuild_tensor_v3") => Global::RebuildTensorV3,
            ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
            ("torch._utils", "_rebuild_parameter_with_state") => Global::RebuildParameterWithState,
            ("torch._tensor", "_rebuild_from_type_v2") => Global::RebuildFromType,
            ("torch", "Tensor") | ("torch.nn.parameter", "Parameter") => Global::TensorType,
            ("torch._utils", _) => {
                let what = REFUSED_TENSORS.iter().find(|(n, _)| *n == name)?.1;
                Global::RefusedTensor(what)
            }
            ("torch.serialization", "_get_layout") => Global::GetLayout,
            ("torch", "Size") => Global::Size,
            ("torch", "device") => Global::Device,
            ("torch" | "torch.storage", _) if name.ends_with("Storage") => {
                Global::Storage(find(STORAGES)?)
            }
            ("torch", _) if find(LAYOUTS).is_some() => Global::Layout(find(LAYOUTS)?),
            ("torch", _) => Global::Dtype(find(DTYPES)?),
            ("_codecs", "encode") => Global::CodecsEncode,
            ("builtins" | "__builtin__", "set" | "frozenset") => Global::Set,
            ("builtins" | "__builtin__", "complex") => Global::Complex,
            ("builtins" | "__builtin__", "bytearray") => Global::ByteArray,
            _ => return None,
        })
    }
}

/// A value the pickle built.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits 64 bits.
    Int(i64),
    /// An integer that does not (kept only as a leaf to skip).
    BigInt,
    /// A float.
    Float(f64),
    /// A `str`.
    Str(String),
    /// `bytes` or `bytearray`.
    Bytes(Vec<u8>),
    /// A tuple.
    Tuple(Vec<Id>),
    /// A list.
    List(Vec<Id>),
    /// A dict or `OrderedDict`, in insertion order.
    Dict(Vec<(Id, Id)>),
    /// A set or frozenset.
    Set(Vec<Id>),
    /// An allowed global itself (a dtype, a storage class, a function).
    Global(Global),
    /// `func(*args)` recorded, not performed; `state` is what `BUILD` gave it.
    Call {
        /// The allowed global.
        func: Global,
        /// The argument tuple.
        args: Id,
        /// `BUILD` state, if any.
        state: Option<Id>,
    },
    /// A persistent id (`BINPERSID`): how checkpoints point at storages.
    Persistent(Id),
}

/// A parsed pickle: the arena and the value `STOP` returned.
#[derive(Debug, Clone)]
pub struct Pickled {
    /// Every value built.
    pub nodes: Vec<Node>,
    /// The result.
    pub root: Id,
    /// What is left of the pickle's budget, for the walk that names its tensors.
    pub budget: Budget,
}

impl Pickled {
    /// The node `id` refers to.
    pub fn get(&self, id: Id) -> &Node {
        &self.nodes[id as usize]
    }
}

fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Pickle(msg.into()))
}

/// A decimal integer (`-12`, `7L`); `None` if it overflows 64 bits (a big
/// int, kept only as a leaf).
fn parse_decimal(line: &[u8]) -> Result<Option<i64>> {
    let t = std::str::from_utf8(line).map_err(|_| err("a number is not ASCII"))?;
    let t = t.strip_suffix('L').unwrap_or(t);
    let digits = t.strip_prefix('-').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(format!("{t:?} is not a decimal number")));
    }
    Ok(t.parse().ok())
}

/// Bytes one container item costs.
const ID: usize = std::mem::size_of::<Id>();

/// A stack entry: a value or a MARK.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Mark,
    Val(Id),
}

/// The memo. Python's pickler numbers its entries 0, 1, 2...: those keys
/// index a list (4 bytes an entry, where a hash map took 16 and more for a
/// million-tensor checkpoint's 8 million); a key far past the list's end
/// goes to a map, so a crafted key cannot grow the list.
#[derive(Default)]
struct Memo {
    dense: Vec<Id>,
    sparse: HashMap<u32, Id>,
    len: usize,
}

/// A key this far past the list's end still extends it.
const MEMO_GAP: usize = 64;

impl Memo {
    const EMPTY: Id = Id::MAX;

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, key: u32) -> Option<Id> {
        match self.dense.get(key as usize) {
            Some(&id) if id != Self::EMPTY => Some(id),
            _ => self.sparse.get(&key).copied(),
        }
    }

    fn insert(&mut self, key: u32, id: Id) {
        let k = key as usize;
        if k >= self.dense.len() && k - self.dense.len() < MEMO_GAP {
            self.dense.resize(k + 1, Self::EMPTY);
        }
        let new = match self.dense.get_mut(k) {
            // A key the map took before the list reached it moves over.
            Some(slot) => {
                std::mem::replace(slot, id) == Self::EMPTY && self.sparse.remove(&key).is_none()
            }
            None => self.sparse.insert(key, id).is_none(),
        };
        if new {
            self.len += 1;
        }
    }
}

/// Shared values: the ints 0-255 (`BININT1`), then `False` and `True`.
const CONSTANTS: usize = 258;
const FALSE: usize = 256;
const TRUE: usize = 257;

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    limits: Limits,
    nodes: Vec<Node>,
    stack: Vec<Slot>,
    marks: usize,
    memo: Memo,
    /// [`Machine::push_constant`]'s values, once built.
    constants: [Id; CONSTANTS],
    bytes: usize,
    budget: Budget,
}

/// Unpickles one pickle from the start of `data`. Returns it and the
/// number of bytes it took (the `STOP` opcode included).
///
/// ```
/// use safetensors_stream::internals::pickle::{unpickle, Limits, Node};
///
/// // pickle.dumps({"a": 1}, protocol=2)
/// let p = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s.";
/// let (v, used) = unpickle(p, Limits::default()).unwrap();
/// assert_eq!(used, p.len());
/// assert!(matches!(v.get(v.root), Node::Dict(items) if items.len() == 1));
///
/// // pickle.dumps(os.system) names posix.system: refused, never imported.
/// let evil = b"\x80\x02cposix\nsystem\nq\x00.";
/// assert!(unpickle(evil, Limits::default()).is_err());
/// ```
pub fn unpickle(data: &[u8], limits: Limits) -> Result<(Pickled, usize)> {
    let mut m = Machine {
        data,
        pos: 0,
        limits,
        nodes: Vec::new(),
        stack: Vec::new(),
        marks: 0,
        memo: Memo::default(),
        constants: [Memo::EMPTY; CONSTANTS],
        bytes: 0,
        budget: Budget::new(limits.budget),
    };
    loop {
        let at = m.pos;
        let op = m.byte().map_err(|e| e.at_offset(at as u64))?;
        match m.step(op) {
            Ok(Some(root)) => {
                let nodes = std::mem::take(&mut m.nodes);
                let budget = m.budget;
                return Ok((
                    Pickled {
                        nodes,
                        root,
                        budget,
                    },
                    m.pos,
                ));
            }
            Ok(None) => {}
            Err(e) => return Err(e.at_offset(at as u64)),
        }
    }
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| err("pickle ends inside an opcode"))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    fn line(&mut self) -> Result<String> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .take(256)
            .position(|&b| b == b'\n')
            .ok_or_else(|| err("GLOBAL name is not a short line"))?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(s)
    }

    /// A text opcode's argument (protocols 0 and 1): the bytes up to the
    /// next newline, which is consumed; charged like any string.
    fn text_line(&mut self) -> Result<&'a [u8]> {
        let data: &'a [u8] = self.data;
        let start = self.pos;
        let n = data[start..]
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| err("pickle ends inside an opcode"))?;
        self.sized(n as u64)?;
        self.pos += 1;
        Ok(&data[start..start + n])
    }

    /// A decimal number on a text line (`PUT`, `GET`, `INT`, `LONG`).
    fn decimal(&mut self) -> Result<Option<i64>> {
        let line = self.text_line()?;
        parse_decimal(line)
    }

    fn memo_key(&mut self) -> Result<u32> {
        self.decimal()?
            .and_then(|k| u32::try_from(k).ok())
            .ok_or_else(|| err("memo key out of range"))
    }

    /// `UNICODE` (protocol 0): raw-unicode-escape text, `\uXXXX` and
    /// `\UXXXXXXXX` escapes, every other byte a latin-1 character.
    fn unicode_line(&mut self) -> Result<String> {
        let line = self.text_line()?;
        let mut out = String::with_capacity(line.len());
        let mut i = 0;
        while i < line.len() {
            let digits = match (line[i], line.get(i + 1)) {
                (b'\\', Some(b'u')) => 4,
                (b'\\', Some(b'U')) => 8,
                (b, _) => {
                    out.push(b as char);
                    i += 1;
                    continue;
                }
            };
            let hex = line
                .get(i + 2..i + 2 + digits)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
                .ok_or_else(|| err("a bad \\u escape in a UNICODE string"))?;
            out.push(hex);
            i += 2 + digits;
        }
        Ok(out)
    }

    /// `PERSID` (protocol 0): the persistent id is the `str()` of torch's
    /// storage tuple, `('storage', <class 'torch.FloatStorage'>, '0', 'cpu', 6)`.
    /// Only that exact shape is read, into the tuple protocol 1+ would hold.
    fn text_persistent_id(&mut self) -> Result<Id> {
        let line = self.text_line()?;
        let text = std::str::from_utf8(line).map_err(|_| err("PERSID is not text"))?;
        let refuse = || err("a protocol-0 persistent id that is not a torch storage");
        let inner = text
            .strip_prefix("('storage', <class 'torch.")
            .and_then(|t| t.strip_suffix(')'))
            .ok_or_else(refuse)?;
        let (class, rest) = inner.split_once("'>, '").ok_or_else(refuse)?;
        let (key, rest) = rest.split_once("', '").ok_or_else(refuse)?;
        let (location, numel) = rest.split_once("', ").ok_or_else(refuse)?;
        let numel: i64 = numel.parse().map_err(|_| refuse())?;
        let storage = match Global::lookup("torch", class) {
            Some(g @ Global::Storage(_)) => g,
            _ => return Err(refuse()),
        };
        let (key, location) = (key.to_string(), location.to_string());
        let items = vec![
            self.alloc(Node::Str("storage".into()))?,
            self.alloc(Node::Global(storage))?,
            self.alloc(Node::Str(key))?,
            self.alloc(Node::Str(location))?,
            self.alloc(Node::Int(numel))?,
        ];
        self.alloc(Node::Tuple(items))
    }

    /// A length from the pickle, checked against the bytes that remain.
    fn sized(&mut self, n: u64) -> Result<&[u8]> {
        let n = usize::try_from(n).map_err(|_| err("length does not fit memory"))?;
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.limits.bytes {
            return Err(err(format!(
                "strings and bytes exceed the limit of {} bytes",
                self.limits.bytes
            )));
        }
        self.budget.charge(n, "strings and bytes")?;
        self.take(n)
    }

    fn push_node(&mut self, node: Node) -> Result<()> {
        let id = self.alloc(node)?;
        self.stack.push(Slot::Val(id));
        Ok(())
    }

    /// Pushes the small int or bool in `slot`, built the first time and
    /// shared after: they never change, and a million tensors' offsets,
    /// sizes and strides are mostly 0s and 1s (4 values a tensor).
    fn push_constant(&mut self, slot: usize, node: Node) -> Result<()> {
        let id = match self.constants[slot] {
            Memo::EMPTY => {
                let id = self.alloc(node)?;
                self.constants[slot] = id;
                id
            }
            id => id,
        };
        self.stack.push(Slot::Val(id));
        Ok(())
    }

    fn alloc(&mut self, node: Node) -> Result<Id> {
        if self.nodes.len() >= self.limits.nodes {
            return Err(err(format!(
                "more than {} values: refused",
                self.limits.nodes
            )));
        }
        self.budget.charge(std::mem::size_of::<Node>(), "values")?;
        self.nodes.push(node);
        Ok((self.nodes.len() - 1) as Id)
    }

    fn pop(&mut self) -> Result<Id> {
        match self.stack.pop() {
            Some(Slot::Val(id)) => Ok(id),
            Some(Slot::Mark) => Err(err("a value was expected but the stack holds a MARK")),
            None => Err(err("stack underflow")),
        }
    }

    fn top(&self) -> Result<Id> {
        match self.stack.last() {
            Some(Slot::Val(id)) => Ok(*id),
            _ => Err(err("stack underflow")),
        }
    }

    /// Pops everything down to the last MARK, and the MARK.
    fn pop_mark(&mut self) -> Result<Vec<Id>> {
        let at = self
            .stack
            .iter()
            .rposition(|s| *s == Slot::Mark)
            .ok_or_else(|| err("no MARK on the stack"))?;
        let n = self.stack.len() - at - 1;
        self.budget
            .charge(n.saturating_mul(ID), "container items")?;
        let items = self.stack[at + 1..]
            .iter()
            .map(|s| match s {
                Slot::Val(id) => *id,
                Slot::Mark => unreachable!("after the last MARK"),
            })
            .collect();
        self.stack.truncate(at);
        self.marks -= 1;
        Ok(items)
    }

    fn memo_put(&mut self, key: u32) -> Result<()> {
        let id = self.top()?;
        let known = self.memo.get(key).is_some();
        if !known && self.memo.len() >= self.limits.memo {
            return Err(err(format!(
                "more than {} memo entries: refused",
                self.limits.memo
            )));
        }
        if !known {
            // A hash map entry and its share of the table, at most.
            self.budget.charge(32, "memo entries")?;
        }
        self.memo.insert(key, id);
        Ok(())
    }

    fn memo_get(&mut self, key: u32) -> Result<()> {
        let id = self
            .memo
            .get(key)
            .ok_or_else(|| err(format!("memo key {key} was never stored")))?;
        self.stack.push(Slot::Val(id));
        Ok(())
    }

    fn kind_of(&self, id: Id) -> &'static str {
        match &self.nodes[id as usize] {
            Node::None => "None",
            Node::Bool(_) => "a bool",
            Node::Int(_) | Node::BigInt => "an int",
            Node::Float(_) => "a float",
            Node::Str(_) => "a str",
            Node::Bytes(_) => "bytes",
            Node::Tuple(_) => "a tuple",
            Node::List(_) => "a list",
            Node::Dict(_) => "a dict",
            Node::Set(_) => "a set",
            Node::Global(_) => "a global",
            Node::Call { .. } => "an object",
            Node::Persistent(_) => "a persistent id",
        }
    }

    fn set_items(&mut self, target: Id, pairs: Vec<Id>) -> Result<()> {
        if pairs.len() % 2 != 0 {
            return Err(err("SETITEMS with an odd number of values"));
        }
        let kind = self.kind_of(target);
        match &mut self.nodes[target as usize] {
            Node::Dict(items) => {
                for kv in pairs.chunks_exact(2) {
                    items.push((kv[0], kv[1]));
                }
                Ok(())
            }
            _ => Err(err(format!("SETITEM on {kind}, which is not a dict"))),
        }
    }

    fn append(&mut self, target: Id, values: Vec<Id>) -> Result<()> {
        let kind = self.kind_of(target);
        match &mut self.nodes[target as usize] {
            Node::List(items) => {
                items.extend(values);
                Ok(())
            }
            _ => Err(err(format!("APPEND on {kind}, which is not a list"))),
        }
    }

    fn add_items(&mut self, target: Id, values: Vec<Id>) -> Result<()> {
        let kind = self.kind_of(target);
        match &mut self.nodes[target as usize] {
            Node::Set(items) => {
                items.extend(values);
                Ok(())
            }
            _ => Err(err(format!("ADDITEMS on {kind}, which is not a set"))),
        }
    }

    fn global(&mut self, module: &str, name: &str) -> Result<()> {
        match Global::lookup(module, name) {
            Some(g) => self.push_node(Node::Global(g)),
            None => Err(Error::new(ErrorKind::PickleGlobal {
                module: module.chars().take(200).collect(),
                name: name.chars().take(200).collect(),
            })),
        }
    }

    /// `REDUCE` / `NEWOBJ`: records the call; builds the few plain values
    /// whose constructors we know.
    fn reduce(&mut self) -> Result<()> {
        let args = self.pop()?;
        let func = self.pop()?;
        let Node::Global(g) = self.nodes[func as usize] else {
            let kind = self.kind_of(func);
            return Err(err(format!("REDUCE calls {kind}, not an allowed global")));
        };
        let Node::Tuple(arg_ids) = &self.nodes[args as usize] else {
            return Err(err("REDUCE arguments are not a tuple"));
        };
        let arg_ids = arg_ids.clone();
        self.budget
            .charge(arg_ids.len().saturating_mul(ID), "call arguments")?;
        // Constructors that copy their argument: each copy is charged, so
        // one shared list copied a thousand times costs a thousand lists.
        if let Some(&a) = arg_ids.first() {
            let copied = match (g, &self.nodes[a as usize]) {
                (Global::Set | Global::Size, Node::List(v) | Node::Tuple(v) | Node::Set(v)) => {
                    v.len().saturating_mul(ID)
                }
                (Global::ByteArray, Node::Bytes(b)) => b.len(),
                (Global::CodecsEncode, Node::Str(t)) => t.len(),
                _ => 0,
            };
            self.budget.charge(copied, "copies made by constructors")?;
        }
        let node = match g {
            Global::OrderedDict if arg_ids.is_empty() => Node::Dict(Vec::new()),
            Global::Set => match arg_ids.first().map(|&a| &self.nodes[a as usize]) {
                None => Node::Set(Vec::new()),
                Some(Node::List(v) | Node::Tuple(v) | Node::Set(v)) => Node::Set(v.clone()),
                _ => return Err(err("set() of something that is not a list")),
            },
            Global::Size => match arg_ids.first().map(|&a| &self.nodes[a as usize]) {
                None => Node::Tuple(Vec::new()),
                Some(Node::Tuple(v) | Node::List(v)) => Node::Tuple(v.clone()),
                _ => return Err(err("torch.Size of something that is not a tuple")),
            },
            Global::CodecsEncode => self.codecs_encode(&arg_ids)?,
            Global::ByteArray => match arg_ids.first().map(|&a| &self.nodes[a as usize]) {
                None => Node::Bytes(Vec::new()),
                Some(Node::Bytes(b)) => Node::Bytes(b.clone()),
                _ => return Err(err("bytearray of something that is not bytes")),
            },
            Global::Dtype(_) | Global::Layout(_) | Global::Storage(_) => {
                return Err(err(format!("{g:?} is not callable here")))
            }
            _ => Node::Call {
                func: g,
                args,
                state: None,
            },
        };
        self.push_node(node)
    }

    /// `_codecs.encode(text, "latin1")`: protocol 2's spelling of bytes.
    fn codecs_encode(&self, args: &[Id]) -> Result<Node> {
        let (Some(Node::Str(text)), Some(Node::Str(enc))) = (
            args.first().map(|&a| &self.nodes[a as usize]),
            args.get(1).map(|&a| &self.nodes[a as usize]),
        ) else {
            return Err(err("_codecs.encode needs a str and an encoding"));
        };
        if enc != "latin1" && enc != "latin-1" {
            return Err(err(format!("_codecs.encode with encoding {enc:?}")));
        }
        let mut out = Vec::with_capacity(text.len());
        for c in text.chars() {
            out.push(u8::try_from(u32::from(c)).map_err(|_| err("latin1 text above U+00FF"))?);
        }
        Ok(Node::Bytes(out))
    }

    fn build(&mut self) -> Result<()> {
        let state = self.pop()?;
        let target = self.top()?;
        let kind = self.kind_of(target);
        match &mut self.nodes[target as usize] {
            // An OrderedDict's instance attributes (`_metadata`): not items.
            Node::Dict(_) => Ok(()),
            Node::Call { state: s, .. } => {
                *s = Some(state);
                Ok(())
            }
            _ => Err(err(format!("BUILD on {kind}"))),
        }
    }

    fn long(&mut self, n: u64) -> Result<()> {
        let raw = self.sized(n)?;
        let node = match raw.len() {
            0 => Node::Int(0),
            1..=8 => {
                let neg = raw[raw.len() - 1] & 0x80 != 0;
                let mut b = [if neg { 0xff } else { 0 }; 8];
                b[..raw.len()].copy_from_slice(raw);
                Node::Int(i64::from_le_bytes(b))
            }
            _ => Node::BigInt,
        };
        self.push_node(node)
    }

    fn tuple_of(&mut self, n: usize) -> Result<()> {
        self.budget.charge(n * ID, "container items")?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.pop()?);
        }
        items.reverse();
        self.push_node(Node::Tuple(items))
    }

    /// Runs one opcode; returns the root at `STOP`.
    fn step(&mut self, op: u8) -> Result<Option<Id>> {
        match op {
            0x80 => {
                let proto = self.byte()?;
                if proto > 5 {
                    return Err(err(format!("pickle protocol {proto} is not supported")));
                }
            }
            // FRAME: a length hint; frames are read as one stream.
            0x95 => {
                self.u64()?;
            }
            b'.' => return self.pop().map(Some),
            b'(' => {
                if self.marks >= self.limits.marks {
                    return Err(err(format!(
                        "more than {} nested MARKs: refused",
                        self.limits.marks
                    )));
                }
                self.marks += 1;
                self.stack.push(Slot::Mark);
            }
            b'0' => {
                self.pop()?;
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let id = self.top()?;
                self.stack.push(Slot::Val(id));
            }
            b'N' => self.push_node(Node::None)?,
            // Protocols 0 and 1 (`torch.save(..., pickle_protocol=1)`):
            // numbers, strings, memo keys and persistent ids as text lines.
            b'I' => {
                let line = self.text_line()?;
                let node = match line {
                    b"00" => Node::Bool(false),
                    b"01" => Node::Bool(true),
                    _ => parse_decimal(line)?.map_or(Node::BigInt, Node::Int),
                };
                self.push_node(node)?
            }
            b'L' => {
                let v = self.decimal()?;
                self.push_node(v.map_or(Node::BigInt, Node::Int))?
            }
            b'F' => {
                let line = self.text_line()?;
                let v = std::str::from_utf8(line)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| err("FLOAT is not a number"))?;
                self.push_node(Node::Float(v))?
            }
            b'V' => {
                let s = self.unicode_line()?;
                self.push_node(Node::Str(s))?
            }
            b'P' => {
                let pid = self.text_persistent_id()?;
                self.push_node(Node::Persistent(pid))?
            }
            b'p' => {
                let k = self.memo_key()?;
                self.memo_put(k)?
            }
            b'g' => {
                let k = self.memo_key()?;
                self.memo_get(k)?
            }
            0x88 => self.push_constant(TRUE, Node::Bool(true))?,
            0x89 => self.push_constant(FALSE, Node::Bool(false))?,
            b'J' => {
                let v = self.u32()? as i32;
                self.push_node(Node::Int(v.into()))?
            }
            b'K' => {
                let v = self.byte()?;
                self.push_constant(v.into(), Node::Int(v.into()))?
            }
            b'M' => {
                let v = self.u16()?;
                self.push_node(Node::Int(v.into()))?
            }
            0x8a => {
                let n = self.byte()?;
                self.long(n.into())?
            }
            0x8b => {
                let n = self.u32()? as i32;
                let n = u64::try_from(n).map_err(|_| err("LONG4 with a negative length"))?;
                self.long(n)?
            }
            b'G' => {
                let v = f64::from_be_bytes(self.take(8)?.try_into().expect("8"));
                self.push_node(Node::Float(v))?
            }
            b'X' | 0x8c | 0x8d => {
                let n = match op {
                    b'X' => self.u32()?.into(),
                    0x8c => self.byte()?.into(),
                    _ => self.u64()?,
                };
                let raw = self.sized(n)?;
                let s = std::str::from_utf8(raw)
                    .map_err(|_| err("a str is not valid UTF-8"))?
                    .to_string();
                self.push_node(Node::Str(s))?
            }
            // Protocol 2's byte strings (STRING family) decode as latin1
            // text here, as torch loads them with `encoding="latin1"`.
            b'T' | b'U' => {
                let n = if op == b'T' {
                    self.u32()?.into()
                } else {
                    self.byte()?.into()
                };
                let s = self.sized(n)?.iter().map(|&b| b as char).collect();
                self.push_node(Node::Str(s))?
            }
            b'B' | b'C' | 0x8e | 0x96 => {
                let n = match op {
                    b'B' => self.u32()?.into(),
                    b'C' => self.byte()?.into(),
                    _ => self.u64()?,
                };
                let b = self.sized(n)?.to_vec();
                self.push_node(Node::Bytes(b))?
            }
            b']' => self.push_node(Node::List(Vec::new()))?,
            b'l' => {
                let items = self.pop_mark()?;
                self.push_node(Node::List(items))?
            }
            b')' => self.push_node(Node::Tuple(Vec::new()))?,
            b't' => {
                let items = self.pop_mark()?;
                self.push_node(Node::Tuple(items))?
            }
            0x85 => self.tuple_of(1)?,
            0x86 => self.tuple_of(2)?,
            0x87 => self.tuple_of(3)?,
            b'}' => self.push_node(Node::Dict(Vec::new()))?,
            b'd' => {
                let items = self.pop_mark()?;
                let dict = self.alloc(Node::Dict(Vec::new()))?;
                self.set_items(dict, items)?;
                self.stack.push(Slot::Val(dict));
            }
            0x8f => self.push_node(Node::Set(Vec::new()))?,
            0x91 => {
                let items = self.pop_mark()?;
                self.push_node(Node::Set(items))?
            }
            0x90 => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.add_items(target, items)?
            }
            b'a' => {
                self.budget.charge(ID, "container items")?;
                let v = self.pop()?;
                let target = self.top()?;
                self.append(target, vec![v])?
            }
            b'e' => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.append(target, items)?
            }
            b's' => {
                self.budget.charge(2 * ID, "container items")?;
                let v = self.pop()?;
                let k = self.pop()?;
                let target = self.top()?;
                self.set_items(target, vec![k, v])?
            }
            b'u' => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.set_items(target, items)?
            }
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.global(&module, &name)?
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                match (&self.nodes[module as usize], &self.nodes[name as usize]) {
                    (Node::Str(m), Node::Str(n)) => {
                        let (m, n) = (m.clone(), n.clone());
                        self.budget.charge(m.len() + n.len(), "global names")?;
                        self.global(&m, &n)?
                    }
                    _ => return Err(err("STACK_GLOBAL needs two strs")),
                }
            }
            b'R' | 0x81 => self.reduce()?,
            b'b' => self.build()?,
            b'Q' => {
                let pid = self.pop()?;
                self.push_node(Node::Persistent(pid))?
            }
            b'h' => {
                let k = self.byte()?;
                self.memo_get(k.into())?
            }
            b'j' => {
                let k = self.u32()?;
                self.memo_get(k)?
            }
            b'q' => {
                let k = self.byte()?;
                self.memo_put(k.into())?
            }
            b'r' => {
                let k = self.u32()?;
                self.memo_put(k)?
            }
            0x94 => {
                let k = u32::try_from(self.memo.len()).map_err(|_| err("memo overflow"))?;
                self.memo_put(k)?
            }
            other => {
                return Err(err(format!(
                    "opcode 0x{other:02x} is not one a checkpoint uses: refused"
                )))
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &[u8]) -> Result<Pickled> {
        unpickle(p, Limits::default()).map(|(v, _)| v)
    }

    #[test]
    fn refuses_unlisted_globals_by_name() {
        let e = run(b"\x80\x02cbuiltins\neval\nq\x00.").unwrap_err();
        match e.kind() {
            ErrorKind::PickleGlobal { module, name } => {
                assert_eq!((module.as_str(), name.as_str()), ("builtins", "eval"))
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn setitem_on_a_list_is_refused() {
        let e = run(b"\x80\x02]K\x01K\x02s.").unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Pickle(_)), "{e}");
    }

    #[test]
    fn memo_shares_values() {
        // l = [1]; [l, l] with the second a BINGET.
        let v = run(b"\x80\x02](]q\x00K\x01ah\x00e.").unwrap();
        let Node::List(items) = v.get(v.root) else {
            panic!()
        };
        assert_eq!(items[0], items[1]);
    }

    #[test]
    fn truncated_and_unknown_opcodes_fail() {
        assert!(run(b"\x80\x02X\x05\x00\x00\x00ab").is_err());
        assert!(run(b"\x80\x02\xff.").is_err());
        assert!(run(b"").is_err());
    }

    #[test]
    fn limits_hold() {
        let mut p = b"\x80\x02".to_vec();
        p.extend(std::iter::repeat_n(b'(', 20_000));
        assert!(run(&p).is_err());
        let tiny = Limits {
            nodes: 3,
            ..Limits::default()
        };
        assert!(unpickle(b"\x80\x02NNNN.", tiny).is_err());
    }

    #[test]
    fn longs_sign_extend() {
        let v = run(b"\x8a\x02\xff\xff.").unwrap();
        assert_eq!(v.get(v.root), &Node::Int(-1));
        let v = run(b"\x8a\x02\xff\x00.").unwrap();
        assert_eq!(v.get(v.root), &Node::Int(255));
    }
}
