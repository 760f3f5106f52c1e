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

use crate::{Error, ErrorKind, PickleError, Result};

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

/// A pickle may hold this many times its own size in values...
pub const BUDGET_FACTOR: usize = 2;
/// ...plus this many bytes, so that a small checkpoint is never short.
pub const BUDGET_FLOOR: usize = 48 << 20;

/// Bytes a pickle may materialise: the arena's values, the items of its
/// containers, its strings, the copies its allowed constructors make and
/// the names the walk joins from nested keys. One budget per pickle, spent
/// by the unpickler and then by the naming walk ([`Pickled::budget`]).
///
/// ```
/// use safetensors_stream::internals::pickle::Budget;
///
/// let mut b = Budget::for_input(1000);
/// assert_eq!(b.limit(), 2 * 1000 + (48 << 20));
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

    /// Allows `n` bytes more: the pickle's own, which its caller frees
    /// before the walk that names its tensors spends the rest.
    pub fn widen(&mut self, n: usize) {
        self.limit = self.limit.saturating_add(n);
    }

    /// Gives back `n` bytes spent on something freed since (a copy made
    /// for a moment, the unpickler's stack and memo once it is done).
    pub fn release(&mut self, n: usize) {
        self.used = self.used.saturating_sub(n);
    }

    /// Makes room in `v` for `extra` more items, charging the new buffer in
    /// full before it is allocated: while a `Vec` moves, its old buffer is
    /// live too, so what its growth is charged (at most twice its final
    /// size) covers what it holds at its peak. Returns the bytes charged.
    pub fn reserve<T>(
        &mut self,
        v: &mut Vec<T>,
        extra: usize,
        what: &'static str,
    ) -> Result<usize> {
        let need = v.len().saturating_add(extra);
        if need <= v.capacity() {
            return Ok(0);
        }
        let cap = need.max(v.capacity().saturating_mul(2)).max(4);
        let bytes = cap.saturating_mul(std::mem::size_of::<T>());
        self.charge(bytes, what)?;
        v.reserve_exact(cap - v.len());
        Ok(bytes)
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

/// A value the pickle built, as [`Pickled::get`] shows it: its strings
/// and items borrowed from the arena's pools.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Node<'a> {
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
    Str(&'a str),
    /// `bytes` or `bytearray`.
    Bytes(&'a [u8]),
    /// A tuple.
    Tuple(&'a [Id]),
    /// A list.
    List(&'a [Id]),
    /// A dict or `OrderedDict`, in insertion order.
    Dict(&'a [(Id, Id)]),
    /// A set or frozenset.
    Set(&'a [Id]),
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

/// A [`Global`] in two bytes: its kind and, for the named ones, its place
/// in the list it came from ([`STORAGES`], [`DTYPES`]...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Code(u8, u8);

/// The lists the named globals come from, by [`Code`] kind.
const NAMED: [&[&str]; 3] = [STORAGES, DTYPES, LAYOUTS];

impl Global {
    fn code(self) -> Code {
        let at = |list: &[&str], s: &str| list.iter().position(|x| *x == s).unwrap_or(0) as u8;
        match self {
            Global::Storage(s) => Code(0, at(STORAGES, s)),
            Global::Dtype(s) => Code(1, at(DTYPES, s)),
            Global::Layout(s) => Code(2, at(LAYOUTS, s)),
            Global::RefusedTensor(what) => Code(
                3,
                REFUSED_TENSORS
                    .iter()
                    .position(|(_, w)| *w == what)
                    .unwrap_or(0) as u8,
            ),
            plain => Code(4, PLAIN.iter().position(|g| *g == plain).unwrap_or(0) as u8),
        }
    }

    fn from_code(Code(kind, i): Code) -> Global {
        let i = usize::from(i);
        match kind {
            0..=2 => {
                let s = NAMED[usize::from(kind)][i];
                [Global::Storage, Global::Dtype, Global::Layout][usize::from(kind)](s)
            }
            3 => Global::RefusedTensor(REFUSED_TENSORS[i].1),
            _ => PLAIN[i],
        }
    }
}

/// The globals without a name of their own, in [`Code`] order.
const PLAIN: &[Global] = &[
    Global::OrderedDict,
    Global::RebuildTensor,
    Global::RebuildTensorV2,
    Global::RebuildTensorV3,
    Global::RebuildParameter,
    Global::RebuildParameterWithState,
    Global::RebuildFromType,
    Global::TensorType,
    Global::Size,
    Global::Device,
    Global::CodecsEncode,
    Global::Set,
    Global::Complex,
    Global::ByteArray,
    Global::GetLayout,
];

/// Where a string, bytes or a tuple's items lie in their [`Pool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    at: u32,
    len: u32,
}

/// A mutable container's items in [`Pickled`]'s side lists; `NO_SIDE`
/// while it is empty, so the empty `OrderedDict()` a torch tensor carries
/// for its hooks costs its cell alone.
type Side = u32;
const NO_SIDE: Side = u32::MAX;
/// `Cell::Call`'s `state` before a `BUILD`.
const NO_STATE: Id = Id::MAX;

/// How a value is stored: 12 bytes, its strings and items in pools (a
/// million-tensor checkpoint builds 7 million values).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cell {
    None,
    Bool(bool),
    Int(Bits),
    BigInt,
    Float(Bits),
    Str(Span),
    Bytes(Span),
    Tuple(Span),
    List(Side),
    Dict(Side),
    Set(Side),
    Global(Code),
    Call { func: Code, args: Id, state: Id },
    Persistent(Id),
}

const _: () = assert!(std::mem::size_of::<Cell>() == 12);

/// A number's 64 bits as two `u32`s, so that a [`Cell`] is aligned to 4
/// bytes and takes 12, not 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bits([u32; 2]);

impl Bits {
    fn of(v: u64) -> Bits {
        Bits([v as u32, (v >> 32) as u32])
    }

    fn get(self) -> u64 {
        u64::from(self.0[0]) | u64::from(self.0[1]) << 32
    }
}

impl Cell {
    fn int(v: i64) -> Cell {
        Cell::Int(Bits::of(v as u64))
    }

    fn float(v: f64) -> Cell {
        Cell::Float(Bits::of(v.to_bits()))
    }
}

/// Positions in a [`Pool`]'s chunk unless it says otherwise; a longer
/// slice gets a chunk of its own.
const CHUNK: usize = 1 << 16;

/// Values kept in chunks of `N` positions: growing never copies what is
/// held (a `Vec` doubling holds up to three times its contents while it
/// moves). A slice lies in one chunk, so its first position addresses it;
/// one longer than a chunk takes a chunk of its size and the positions of
/// as many chunks.
#[derive(Debug, Clone)]
struct Pool<T, const N: usize = CHUNK> {
    chunks: Vec<Vec<T>>,
}

impl<T, const N: usize> Default for Pool<T, N> {
    fn default() -> Self {
        Pool { chunks: Vec::new() }
    }
}

impl<T: Copy, const N: usize> Pool<T, N> {
    /// Bytes [`Pool::push`] of `n` items allocates: none while the last
    /// chunk has room, else a chunk (of `n` if that is longer; the room
    /// left in the last one is lost, and so charged).
    fn growth(&self, n: usize) -> usize {
        let room = self.chunks.last().map_or(0, |c| c.capacity() - c.len());
        if n == 0 || n <= room {
            return 0;
        }
        n.max(N).saturating_mul(std::mem::size_of::<T>())
    }

    /// Stores `items`; their first position.
    fn push(&mut self, items: &[T]) -> Result<u32> {
        if items.is_empty() {
            return Ok(0);
        }
        let room = self.chunks.last().map_or(0, |c| c.capacity() - c.len());
        if room < items.len() {
            let slots = items.len().div_ceil(N);
            self.chunks.push(Vec::with_capacity(items.len().max(N)));
            // Placeholders keep the positions of the chunks it spans.
            self.chunks.extend((1..slots).map(|_| Vec::new()));
            if slots > 1 {
                let start = self.chunks.len() - slots;
                self.chunks[start].extend_from_slice(items);
                return Self::position(start, 0);
            }
        }
        let c = self.chunks.len() - 1;
        let chunk = &mut self.chunks[c];
        let at = chunk.len();
        chunk.extend_from_slice(items);
        Self::position(c, at)
    }

    fn slice(&self, s: Span) -> &[T] {
        if s.len == 0 {
            return &[];
        }
        let (c, o) = (s.at as usize / N, s.at as usize % N);
        &self.chunks[c][o..o + s.len as usize]
    }

    fn get(&self, at: u32) -> Option<&T> {
        let (c, o) = (at as usize / N, at as usize % N);
        self.chunks.get(c)?.get(o)
    }

    fn get_mut(&mut self, at: u32) -> Option<&mut T> {
        let (c, o) = (at as usize / N, at as usize % N);
        self.chunks.get_mut(c)?.get_mut(o)
    }

    fn position(chunk: usize, at: usize) -> Result<u32> {
        chunk
            .checked_mul(N)
            .and_then(|p| u32::try_from(p + at).ok())
            .ok_or_else(|| err(PickleError::Positions))
    }
}

/// A parsed pickle: the arena and the value `STOP` returned.
#[derive(Debug, Clone)]
pub struct Pickled {
    cells: Pool<Cell>,
    count: usize,
    /// Tuples' items.
    items: Pool<Id>,
    /// Strings' and bytes' bytes (strings are checked UTF-8 when stored).
    raw: Pool<u8>,
    /// Lists' and sets' items, by [`Side`].
    seqs: Vec<Vec<Id>>,
    /// Dicts' items, by [`Side`].
    dicts: Vec<Vec<(Id, Id)>>,
    /// The result.
    pub root: Id,
    /// What is left of the pickle's budget, for the walk that names its
    /// tensors: what the unpickler held and freed (its stack and memo)
    /// given back, and the limit widened by the pickle's own bytes, which
    /// the caller must drop before the walk (the budget bounds what is
    /// live beside them: the README's 3 times the pickle + 64 MiB).
    pub budget: Budget,
}

impl Pickled {
    /// The value `id` refers to.
    pub fn get(&self, id: Id) -> Node<'_> {
        let Some(&cell) = self.cells.get(id) else {
            return Node::None;
        };
        let seq = |slot: Side| {
            self.seqs
                .get(slot as usize)
                .map_or(&[][..], |v| v.as_slice())
        };
        match cell {
            Cell::None => Node::None,
            Cell::Bool(b) => Node::Bool(b),
            Cell::Int(i) => Node::Int(i.get() as i64),
            Cell::BigInt => Node::BigInt,
            Cell::Float(f) => Node::Float(f64::from_bits(f.get())),
            Cell::Str(s) => Node::Str(std::str::from_utf8(self.raw.slice(s)).unwrap_or_default()),
            Cell::Bytes(s) => Node::Bytes(self.raw.slice(s)),
            Cell::Tuple(s) => Node::Tuple(self.items.slice(s)),
            Cell::List(slot) => Node::List(seq(slot)),
            Cell::Set(slot) => Node::Set(seq(slot)),
            Cell::Dict(slot) => Node::Dict(
                self.dicts
                    .get(slot as usize)
                    .map_or(&[][..], |v| v.as_slice()),
            ),
            Cell::Global(c) => Node::Global(Global::from_code(c)),
            Cell::Call { func, args, state } => Node::Call {
                func: Global::from_code(func),
                args,
                state: (state != NO_STATE).then_some(state),
            },
            Cell::Persistent(p) => Node::Persistent(p),
        }
    }

    /// How many values were built.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if none was (never, for a pickle that parsed).
    #[cfg(any(test, feature = "internals"))]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

fn err(e: PickleError) -> Error {
    Error::new(ErrorKind::Pickle(e))
}

/// A decimal integer (`-12`, `7L`); `None` if it overflows 64 bits (a big
/// int, kept only as a leaf).
fn parse_decimal(line: &[u8]) -> Result<Option<i64>> {
    let t = std::str::from_utf8(line).map_err(|_| err(PickleError::NumberNotAscii))?;
    let t = t.strip_suffix('L').unwrap_or(t);
    let digits = t.strip_prefix('-').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(PickleError::NotDecimal(t.into())));
    }
    Ok(t.parse().ok())
}

/// `_codecs.encode(text, "latin1")`: protocol 2's spelling of bytes.
fn codecs_encode(text: Option<Node>, enc: Option<Node>) -> Result<Vec<u8>> {
    let (Some(Node::Str(text)), Some(Node::Str(enc))) = (text, enc) else {
        return Err(err(PickleError::CodecsArgs));
    };
    if enc != "latin1" && enc != "latin-1" {
        return Err(err(PickleError::CodecsEncoding(enc.into())));
    }
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).map_err(|_| err(PickleError::NotLatin1)))
        .collect()
}

/// The span of nothing: empty strings, bytes and tuples.
const EMPTY: Span = Span { at: 0, len: 0 };

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
    dense: Pool<Id, MEMO_CHUNK>,
    dense_len: usize,
    sparse: HashMap<u32, Id>,
    len: usize,
}

/// The memo's chunks: 1 MiB, past what mimalloc (the `convert` binary's
/// allocator) packs several of into one page, where the tuple items'
/// 256 KiB chunks would share pages with them and keep them from being
/// handed back when the memo is dropped (a million tensors: 32 MB).
const MEMO_CHUNK: usize = 1 << 18;

/// A key this far past the list's end still extends it.
const MEMO_GAP: usize = 64;

/// Bytes a memo key in the map is charged: its 8 bytes and control byte,
/// in a table at most 8/7 full that doubles (old and new live at once).
const SPARSE_ENTRY: usize = 32;

impl Memo {
    const EMPTY: Id = Id::MAX;

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, key: u32) -> Option<Id> {
        match self.dense_get(key) {
            Some(&id) if id != Self::EMPTY => Some(id),
            _ => self.sparse.get(&key).copied(),
        }
    }

    fn dense_get(&self, key: u32) -> Option<&Id> {
        ((key as usize) < self.dense_len).then(|| self.dense.get(key))?
    }

    /// Memoizes `id` under `key`, charging `budget` what the memo grows
    /// by: the list's new chunk when the key extends it past its room (up
    /// to [`MEMO_GAP`] entries for one key), or a map entry. Returns the
    /// bytes charged.
    fn insert(&mut self, key: u32, id: Id, budget: &mut Budget) -> Result<usize> {
        let k = key as usize;
        let mut cost = 0;
        if k >= self.dense_len && k - self.dense_len < MEMO_GAP {
            // One chunk at most: the gap is shorter than a chunk.
            cost = self.dense.growth(k + 1 - self.dense_len);
            budget.charge(cost, "memo entries")?;
            while self.dense_len <= k {
                self.dense.push(&[Self::EMPTY])?;
                self.dense_len += 1;
            }
        }
        let slot = if k < self.dense_len {
            self.dense.get_mut(key)
        } else {
            None
        };
        let new = match slot {
            // A key the map took before the list reached it moves over.
            Some(slot) => {
                std::mem::replace(slot, id) == Self::EMPTY && self.sparse.remove(&key).is_none()
            }
            None if self.sparse.contains_key(&key) => {
                self.sparse.insert(key, id);
                false
            }
            None => {
                // A hash map entry and its share of the table, doubled
                // while the table moves.
                budget.charge(SPARSE_ENTRY, "memo entries")?;
                cost += SPARSE_ENTRY;
                self.sparse.insert(key, id);
                true
            }
        };
        if new {
            self.len += 1;
        }
        Ok(cost)
    }
}

/// Shared values: the ints 0-255 (`BININT1`), then `False`, `True` and
/// the empty tuple.
const CONSTANTS: usize = 259;
const FALSE: usize = 256;
const TRUE: usize = 257;
const EMPTY_TUPLE: usize = 258;

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    limits: Limits,
    /// The arena being built; its root and budget are set at `STOP`.
    out: Pickled,
    stack: Vec<Slot>,
    marks: usize,
    memo: Memo,
    /// [`Machine::push_constant`]'s values, once built.
    constants: [Id; CONSTANTS],
    /// Tuples of one to three constants, shared ([`Machine::tuple_of`]).
    small_tuples: HashMap<[Id; 3], Id>,
    bytes: usize,
    budget: Budget,
    /// Bytes charged for what the machine frees when it is done: the
    /// stack, the memo, `small_tuples`; given back to the walk's budget.
    scratch: usize,
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
        out: Pickled {
            cells: Pool::default(),
            count: 0,
            items: Pool::default(),
            raw: Pool::default(),
            seqs: Vec::new(),
            dicts: Vec::new(),
            root: 0,
            budget: Budget::new(0),
        },
        stack: Vec::new(),
        marks: 0,
        memo: Memo::default(),
        constants: [Memo::EMPTY; CONSTANTS],
        small_tuples: HashMap::new(),
        bytes: 0,
        budget: Budget::new(limits.budget),
        scratch: 0,
    };
    loop {
        let at = m.pos;
        let op = m.byte().map_err(|e| e.at_offset(at as u64))?;
        match m.step(op) {
            Ok(Some(root)) => {
                let pos = m.pos;
                let mut out = m.out;
                out.root = root;
                out.budget = m.budget;
                // The stack, the memo and the shared tuples' map go now,
                // and the pickle's bytes before the walk (both callers
                // drop them first): the walk may hold what they held.
                out.budget.release(m.scratch);
                out.budget.widen(pos);
                return Ok((out, pos));
            }
            Ok(None) => {}
            Err(e) => return Err(e.at_offset(at as u64)),
        }
    }
}

impl<'a> Machine<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let data: &'a [u8] = self.data;
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| err(PickleError::Truncated))?;
        let s = &data[self.pos..end];
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
            .ok_or_else(|| err(PickleError::GlobalLine))?;
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
            .ok_or_else(|| err(PickleError::Truncated))?;
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
            .ok_or_else(|| err(PickleError::MemoKeyRange))
    }

    /// `UNICODE` (protocol 0): raw-unicode-escape text, `\uXXXX` and
    /// `\UXXXXXXXX` escapes, every other byte a latin-1 character.
    fn unicode_line(&mut self) -> Result<String> {
        let line = self.text_line()?;
        // Each byte or escape is at most two bytes of UTF-8 a byte, so
        // the text never outgrows twice the line: charged so until it is
        // stored (the caller gives back its capacity).
        self.budget.charge(2 * line.len(), "strings and bytes")?;
        let mut out = String::with_capacity(2 * line.len());
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
                .ok_or_else(|| err(PickleError::UnicodeEscape))?;
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
        let text = std::str::from_utf8(line).map_err(|_| err(PickleError::PersidNotText))?;
        let refuse = || err(PickleError::PersidNotStorage);
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
        let items = [
            self.str_cell("storage")?,
            Cell::Global(storage.code()),
            self.str_cell(key)?,
            self.str_cell(location)?,
            Cell::int(numel),
        ];
        let mut ids = [0; 5];
        for (id, cell) in ids.iter_mut().zip(items) {
            *id = self.alloc(cell)?;
        }
        let tuple = self.tuple_cell(&ids)?;
        self.alloc(tuple)
    }

    /// A `str` stored in the pool, charged what the pool grows by.
    fn str_cell(&mut self, s: &str) -> Result<Cell> {
        self.budget
            .charge(self.out.raw.growth(s.len()), "strings and bytes")?;
        let at = self.out.raw.push(s.as_bytes())?;
        Ok(Cell::Str(Span {
            at,
            len: s.len() as u32,
        }))
    }

    fn bytes_cell(&mut self, b: &[u8]) -> Result<Cell> {
        self.budget
            .charge(self.out.raw.growth(b.len()), "strings and bytes")?;
        let at = self.out.raw.push(b)?;
        Ok(Cell::Bytes(Span {
            at,
            len: b.len() as u32,
        }))
    }

    fn tuple_cell(&mut self, items: &[Id]) -> Result<Cell> {
        self.budget
            .charge(self.out.items.growth(items.len()), "container items")?;
        let at = self.out.items.push(items)?;
        Ok(Cell::Tuple(Span {
            at,
            len: items.len() as u32,
        }))
    }

    /// A list's or set's items in the side list (none while it is empty);
    /// `items` was charged when it was collected.
    fn seq(&mut self, items: Vec<Id>) -> Result<Side> {
        if items.is_empty() {
            return Ok(NO_SIDE);
        }
        self.budget
            .reserve(&mut self.out.seqs, 1, "container items")?;
        self.out.seqs.push(items);
        Ok((self.out.seqs.len() - 1) as Side)
    }

    /// A length from the pickle, checked against the bytes that remain.
    fn sized(&mut self, n: u64) -> Result<&'a [u8]> {
        let n = usize::try_from(n).map_err(|_| err(PickleError::LengthTooLarge))?;
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.limits.bytes {
            return Err(err(PickleError::BytesLimit(self.limits.bytes as u64)));
        }
        // Borrowed from the pickle: what is stored of it is charged then.
        self.take(n)
    }

    /// Pushes `slot`, charging the stack's growth: an opcode of one byte
    /// pushes a slot of 8 (`NEWTRUE`, `DUP`, `BINGET`...).
    fn push(&mut self, slot: Slot) -> Result<()> {
        self.scratch += self.budget.reserve(&mut self.stack, 1, "the stack")?;
        self.stack.push(slot);
        Ok(())
    }

    fn push_node(&mut self, node: Cell) -> Result<()> {
        let id = self.alloc(node)?;
        self.push(Slot::Val(id))?;
        Ok(())
    }

    /// Pushes the small int or bool in `slot`, built the first time and
    /// shared after: they never change, and a million tensors' offsets,
    /// sizes and strides are mostly 0s and 1s (4 values a tensor).
    fn push_constant(&mut self, slot: usize, node: Cell) -> Result<()> {
        let id = match self.constants[slot] {
            Memo::EMPTY => {
                let id = self.alloc(node)?;
                self.constants[slot] = id;
                id
            }
            id => id,
        };
        self.push(Slot::Val(id))?;
        Ok(())
    }

    fn alloc(&mut self, node: Cell) -> Result<Id> {
        if self.out.count >= self.limits.nodes {
            return Err(err(PickleError::ValuesLimit(self.limits.nodes as u64)));
        }
        // 12 bytes a value, charged a chunk at a time as the pool grows.
        self.budget.charge(self.out.cells.growth(1), "values")?;
        let id = self.out.cells.push(&[node])?;
        self.out.count += 1;
        Ok(id)
    }

    fn cell(&self, id: Id) -> Cell {
        self.out.cells.get(id).copied().unwrap_or(Cell::None)
    }

    fn pop(&mut self) -> Result<Id> {
        match self.stack.pop() {
            Some(Slot::Val(id)) => Ok(id),
            Some(Slot::Mark) => Err(err(PickleError::MarkNotValue)),
            None => Err(err(PickleError::StackUnderflow)),
        }
    }

    fn top(&self) -> Result<Id> {
        match self.stack.last() {
            Some(Slot::Val(id)) => Ok(*id),
            _ => Err(err(PickleError::StackUnderflow)),
        }
    }

    /// Pops everything down to the last MARK, and the MARK.
    fn pop_mark(&mut self) -> Result<Vec<Id>> {
        let at = self
            .stack
            .iter()
            .rposition(|s| *s == Slot::Mark)
            .ok_or_else(|| err(PickleError::NoMark))?;
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
            return Err(err(PickleError::MemoLimit(self.limits.memo as u64)));
        }
        self.scratch += self.memo.insert(key, id, &mut self.budget)?;
        Ok(())
    }

    fn memo_get(&mut self, key: u32) -> Result<()> {
        let id = self
            .memo
            .get(key)
            .ok_or_else(|| err(PickleError::MemoKeyNeverStored(u64::from(key))))?;
        self.push(Slot::Val(id))?;
        Ok(())
    }

    fn kind_of(&self, id: Id) -> &'static str {
        match self.cell(id) {
            Cell::None => "None",
            Cell::Bool(_) => "a bool",
            Cell::Int(_) | Cell::BigInt => "an int",
            Cell::Float(_) => "a float",
            Cell::Str(_) => "a str",
            Cell::Bytes(_) => "bytes",
            Cell::Tuple(_) => "a tuple",
            Cell::List(_) => "a list",
            Cell::Dict(_) => "a dict",
            Cell::Set(_) => "a set",
            Cell::Global(_) => "a global",
            Cell::Call { .. } => "an object",
            Cell::Persistent(_) => "a persistent id",
        }
    }

    /// The side list `target`'s items are in, given one first if it had
    /// none (charged); `None` if `target` is not the container `want` makes.
    fn side(&mut self, target: Id, want: fn(Side) -> Cell) -> Result<Option<usize>> {
        let Some(&cell) = self.out.cells.get(target) else {
            return Ok(None);
        };
        let (slot, fresh) = match cell {
            Cell::List(s) | Cell::Set(s) if want(s) == cell => (s, self.out.seqs.len()),
            Cell::Dict(s) if want(s) == cell => (s, self.out.dicts.len()),
            _ => return Ok(None),
        };
        if slot != NO_SIDE {
            return Ok(Some(slot as usize));
        }
        match cell {
            Cell::Dict(_) => {
                self.budget
                    .reserve(&mut self.out.dicts, 1, "container items")?;
                self.out.dicts.push(Vec::new());
            }
            _ => {
                self.budget
                    .reserve(&mut self.out.seqs, 1, "container items")?;
                self.out.seqs.push(Vec::new());
            }
        }
        if let Some(c) = self.out.cells.get_mut(target) {
            *c = want(fresh as Side);
        }
        Ok(Some(fresh))
    }

    fn set_items(&mut self, target: Id, pairs: &[Id]) -> Result<()> {
        if pairs.len() % 2 != 0 {
            return Err(err(PickleError::SetItemsOdd));
        }
        let kind = self.kind_of(target);
        let Some(slot) = self.side(target, Cell::Dict)? else {
            return Err(err(PickleError::SetItemNotDict(kind)));
        };
        let items = &mut self.out.dicts[slot];
        self.budget
            .reserve(items, pairs.len() / 2, "container items")?;
        items.extend(pairs.chunks_exact(2).map(|kv| (kv[0], kv[1])));
        Ok(())
    }

    fn append(&mut self, target: Id, values: &[Id]) -> Result<()> {
        self.extend_seq(target, values, Cell::List, "APPEND", "a list")
    }

    fn add_items(&mut self, target: Id, values: &[Id]) -> Result<()> {
        self.extend_seq(target, values, Cell::Set, "ADDITEMS", "a set")
    }

    fn extend_seq(
        &mut self,
        target: Id,
        values: &[Id],
        want: fn(Side) -> Cell,
        op: &'static str,
        what: &'static str,
    ) -> Result<()> {
        let kind = self.kind_of(target);
        let Some(slot) = self.side(target, want)? else {
            return Err(err(PickleError::NotContainer {
                op,
                kind,
                expected: what,
            }));
        };
        let items = &mut self.out.seqs[slot];
        self.budget
            .reserve(items, values.len(), "container items")?;
        items.extend_from_slice(values);
        Ok(())
    }

    fn global(&mut self, module: &str, name: &str) -> Result<()> {
        match Global::lookup(module, name) {
            Some(g) => self.push_node(Cell::Global(g.code())),
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
        let Node::Global(g) = self.out.get(func) else {
            let kind = self.kind_of(func);
            return Err(err(PickleError::ReduceNotGlobal(kind)));
        };
        let Node::Tuple(arg_ids) = self.out.get(args) else {
            return Err(err(PickleError::ReduceArgs));
        };
        let first = arg_ids.first().map(|&a| self.out.get(a));
        // Constructors that copy their argument: each copy is charged, so
        // one shared list copied a thousand times costs a thousand lists
        // (a set keeps its copy; the others' are given back once stored,
        // in pools charged as they grow).
        let copied = match (g, first) {
            (Global::Set | Global::Size, Some(Node::List(v) | Node::Tuple(v) | Node::Set(v))) => {
                v.len().saturating_mul(ID)
            }
            (Global::ByteArray, Some(Node::Bytes(b))) => b.len(),
            (Global::CodecsEncode, Some(Node::Str(t))) => t.len(),
            _ => 0,
        };
        self.budget.charge(copied, "copies made by constructors")?;
        let node = match (g, first) {
            (Global::OrderedDict, None) => Cell::Dict(NO_SIDE),
            (Global::Set, None) => Cell::Set(NO_SIDE),
            (Global::Set, Some(Node::List(v) | Node::Tuple(v) | Node::Set(v))) => {
                let items = v.to_vec();
                Cell::Set(self.seq(items)?)
            }
            (Global::Set, Some(_)) => return Err(err(PickleError::SetArg)),
            (Global::Size, None) => return self.push_constant(EMPTY_TUPLE, Cell::Tuple(EMPTY)),
            (Global::Size, Some(Node::Tuple(v) | Node::List(v))) => {
                // Copied out first: the pool it is read from is the one written.
                let items = v.to_vec();
                self.tuple_cell(&items)?
            }
            (Global::Size, Some(_)) => return Err(err(PickleError::SizeArg)),
            (Global::CodecsEncode, _) => {
                let second = arg_ids.get(1).map(|&a| self.out.get(a));
                let b = codecs_encode(first, second)?;
                self.bytes_cell(&b)?
            }
            (Global::ByteArray, None) => Cell::Bytes(EMPTY),
            (Global::ByteArray, Some(Node::Bytes(b))) => {
                let copy = b.to_vec();
                self.bytes_cell(&copy)?
            }
            (Global::ByteArray, Some(_)) => return Err(err(PickleError::ByteArrayArg)),
            (Global::Dtype(_) | Global::Layout(_) | Global::Storage(_), _) => {
                return Err(err(PickleError::NotCallable(format!("{g:?}"))))
            }
            _ => Cell::Call {
                func: g.code(),
                args,
                state: NO_STATE,
            },
        };
        if g != Global::Set {
            self.budget.release(copied);
        }
        self.push_node(node)
    }

    fn build(&mut self) -> Result<()> {
        let state = self.pop()?;
        let target = self.top()?;
        let kind = self.kind_of(target);
        match self.out.cells.get_mut(target) {
            // An OrderedDict's instance attributes (`_metadata`): not items.
            Some(Cell::Dict(_)) => Ok(()),
            Some(Cell::Call { state: s, .. }) => {
                *s = state;
                Ok(())
            }
            _ => Err(err(PickleError::BuildOn(kind))),
        }
    }

    fn long(&mut self, n: u64) -> Result<()> {
        let raw = self.sized(n)?;
        let node = match raw.len() {
            0 => Cell::int(0),
            1..=8 => {
                let neg = raw[raw.len() - 1] & 0x80 != 0;
                let mut b = [if neg { 0xff } else { 0 }; 8];
                b[..raw.len()].copy_from_slice(raw);
                Cell::int(i64::from_le_bytes(b))
            }
            _ => Cell::BigInt,
        };
        self.push_node(node)
    }

    fn tuple_of(&mut self, n: usize) -> Result<()> {
        let mut items = [0; 3];
        for slot in items[..n].iter_mut().rev() {
            *slot = self.pop()?;
        }
        if !items[..n].iter().all(|&id| self.is_constant(id)) {
            let tuple = self.tuple_cell(&items[..n])?;
            return self.push_node(tuple);
        }
        // A short tuple of shared constants is shared too: a tuple never
        // changes, and every 1-D tensor's stride is `(1,)`.
        items[n..].fill(Memo::EMPTY);
        let id = match self.small_tuples.get(&items) {
            Some(&id) => id,
            None => {
                let tuple = self.tuple_cell(&items[..n])?;
                let id = self.alloc(tuple)?;
                // A map entry: 16 bytes and a control byte, doubling.
                self.budget.charge(SPARSE_ENTRY * 2, "shared tuples")?;
                self.scratch += SPARSE_ENTRY * 2;
                self.small_tuples.insert(items, id);
                id
            }
        };
        self.push(Slot::Val(id))?;
        Ok(())
    }

    /// True if `id` is one of [`Machine::push_constant`]'s shared values.
    fn is_constant(&self, id: Id) -> bool {
        let slot = match self.cell(id) {
            Cell::Int(v) => match v.get() {
                v @ 0..=255 => v as usize,
                _ => return false,
            },
            Cell::Bool(false) => FALSE,
            Cell::Bool(true) => TRUE,
            Cell::Tuple(EMPTY) => EMPTY_TUPLE,
            _ => return false,
        };
        self.constants[slot] == id
    }

    /// Runs one opcode; returns the root at `STOP`.
    fn step(&mut self, op: u8) -> Result<Option<Id>> {
        match op {
            0x80 => {
                let proto = self.byte()?;
                if proto > 5 {
                    return Err(err(PickleError::Protocol(proto)));
                }
            }
            // FRAME: a length hint; frames are read as one stream.
            0x95 => {
                self.u64()?;
            }
            b'.' => return self.pop().map(Some),
            b'(' => {
                if self.marks >= self.limits.marks {
                    return Err(err(PickleError::MarksLimit(self.limits.marks as u64)));
                }
                self.marks += 1;
                self.push(Slot::Mark)?;
            }
            b'0' => {
                self.pop()?;
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let id = self.top()?;
                self.push(Slot::Val(id))?;
            }
            b'N' => self.push_node(Cell::None)?,
            // Protocols 0 and 1 (`torch.save(..., pickle_protocol=1)`):
            // numbers, strings, memo keys and persistent ids as text lines.
            b'I' => {
                let line = self.text_line()?;
                let node = match line {
                    b"00" => Cell::Bool(false),
                    b"01" => Cell::Bool(true),
                    _ => parse_decimal(line)?.map_or(Cell::BigInt, Cell::int),
                };
                self.push_node(node)?
            }
            b'L' => {
                let v = self.decimal()?;
                self.push_node(v.map_or(Cell::BigInt, Cell::int))?
            }
            b'F' => {
                let line = self.text_line()?;
                let v = std::str::from_utf8(line)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| err(PickleError::FloatNotNumber))?;
                self.push_node(Cell::float(v))?
            }
            b'V' => {
                let s = self.unicode_line()?;
                let cell = self.str_cell(&s)?;
                self.budget.release(s.capacity());
                self.push_node(cell)?
            }
            b'P' => {
                let pid = self.text_persistent_id()?;
                self.push_node(Cell::Persistent(pid))?
            }
            b'p' => {
                let k = self.memo_key()?;
                self.memo_put(k)?
            }
            b'g' => {
                let k = self.memo_key()?;
                self.memo_get(k)?
            }
            0x88 => self.push_constant(TRUE, Cell::Bool(true))?,
            0x89 => self.push_constant(FALSE, Cell::Bool(false))?,
            b'J' => {
                let v = self.u32()? as i32;
                self.push_node(Cell::int(v.into()))?
            }
            b'K' => {
                let v = self.byte()?;
                self.push_constant(v.into(), Cell::int(v.into()))?
            }
            b'M' => {
                let v = self.u16()?;
                self.push_node(Cell::int(v.into()))?
            }
            0x8a => {
                let n = self.byte()?;
                self.long(n.into())?
            }
            0x8b => {
                let n = self.u32()? as i32;
                let n = u64::try_from(n).map_err(|_| err(PickleError::NegativeLong4))?;
                self.long(n)?
            }
            b'G' => {
                let v = f64::from_be_bytes(self.take(8)?.try_into().expect("8"));
                self.push_node(Cell::float(v))?
            }
            b'X' | 0x8c | 0x8d => {
                let n = match op {
                    b'X' => self.u32()?.into(),
                    0x8c => self.byte()?.into(),
                    _ => self.u64()?,
                };
                let raw = self.sized(n)?;
                let s = std::str::from_utf8(raw).map_err(|_| err(PickleError::StrNotUtf8))?;
                let cell = self.str_cell(s)?;
                self.push_node(cell)?
            }
            // Protocol 2's byte strings (STRING family) decode as latin1
            // text here, as torch loads them with `encoding="latin1"`.
            b'T' | b'U' => {
                let n = if op == b'T' {
                    self.u32()?.into()
                } else {
                    self.byte()?.into()
                };
                let raw = self.sized(n)?;
                // As UTF-8, each byte at most two, for a moment.
                let copy = 2 * raw.len();
                self.budget.charge(copy, "strings and bytes")?;
                let s: String = raw.iter().map(|&b| b as char).collect();
                let cell = self.str_cell(&s)?;
                self.budget.release(copy);
                self.push_node(cell)?
            }
            b'B' | b'C' | 0x8e | 0x96 => {
                let n = match op {
                    b'B' => self.u32()?.into(),
                    b'C' => self.byte()?.into(),
                    _ => self.u64()?,
                };
                let b = self.sized(n)?;
                let cell = self.bytes_cell(b)?;
                self.push_node(cell)?
            }
            b']' => self.push_node(Cell::List(NO_SIDE))?,
            b'l' => {
                let items = self.pop_mark()?;
                let list = Cell::List(self.seq(items)?);
                self.push_node(list)?
            }
            // Tuples never change: one empty tuple serves them all.
            b')' => self.push_constant(EMPTY_TUPLE, Cell::Tuple(EMPTY))?,
            b't' => {
                let items = self.pop_mark()?;
                let tuple = self.tuple_cell(&items)?;
                self.budget.release(items.len() * ID);
                self.push_node(tuple)?
            }
            0x85 => self.tuple_of(1)?,
            0x86 => self.tuple_of(2)?,
            0x87 => self.tuple_of(3)?,
            b'}' => self.push_node(Cell::Dict(NO_SIDE))?,
            b'd' => {
                let items = self.pop_mark()?;
                let dict = self.alloc(Cell::Dict(NO_SIDE))?;
                self.set_items(dict, &items)?;
                self.budget.release(items.len() * ID);
                self.push(Slot::Val(dict))?;
            }
            0x8f => self.push_node(Cell::Set(NO_SIDE))?,
            0x91 => {
                let items = self.pop_mark()?;
                let set = Cell::Set(self.seq(items)?);
                self.push_node(set)?
            }
            0x90 => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.add_items(target, &items)?;
                self.budget.release(items.len() * ID);
            }
            b'a' => {
                let v = self.pop()?;
                let target = self.top()?;
                self.append(target, &[v])?
            }
            b'e' => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.append(target, &items)?;
                self.budget.release(items.len() * ID);
            }
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                let target = self.top()?;
                self.set_items(target, &[k, v])?
            }
            b'u' => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.set_items(target, &items)?;
                self.budget.release(items.len() * ID);
            }
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.global(&module, &name)?
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                match (self.out.get(module), self.out.get(name)) {
                    (Node::Str(m), Node::Str(n)) => {
                        let copy = m.len() + n.len();
                        self.budget.charge(copy, "global names")?;
                        let (m, n) = (m.to_string(), n.to_string());
                        self.global(&m, &n)?;
                        self.budget.release(copy);
                    }
                    _ => return Err(err(PickleError::StackGlobalArgs)),
                }
            }
            b'R' | 0x81 => self.reduce()?,
            b'b' => self.build()?,
            b'Q' => {
                let pid = self.pop()?;
                self.push_node(Cell::Persistent(pid))?
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
                let k =
                    u32::try_from(self.memo.len()).map_err(|_| err(PickleError::MemoOverflow))?;
                self.memo_put(k)?
            }
            other => return Err(err(PickleError::UnknownOpcode(other))),
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
        assert!(
            matches!(
                e.kind(),
                ErrorKind::Pickle(PickleError::SetItemNotDict("a list"))
            ),
            "{e}"
        );
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
    fn every_global_keeps_its_name_in_two_bytes() {
        let named = STORAGES
            .iter()
            .map(|s| Global::Storage(s))
            .chain(DTYPES.iter().map(|s| Global::Dtype(s)))
            .chain(LAYOUTS.iter().map(|s| Global::Layout(s)))
            .chain(
                REFUSED_TENSORS
                    .iter()
                    .map(|(_, w)| Global::RefusedTensor(w)),
            );
        for g in named.chain(PLAIN.iter().copied()) {
            assert_eq!(Global::from_code(g.code()), g);
        }
    }

    #[test]
    fn pools_keep_slices_whole_across_chunks() {
        let mut pool: Pool<u32> = Pool::default();
        let small: Vec<u32> = (0..1000).collect();
        let big: Vec<u32> = (0..(CHUNK as u32 * 2 + 5)).collect();
        let mut spans = Vec::new();
        for items in [&small, &big, &small, &big, &small] {
            let at = pool.push(items).unwrap();
            spans.push((
                Span {
                    at,
                    len: items.len() as u32,
                },
                items,
            ));
        }
        for _ in 0..CHUNK {
            pool.push(&[7]).unwrap();
        }
        for (span, items) in spans {
            assert_eq!(pool.slice(span), &items[..]);
        }
        assert_eq!(pool.slice(EMPTY), &[] as &[u32]);
    }

    #[test]
    fn mutable_containers_fill_after_they_are_built() {
        // d = {}; l = []; s = set(); d[1] = l; l.append(2); s.add(3) ; (d, l, s)
        let v = run(b"\x80\x04}q\x00]q\x01\x8fq\x02h\x00K\x01h\x01sh\x01K\x02ah\x02(K\x03\x90h\x00h\x01h\x02\x87.").unwrap();
        let Node::Tuple(&[d, l, s]) = v.get(v.root) else {
            panic!("{:?}", v.get(v.root))
        };
        assert!(matches!(v.get(d), Node::Dict(&[(k, x)]) if v.get(k) == Node::Int(1) && x == l));
        assert!(matches!(v.get(l), Node::List(&[x]) if v.get(x) == Node::Int(2)));
        assert!(matches!(v.get(s), Node::Set(&[x]) if v.get(x) == Node::Int(3)));
    }

    #[test]
    fn longs_sign_extend() {
        let v = run(b"\x8a\x02\xff\xff.").unwrap();
        assert_eq!(v.get(v.root), Node::Int(-1));
        let v = run(b"\x8a\x02\xff\x00.").unwrap();
        assert_eq!(v.get(v.root), Node::Int(255));
    }
}
