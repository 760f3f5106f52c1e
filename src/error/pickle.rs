//! What can be wrong with a PyTorch checkpoint: its pickle (a broken or
//! hostile opcode stream, a limit broken, a global refused, a budget
//! spent) or the checkpoint built from it (storages, tensor rebuild calls,
//! the archive's members, a view expanded past its storage). Each enum
//! names and categorises its errors ([`PickleError::name`],
//! [`PyTorchError::name`]): the few that were kinds of their own keep
//! their names (`pickle_global`, `pickle_budget`, `expanded_view`) and
//! their words. Names from the file are quoted with escapes (`{:?}`).

use super::Category;

/// A pickle that is malformed, breaks a limit, or applies an opcode to a
/// value of the wrong type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PickleError {
    // ---- the opcode stream ----------------------------------------------------
    /// The bytes end inside an opcode or its argument.
    #[error("pickle ends inside an opcode")]
    Truncated,
    /// An opcode no checkpoint uses.
    #[error("opcode 0x{0:02x} is not one a checkpoint uses: refused")]
    UnknownOpcode(u8),
    /// A PROTO newer than 5.
    #[error("pickle protocol {0} is not supported")]
    Protocol(u8),
    /// A GLOBAL whose module or name line is too long or unterminated.
    #[error("GLOBAL name is not a short line")]
    GlobalLine,
    /// STACK_GLOBAL over something other than two strs.
    #[error("STACK_GLOBAL needs two strs")]
    StackGlobalArgs,
    /// A length that does not fit this machine's memory.
    #[error("length does not fit memory")]
    LengthTooLarge,
    /// A LONG4 whose length is negative.
    #[error("LONG4 with a negative length")]
    NegativeLong4,

    // ---- text arguments ---------------------------------------------------------
    /// A protocol-0 number that is not ASCII.
    #[error("a number is not ASCII")]
    NumberNotAscii,
    /// A protocol-0 number that is not decimal digits.
    #[error("{0:?} is not a decimal number")]
    NotDecimal(String),
    /// A FLOAT whose text is not a number.
    #[error("FLOAT is not a number")]
    FloatNotNumber,
    /// A str that is not UTF-8.
    #[error("a str is not valid UTF-8")]
    StrNotUtf8,
    /// A protocol-0 UNICODE string with a malformed `\u` escape.
    #[error("a bad \\u escape in a UNICODE string")]
    UnicodeEscape,
    /// A protocol-0 persistent id that is not text.
    #[error("PERSID is not text")]
    PersidNotText,
    /// A protocol-0 persistent id that does not name a torch storage.
    #[error("a protocol-0 persistent id that is not a torch storage")]
    PersidNotStorage,
    /// `_codecs.encode` without a str and an encoding.
    #[error("_codecs.encode needs a str and an encoding")]
    CodecsArgs,
    /// `_codecs.encode` to an encoding other than latin1.
    #[error("_codecs.encode with encoding {0:?}")]
    CodecsEncoding(String),
    /// latin1 text with a character latin1 has not.
    #[error("latin1 text above U+00FF")]
    NotLatin1,

    // ---- the stack and the memo ------------------------------------------------
    /// An opcode that pops more than the stack holds.
    #[error("stack underflow")]
    StackUnderflow,
    /// A value popped where a MARK lies.
    #[error("a value was expected but the stack holds a MARK")]
    MarkNotValue,
    /// An opcode that needs a MARK, and none is on the stack.
    #[error("no MARK on the stack")]
    NoMark,
    /// A memo key beyond what a position can address.
    #[error("memo key out of range")]
    MemoKeyRange,
    /// A GET of a memo key no PUT stored.
    #[error("memo key {0} was never stored")]
    MemoKeyNeverStored(u64),
    /// MEMOIZE past the memo's addressable size.
    #[error("memo overflow")]
    MemoOverflow,

    // ---- values of the wrong type -------------------------------------------------
    /// SETITEMS over an odd number of values.
    #[error("SETITEMS with an odd number of values")]
    SetItemsOdd,
    /// SETITEM(S) on a value that is not a dict.
    #[error("SETITEM on {0}, which is not a dict")]
    SetItemNotDict(&'static str),
    /// APPEND(S) or ADDITEMS on a value that is not a list or set.
    #[error("{op} on {kind}, which is not {expected}")]
    NotContainer {
        /// The opcode ("APPEND", "ADDITEMS").
        op: &'static str,
        /// What the value is.
        kind: &'static str,
        /// What the opcode needs ("a list", "a set").
        expected: &'static str,
    },
    /// A global not on the allow-list: refused by name, nothing was
    /// imported or run. Said without the `pickle: ` prefix (its words name
    /// the pickle).
    #[error("pickle imports {module}.{name}, which is not allowed in a checkpoint (nothing was run){}", module_hint(.module))]
    Global {
        /// The module it names (`posix`, `builtins`, `__main__`).
        module: String,
        /// The name in that module (`system`, `eval`, `Net`).
        name: String,
    },
    /// REDUCE of something other than an allowed global.
    #[error("REDUCE calls {0}, not an allowed global")]
    ReduceNotGlobal(&'static str),
    /// REDUCE whose arguments are not a tuple.
    #[error("REDUCE arguments are not a tuple")]
    ReduceArgs,
    /// `set()` of something other than a list.
    #[error("set() of something that is not a list")]
    SetArg,
    /// `torch.Size` of something other than a tuple.
    #[error("torch.Size of something that is not a tuple")]
    SizeArg,
    /// `bytearray` of something other than bytes.
    #[error("bytearray of something that is not bytes")]
    ByteArrayArg,
    /// An allowed global that may not be called where it is (its debug
    /// spelling, as the reader names it).
    #[error("{0} is not callable here")]
    NotCallable(String),
    /// BUILD on a value it cannot set state on.
    #[error("BUILD on {0}")]
    BuildOn(&'static str),

    // ---- limits -------------------------------------------------------------------
    /// More bytes of values (strings, containers, names, copies; a shared
    /// value counted each time it is used) than the pickle's budget (twice
    /// its size plus 48 MiB): a memory bomb, refused before it is built.
    /// Said without the `pickle: ` prefix.
    #[error(
        "pickle would build more than its budget of {limit} bytes of values ({what}): refused"
    )]
    Budget {
        /// The budget, in bytes.
        limit: u64,
        /// What was being built when it ran out.
        what: &'static str,
    },
    /// More bytes of strings and bytes than the limit.
    #[error("strings and bytes exceed the limit of {0} bytes")]
    BytesLimit(u64),
    /// More values than the limit.
    #[error("more than {0} values: refused")]
    ValuesLimit(u64),
    /// More memo entries than the limit.
    #[error("more than {0} memo entries: refused")]
    MemoLimit(u64),
    /// MARKs nested deeper than the limit.
    #[error("more than {0} nested MARKs: refused")]
    MarksLimit(u64),
    /// More values than 32-bit positions address.
    #[error("more values than 32-bit positions address: refused")]
    Positions,
    /// More values visited through shared references than the limit.
    #[error("more than {0} values reached through shared references: refused")]
    VisitsLimit(u64),
    /// Values nested deeper than the limit.
    #[error("values nested deeper than {0}: refused")]
    DepthLimit(u64),
}

/// Advice for a refused global that is a whole pickled model.
fn module_hint(module: &str) -> &'static str {
    if module == "__main__" || module.starts_with("torch.nn.modules") {
        "; a whole pickled model: save its state_dict() instead"
    } else {
        ""
    }
}

impl PickleError {
    /// The error's name in reports: `pickle`, or `pickle_global` and
    /// `pickle_budget`, as those were named when they were kinds of their own.
    pub fn name(&self) -> &'static str {
        match self {
            PickleError::Global { .. } => "pickle_global",
            PickleError::Budget { .. } => "pickle_budget",
            _ => "pickle",
        }
    }

    /// Every pickle error is bad input.
    pub fn category(&self) -> Category {
        Category::BadInput
    }

    /// What [`ErrorKind::Pickle`](super::ErrorKind::Pickle) says before
    /// the error's words: nothing for the two whose words name the pickle.
    pub(super) fn prefix(&self) -> &'static str {
        match self {
            PickleError::Global { .. } | PickleError::Budget { .. } => "",
            _ => "pickle: ",
        }
    }
}

/// A PyTorch checkpoint that breaks its format's rules, or is valid and
/// holds something this reader does not convert.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PyTorchError {
    // ---- the container -----------------------------------------------------------
    /// The pre-0.4 tar format.
    #[error("a tar archive (the format of torch before 0.4) is not supported: load it and save it again with a recent torch")]
    TarArchive,
    /// A TorchScript archive, not a state dict.
    #[error("a TorchScript archive (constants.pkl, code/): load it with torch.jit.load and save its state_dict()")]
    TorchScript,
    /// Not exactly one `data.pkl` member.
    #[error("{0} data.pkl members; a checkpoint has one")]
    DataPklCount(usize),
    /// A member read whole that is larger than the limit.
    #[error("member {member:?} is {size} bytes; more than the {limit} we read")]
    MemberTooLarge {
        /// The member.
        member: String,
        /// Its uncompressed size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A `byteorder` member that is neither `little` nor `big`.
    #[error("byteorder is {0:?}, not little or big")]
    Byteorder(String),
    /// A storage member that is compressed.
    #[error(
        "storage member {0:?} is compressed; torch.save stores them (unzip and re-zip with -0)"
    )]
    CompressedStorage(String),
    /// A legacy checkpoint whose first pickle is not the magic number.
    #[error("legacy magic number missing")]
    LegacyMagic,
    /// A legacy checkpoint of another protocol version.
    #[error("legacy protocol version is not 1001")]
    LegacyVersion,
    /// A legacy checkpoint's storage key list that is not a list.
    #[error("storage key list is not a list")]
    KeyListNotList,
    /// A legacy checkpoint's storage key list holding a non-string.
    #[error("a storage key is not a string")]
    KeyListItemNotString,

    // ---- storages ------------------------------------------------------------------
    /// A storage listed twice in the file.
    #[error("storage {0} is listed twice")]
    ListedTwice(String),
    /// The storages' keys, together, past what the table of storages
    /// addresses.
    #[error("the storages' keys take {0} bytes, more than 4 GiB")]
    StorageKeys(u64),
    /// A storage the pickle declares and the file lacks.
    #[error("storage {0} is not in the file")]
    NotInFile(String),
    /// A storage the file lists and the pickle never declares.
    #[error("storage {0} is listed but the pickle never declares it")]
    NeverDeclared(String),
    /// The file ends before a legacy storage's element count.
    #[error("file ends before storage {0}")]
    EndsBeforeStorage(String),
    /// A storage whose bytes run past the end of the file.
    #[error("storage {0} runs past the end of the file")]
    StoragePastEnd(String),
    /// A legacy storage whose count is not its tensors'.
    #[error("storage {key} holds {count} elements but its tensors declare {declared}")]
    StorageCount {
        /// The storage.
        key: String,
        /// Elements the file records.
        count: u64,
        /// Elements its tensors declare.
        declared: u64,
    },
    /// A storage whose bytes in the file are not what the pickle declares.
    #[error("storage {key} is {bytes} bytes in the file but {numel} elements of {elem} bytes in the pickle")]
    StorageSize {
        /// The storage.
        key: String,
        /// Its bytes in the file.
        bytes: u64,
        /// Elements the pickle declares.
        numel: u64,
        /// Bytes per element.
        elem: u64,
    },
    /// A storage whose size in bytes overflows 64 bits.
    #[error("storage {0} size overflows")]
    StorageOverflow(String),
    /// A storage declared with two different types or sizes.
    #[error("storage {key} is declared twice, as {first} and as {second}")]
    DeclaredTwice {
        /// The storage.
        key: String,
        /// The first declaration.
        first: StorageShape,
        /// The second.
        second: StorageShape,
    },
    /// A tensor's storage argument that is not a persistent id.
    #[error("tensor storage is not a persistent id")]
    StorageNotPersistent,
    /// A persistent id that is not a tuple.
    #[error("storage persistent id is not a tuple")]
    PersistentIdNotTuple,
    /// A persistent id that is not `('storage', ...)`.
    #[error("persistent id is not a storage")]
    PersistentIdNotStorage,
    /// A storage type that is not a storage class.
    #[error("storage type is not a storage class")]
    StorageTypeNotClass,
    /// A storage key that is not a string.
    #[error("storage key is not a string")]
    StorageKeyNotString,
    /// A storage location that is not a string.
    #[error("storage location is not a string")]
    LocationNotString,
    /// A storage on a device other than the CPU, CUDA and MPS.
    #[error("storage on device {0:?} is not supported")]
    Device(String),
    /// A storage declared with legacy view metadata.
    #[error("a legacy storage view is not supported")]
    LegacyView,
    /// A quantized storage class.
    #[error("quantized storage torch.{0}")]
    QuantizedStorage(String),

    // ---- tensors ---------------------------------------------------------------------
    /// A tensor rebuild call whose arguments are not a tuple.
    #[error("tensor arguments are not a tuple")]
    ArgsNotTuple,
    /// An integer argument that is negative.
    #[error("{what} is negative ({value})")]
    Negative {
        /// The argument ("storage_offset", "size").
        what: &'static str,
        /// Its value.
        value: i64,
    },
    /// An integer argument that is something else.
    #[error("{0} is not an integer")]
    NotInteger(&'static str),
    /// A tuple argument that is something else.
    #[error("{0} is not a tuple")]
    NotTuple(&'static str),
    /// Parameters wrapping parameters, too deep.
    #[error("parameters wrapped too deeply")]
    WrappedTooDeeply,
    /// A tensor kind refused (sparse, quantized, ...).
    #[error("{0} is not supported")]
    Unsupported(&'static str),
    /// A parameter without its data argument.
    #[error("a parameter without data")]
    ParameterWithoutData,
    /// A parameter whose data is not a tensor.
    #[error("a parameter whose data is not a tensor")]
    ParameterDataNotTensor,
    /// `_rebuild_from_type_v2` with too few arguments.
    #[error("_rebuild_from_type_v2 needs 4 arguments")]
    FromTypeArgs,
    /// A tensor subclass.
    #[error("a tensor subclass is not supported")]
    Subclass,
    /// `_rebuild_from_type_v2` of something that is not a function.
    #[error("_rebuild_from_type_v2 of something not a function")]
    FromTypeNotFunction,
    /// A value in a tensor's place that is not one.
    #[error("not a tensor")]
    NotATensor,
    /// `_rebuild_tensor_v3` without its dtype argument.
    #[error("_rebuild_tensor_v3 without a dtype")]
    V3WithoutDtype,
    /// A tensor over an untyped storage, with no dtype of its own.
    #[error("an untyped storage without a dtype")]
    UntypedWithoutDtype,
    /// A torch dtype with no safetensors twin.
    #[error("torch.{0} has no safetensors dtype")]
    NoSafetensorsDtype(String),
    /// A quantized torch dtype.
    #[error("quantized dtype torch.{0}")]
    QuantizedDtype(String),
    /// A tensor with its conjugate or negative bit set.
    #[error("the {0} bit is set (call .resolve_{0}() before saving)")]
    BitSet(String),
    /// A size and a stride of different lengths.
    #[error("size has {size} dims but stride has {stride}")]
    StrideDims {
        /// Dimensions of the size.
        size: usize,
        /// Dimensions of the stride.
        stride: usize,
    },
    /// A view whose extent overflows 64 bits.
    #[error("view size overflows 64 bits")]
    ViewOverflow,
    /// A view reaching past its storage.
    #[error("view reaches byte {needed} of storage {key}, which has {len}")]
    ViewPastStorage {
        /// Bytes the view reaches.
        needed: u64,
        /// The storage.
        key: String,
        /// Its bytes.
        len: u64,
    },
    /// A tensor whose byte size overflows 64 bits.
    #[error("tensor size overflows 64 bits")]
    TensorOverflow,
    /// A tensor view that reaches more bytes than its storage holds many
    /// times over (a stride-0 expansion): refused unless expanded views are
    /// allowed. Said without the `PyTorch checkpoint: ` prefix.
    #[error("tensor is {tensor_bytes} bytes but views a storage of {storage_bytes}: expanded beyond {factor}x its storage (expansion-ratio) and past {allowance} bytes (expanded-view-bytes); pass --allow-expanded-views to write it, or raise the limit (--limit expanded-view-bytes={tensor_bytes})")]
    ExpandedView {
        /// Bytes the tensor would write.
        tensor_bytes: u64,
        /// Bytes of its storage.
        storage_bytes: u64,
        /// The factor allowed.
        factor: u64,
        /// Bytes a view may have whatever its factor.
        allowance: u64,
    },
    /// A checkpoint whose tensors add up to many times its storage.
    #[error("its tensors add up to {planned} bytes, more than {factor}x its {stored} bytes of storage (expansion-ratio) and than {allowance} bytes (expanded-file-bytes); pass --allow-expanded-views to write them, or raise the limit (--limit expanded-file-bytes={planned})")]
    Expanded {
        /// Bytes the tensors would write.
        planned: u64,
        /// The factor allowed.
        factor: u64,
        /// Bytes of storage.
        stored: u64,
        /// Bytes the tensors may add up to whatever their factor.
        allowance: u64,
    },

    // ---- naming ------------------------------------------------------------------------
    /// `--pt-root` names a key that is not there.
    #[error("--pt-root {root:?}: no key {part:?} there")]
    RootMissing {
        /// The root asked for.
        root: String,
        /// The part of it not found.
        part: String,
    },
    /// `--pt-root` names a leaf value, not tensors.
    #[error("--pt-root {root:?} holds {what}, not tensors")]
    RootLeaf {
        /// The root asked for.
        root: String,
        /// What it holds, described ("an int (3)").
        what: String,
    },
    /// A tensor where no name reaches it (a dict key, an object's arguments).
    #[error("a tensor {place} in {at:?}: no name reaches it, refused rather than dropped")]
    Unnamed {
        /// Where it is ("used as a dict key").
        place: &'static str,
        /// The name of the value it is in ("the top level" at the root).
        at: String,
    },
    /// A tensor whose name would be empty.
    #[error("a tensor under an empty key: its name would be empty (pass --pt-root or --name)")]
    EmptyName,
}

impl PyTorchError {
    /// The error's name in reports: `py_torch` (strum's snake case of the
    /// kind `PyTorch`, as reports have always said it), or `expanded_view`,
    /// as it was named when it was a kind of its own.
    pub fn name(&self) -> &'static str {
        match self {
            PyTorchError::ExpandedView { .. } => "expanded_view",
            _ => "py_torch",
        }
    }

    /// Every PyTorch checkpoint error is bad input.
    pub fn category(&self) -> Category {
        Category::BadInput
    }

    /// What [`ErrorKind::PyTorch`](super::ErrorKind::PyTorch) says before
    /// the error's words: nothing for an expanded view, whose words name
    /// the tensor.
    pub(super) fn prefix(&self) -> &'static str {
        match self {
            PyTorchError::ExpandedView { .. } => "",
            _ => "PyTorch checkpoint: ",
        }
    }
}

/// A storage as one declaration gives it: a count of typed elements or of
/// untyped bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageShape {
    /// Elements (bytes, if untyped).
    pub numel: u64,
    /// Their dtype; `None` for an untyped storage.
    pub dtype: Option<crate::Dtype>,
}

impl std::fmt::Display for StorageShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.dtype {
            Some(t) => write!(f, "{} elements of {t}", self.numel),
            None => write!(f, "{} untyped bytes", self.numel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dtype;

    /// The words are the ones the reader wrote before its errors had kinds.
    #[test]
    fn pickle_messages_say_what_they_said_as_text() {
        let cases: Vec<(PickleError, &str)> = vec![
            (
                PickleError::UnknownOpcode(0xfe),
                "opcode 0xfe is not one a checkpoint uses: refused",
            ),
            (
                PickleError::UnknownOpcode(0x0a),
                "opcode 0x0a is not one a checkpoint uses: refused",
            ),
            (
                PickleError::Protocol(6),
                "pickle protocol 6 is not supported",
            ),
            (
                PickleError::NotDecimal("1x".into()),
                "\"1x\" is not a decimal number",
            ),
            (
                PickleError::CodecsEncoding("utf-8".into()),
                "_codecs.encode with encoding \"utf-8\"",
            ),
            (
                PickleError::MemoKeyNeverStored(7),
                "memo key 7 was never stored",
            ),
            (
                PickleError::SetItemNotDict("a list"),
                "SETITEM on a list, which is not a dict",
            ),
            (
                PickleError::NotContainer {
                    op: "APPEND",
                    kind: "a dict",
                    expected: "a list",
                },
                "APPEND on a dict, which is not a list",
            ),
            (
                PickleError::ReduceNotGlobal("an int"),
                "REDUCE calls an int, not an allowed global",
            ),
            (
                PickleError::NotCallable("Size".into()),
                "Size is not callable here",
            ),
            (PickleError::BuildOn("a str"), "BUILD on a str"),
            (
                PickleError::BytesLimit(100),
                "strings and bytes exceed the limit of 100 bytes",
            ),
            (PickleError::ValuesLimit(9), "more than 9 values: refused"),
            (
                PickleError::MemoLimit(9),
                "more than 9 memo entries: refused",
            ),
            (
                PickleError::MarksLimit(9),
                "more than 9 nested MARKs: refused",
            ),
            (
                PickleError::VisitsLimit(4_000_000),
                "more than 4000000 values reached through shared references: refused",
            ),
            (
                PickleError::DepthLimit(256),
                "values nested deeper than 256: refused",
            ),
            (PickleError::Truncated, "pickle ends inside an opcode"),
            (
                PickleError::UnicodeEscape,
                "a bad \\u escape in a UNICODE string",
            ),
        ];
        for (e, words) in cases {
            assert_eq!(e.to_string(), words);
        }
    }

    #[test]
    fn pytorch_messages_say_what_they_said_as_text() {
        let k = || "0".to_string();
        let cases: Vec<(PyTorchError, &str)> =
            vec![
            (
                PyTorchError::DataPklCount(2),
                "2 data.pkl members; a checkpoint has one",
            ),
            (
                PyTorchError::MemberTooLarge {
                    member: "a/byteorder".into(),
                    size: 5000,
                    limit: 4096,
                },
                "member \"a/byteorder\" is 5000 bytes; more than the 4096 we read",
            ),
            (
                PyTorchError::Byteorder("middle".into()),
                "byteorder is \"middle\", not little or big",
            ),
            (
                PyTorchError::CompressedStorage("a/data/0".into()),
                "storage member \"a/data/0\" is compressed; torch.save stores them (unzip and \
                 re-zip with -0)",
            ),
            (PyTorchError::ListedTwice(k()), "storage 0 is listed twice"),
            (
                PyTorchError::StorageKeys(1 << 32),
                "the storages' keys take 4294967296 bytes, more than 4 GiB",
            ),
            (PyTorchError::NotInFile(k()), "storage 0 is not in the file"),
            (
                PyTorchError::NeverDeclared(k()),
                "storage 0 is listed but the pickle never declares it",
            ),
            (
                PyTorchError::EndsBeforeStorage(k()),
                "file ends before storage 0",
            ),
            (
                PyTorchError::StoragePastEnd(k()),
                "storage 0 runs past the end of the file",
            ),
            (
                PyTorchError::StorageCount {
                    key: k(),
                    count: 3,
                    declared: 4,
                },
                "storage 0 holds 3 elements but its tensors declare 4",
            ),
            (
                PyTorchError::StorageSize {
                    key: k(),
                    bytes: 12,
                    numel: 4,
                    elem: 4,
                },
                "storage 0 is 12 bytes in the file but 4 elements of 4 bytes in the pickle",
            ),
            (PyTorchError::StorageOverflow(k()), "storage 0 size overflows"),
            (
                PyTorchError::DeclaredTwice {
                    key: k(),
                    first: StorageShape {
                        numel: 4,
                        dtype: Some(Dtype::F32),
                    },
                    second: StorageShape {
                        numel: 16,
                        dtype: None,
                    },
                },
                "storage 0 is declared twice, as 4 elements of F32 and as 16 untyped bytes",
            ),
            (
                PyTorchError::Device("meta".into()),
                "storage on device \"meta\" is not supported",
            ),
            (
                PyTorchError::QuantizedStorage("QInt8Storage".into()),
                "quantized storage torch.QInt8Storage",
            ),
            (
                PyTorchError::Negative {
                    what: "storage_offset",
                    value: -1,
                },
                "storage_offset is negative (-1)",
            ),
            (PyTorchError::NotInteger("size"), "size is not an integer"),
            (PyTorchError::NotTuple("stride"), "stride is not a tuple"),
            (
                PyTorchError::Unsupported("a sparse COO tensor"),
                "a sparse COO tensor is not supported",
            ),
            (
                PyTorchError::NoSafetensorsDtype("complex128".into()),
                "torch.complex128 has no safetensors dtype",
            ),
            (
                PyTorchError::QuantizedDtype("qint8".into()),
                "quantized dtype torch.qint8",
            ),
            (
                PyTorchError::BitSet("conj".into()),
                "the conj bit is set (call .resolve_conj() before saving)",
            ),
            (
                PyTorchError::StrideDims { size: 2, stride: 1 },
                "size has 2 dims but stride has 1",
            ),
            (
                PyTorchError::ViewPastStorage {
                    needed: 40,
                    key: k(),
                    len: 16,
                },
                "view reaches byte 40 of storage 0, which has 16",
            ),
            (
                PyTorchError::Expanded {
                    planned: 1700,
                    factor: 16,
                    stored: 100,
                    allowance: 1000,
                },
                "its tensors add up to 1700 bytes, more than 16x its 100 bytes of storage \
                 (expansion-ratio) and than 1000 bytes (expanded-file-bytes); pass \
                 --allow-expanded-views to write them, or raise the limit (--limit \
                 expanded-file-bytes=1700)",
            ),
            (
                PyTorchError::RootMissing {
                    root: "model.enc".into(),
                    part: "enc".into(),
                },
                "--pt-root \"model.enc\": no key \"enc\" there",
            ),
            (
                PyTorchError::RootLeaf {
                    root: "epoch".into(),
                    what: "an int (3)".into(),
                },
                "--pt-root \"epoch\" holds an int (3), not tensors",
            ),
            (
                PyTorchError::Unnamed {
                    place: "used as a dict key",
                    at: "the top level".into(),
                },
                "a tensor used as a dict key in \"the top level\": no name reaches it, refused \
                 rather than dropped",
            ),
        ];
        for (e, words) in cases {
            assert_eq!(e.to_string(), words);
        }
    }

    #[test]
    fn outer_kinds_keep_their_names_and_the_inner_error_as_source() {
        let e = crate::Error::new(crate::ErrorKind::Pickle(PickleError::StackUnderflow));
        assert_eq!(e.kind().name(), "pickle");
        assert_eq!(e.to_string(), "pickle: stack underflow");
        let inner = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<PickleError>());
        assert_eq!(inner, Some(&PickleError::StackUnderflow));

        let e = crate::Error::new(crate::ErrorKind::PyTorch(PyTorchError::LegacyView));
        // strum's snake case of `PyTorch`, as reports have always said it.
        assert_eq!(e.kind().name(), "py_torch");
        assert_eq!(e.category(), crate::Category::BadInput);
        assert_eq!(
            e.to_string(),
            "PyTorch checkpoint: a legacy storage view is not supported"
        );
        let inner = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<PyTorchError>());
        assert_eq!(inner, Some(&PyTorchError::LegacyView));
    }

    /// The leaves that were kinds of their own keep their names and words
    /// (no prefix), and nest with the inner error as their source.
    #[test]
    fn former_kinds_keep_their_names_and_words() {
        use crate::{Category, Error, ErrorKind};
        let global = |module: &str| PickleError::Global {
            module: module.into(),
            name: "Net".into(),
        };
        let cases = [
            (
                ErrorKind::Pickle(global("posix")),
                "pickle_global",
                "pickle imports posix.Net, which is not allowed in a checkpoint (nothing was run)",
            ),
            (
                ErrorKind::Pickle(global("__main__")),
                "pickle_global",
                "pickle imports __main__.Net, which is not allowed in a checkpoint (nothing was \
                 run); a whole pickled model: save its state_dict() instead",
            ),
            (
                ErrorKind::Pickle(PickleError::Budget {
                    limit: 100,
                    what: "values",
                }),
                "pickle_budget",
                "pickle would build more than its budget of 100 bytes of values (values): refused",
            ),
            (
                ErrorKind::PyTorch(PyTorchError::ExpandedView {
                    tensor_bytes: 4096,
                    storage_bytes: 4,
                    factor: 16,
                    allowance: 1024,
                }),
                "expanded_view",
                "tensor is 4096 bytes but views a storage of 4: expanded beyond 16x its storage \
                 (expansion-ratio) and past 1024 bytes (expanded-view-bytes); pass \
                 --allow-expanded-views to write it, or raise the limit (--limit \
                 expanded-view-bytes=4096)",
            ),
        ];
        for (kind, name, words) in cases {
            let e = Error::new(kind);
            assert_eq!((e.kind().name(), e.to_string().as_str()), (name, words));
            assert_eq!(e.category(), Category::BadInput);
            let source = std::error::Error::source(&e).expect("the inner error");
            assert!(source.is::<PickleError>() || source.is::<PyTorchError>());
        }
    }
}
