//! The globals a pickle may name, and nothing else: Python's `pickle`
//! imports whatever a `GLOBAL` names, which is how a checkpoint runs
//! `os.system`; here a name is looked up in an [`Allow`] table and refused
//! by name when it is not there.
//!
//! Two kinds of names are allowed. [`Global`]s are the torch and Python
//! names a checkpoint uses, each with a meaning the machine or the
//! tensor walk knows (`torch.Size()` builds a tuple, `_rebuild_tensor_v2`
//! is recorded for the walk). [`Class`]es are a caller's own: a class
//! whose instances are plain records (a dataclass, an enum), built as
//! [`Node::Object`](super::Node::Object) values and never constructed.
//! A reader of another pickle (a distributed checkpoint's `.metadata`)
//! passes its table to [`unpickle_with`](super::unpickle_with).
//!
//! In the arena a global is two bytes ([`Code`]): its kind and its place
//! in the list or table it came from.

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
    /// A class of the caller's [`Allow::classes`]: called (`REDUCE`,
    /// `NEWOBJ`), it builds a [`Node::Object`](super::Node::Object).
    Class(Class),
}

/// A class whose instances a pickle may hold as plain records, as the
/// pickle spells it: module and name (`torch.distributed.checkpoint.metadata`,
/// `Metadata`). Nothing of it is imported or run; an instance is its
/// class, its constructor's arguments and the state `BUILD` gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Class {
    /// The module it is in.
    pub module: &'static str,
    /// Its name there.
    pub name: &'static str,
}

impl Class {
    /// `module.name`.
    pub const fn new(module: &'static str, name: &'static str) -> Class {
        Class { module, name }
    }
}

/// What one kind of pickle may name; every other global is refused with
/// its name. A checkpoint's is [`Allow::CHECKPOINT`]; another reader
/// builds its own, usually from torch's globals it needs (dtypes,
/// `torch.Size`) and its own record classes:
///
/// ```
/// use safetensors_stream::internals::pickle::{Allow, Class, Global};
///
/// const RECORDS: &[Class] = &[Class::new("mod", "Record")];
/// // torch's dtypes and `torch.Size`, and no tensor rebuild call.
/// fn values(module: &str, name: &str) -> Option<Global> {
///     Global::lookup(module, name).filter(|g| matches!(g, Global::Dtype(_) | Global::Size))
/// }
/// let allow = Allow { globals: values, classes: RECORDS };
/// assert_eq!(allow.lookup("mod", "Record"), Some(Global::Class(RECORDS[0])));
/// assert_eq!(allow.lookup("torch", "float16"), Some(Global::Dtype("float16")));
/// assert_eq!(allow.lookup("torch._utils", "_rebuild_tensor_v2"), None);
/// assert_eq!(allow.lookup("posix", "system"), None);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Allow {
    /// The torch and Python globals allowed, with their meaning:
    /// [`Global::lookup`] for all a checkpoint uses, or a function that
    /// narrows it.
    pub globals: fn(&str, &str) -> Option<Global>,
    /// Classes built as records. Only the first [`MAX_CLASSES`] count: a
    /// global is two bytes in the arena.
    pub classes: &'static [Class],
}

/// How many of [`Allow::classes`] a table may list.
pub const MAX_CLASSES: usize = 256;

impl Allow {
    /// What a PyTorch checkpoint (`torch.save`) may name: torch's tensor,
    /// storage and dtype globals and the few builtins it pickles; no class.
    pub const CHECKPOINT: Allow = Allow {
        globals: Global::lookup,
        classes: &[],
    };

    /// Looks `module.name` up: a class of the table, else one of its globals.
    pub fn lookup(&self, module: &str, name: &str) -> Option<Global> {
        let classes = &self.classes[..self.classes.len().min(MAX_CLASSES)];
        match classes
            .iter()
            .find(|c| c.module == module && c.name == name)
        {
            Some(&c) => Some(Global::Class(c)),
            None => (self.globals)(module, name),
        }
    }
}

pub(super) const STORAGES: &[&str] = &[
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

pub(super) const DTYPES: &[&str] = &[
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

pub(super) const LAYOUTS: &[&str] = &[
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

pub(super) const REFUSED_TENSORS: &[(&str, &str)] = &[
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

/// A [`Global`] in two bytes: its kind and, for the named ones, its place
/// in the list it came from ([`STORAGES`], [`DTYPES`]..., the table's classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Code(u8, u8);

/// The lists the named globals come from, by [`Code`] kind.
const NAMED: [&[&str]; 3] = [STORAGES, DTYPES, LAYOUTS];

/// [`Code`]'s kind of a [`Global::Class`].
const CLASS: u8 = 5;

impl Global {
    /// Its code; a class's place is in `classes`, the table it came from.
    pub(super) fn code(self, classes: &[Class]) -> Code {
        let at = |list: &[&str], s: &str| list.iter().position(|x| *x == s).unwrap_or(0) as u8;
        match self {
            Global::Class(c) => Code(
                CLASS,
                classes.iter().position(|x| *x == c).unwrap_or(0) as u8,
            ),
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

    /// The global `code` stands for; a class's, in `classes`.
    pub(super) fn from_code(Code(kind, i): Code, classes: &[Class]) -> Global {
        let i = usize::from(i);
        match kind {
            CLASS => Global::Class(classes[i]),
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
pub(super) const PLAIN: &[Global] = &[
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_global_keeps_its_name_in_two_bytes() {
        const CLASSES: &[Class] = &[Class::new("m", "A"), Class::new("m", "B")];
        let named = STORAGES
            .iter()
            .map(|s| Global::Storage(s))
            .chain(DTYPES.iter().map(|s| Global::Dtype(s)))
            .chain(LAYOUTS.iter().map(|s| Global::Layout(s)))
            .chain(
                REFUSED_TENSORS
                    .iter()
                    .map(|(_, w)| Global::RefusedTensor(w)),
            )
            .chain(CLASSES.iter().map(|&c| Global::Class(c)));
        for g in named.chain(PLAIN.iter().copied()) {
            assert_eq!(Global::from_code(g.code(CLASSES), CLASSES), g);
        }
    }
}
