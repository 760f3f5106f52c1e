//! What can be wrong with a PyTorch checkpoint: its pickle (a broken or
//! hostile opcode stream, a limit broken, a global refused, a budget
//! spent) or the checkpoint built from it (storages, tensor rebuild calls,
//! the archive's members, a view expanded past its storage). Each enum
//! names its errors ([`PickleError::name`],
//! [`PyTorchError::name`]): the few that were kinds of their own keep
//! their names (`pickle_global`, `pickle_budget`, `expanded_view`) and
//! their words. Names from the file are quoted with escapes (`{:?}`).

/// A pickle that is malformed, breaks a limit, or applies an opcode to a
/// value of the wrong type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum PickleError {
    // ---- the opcode stream ----------------------------------------------------
    /// The bytes end inside an opcode or its argument.
    #[error("pickle ends inside an opcode")]
    Truncated,
    #[error("opcode 0x{0:02x} is not one a checkpoint uses: refused")]
    UnknownOpcode(u8),
    /// A PROTO newer than 5.
    #[error("pickle protocol {0} is not supported")]
    Protocol(u8),
    /// A GLOBAL whose module or name line is too long or unterminated.
    #[error("GLOBAL name is not a short line")]
    GlobalLine,
    #[error("STACK_GLOBAL needs two strs")]
    StackGlobalArgs,
    #[error("length does not fit memory")]
    LengthTooLarge,
    #[error("LONG4 with a negative length")]
    NegativeLong4,

    // ---- text arguments ---------------------------------------------------------
    #[error("a number is not ASCII")]
    NumberNotAscii,
    #[error("{0:?} is not a decimal number")]
    NotDecimal(String),
    #[error("FLOAT is not a number")]
    FloatNotNumber,
    #[error("a str is not valid UTF-8")]
    StrNotUtf8,
    #[error("a bad \\u escape in a UNICODE string")]
    UnicodeEscape,
    /// A protocol-0 persistent id that is not text.
    #[error("PERSID is not text")]
    PersidNotText,
    #[error("a protocol-0 persistent id that is not a torch storage")]
    PersidNotStorage,
    #[error("_codecs.encode needs a str and an encoding")]
    CodecsArgs,
    #[error("_codecs.encode with encoding {0:?}")]
    CodecsEncoding(String),
    #[error("latin1 text above U+00FF")]
    NotLatin1,

    // ---- the stack and the memo ------------------------------------------------
    /// An opcode that pops more than the stack holds.
    #[error("stack underflow")]
    StackUnderflow,
    #[error("a value was expected but the stack holds a MARK")]
    MarkNotValue,
    /// An opcode that needs a MARK, and none is on the stack.
    #[error("no MARK on the stack")]
    NoMark,
    /// A memo key beyond what a position can address.
    #[error("memo key out of range")]
    MemoKeyRange,
    #[error("memo key {0} was never stored")]
    MemoKeyNeverStored(u64),
    /// MEMOIZE past the memo's addressable size.
    #[error("memo overflow")]
    MemoOverflow,

    // ---- values of the wrong type -------------------------------------------------
    #[error("SETITEMS with an odd number of values")]
    SetItemsOdd,
    #[error("SETITEM on {0}, which is not a dict")]
    SetItemNotDict(&'static str),
    /// APPEND(S) or ADDITEMS on a value that is not a list or set.
    #[error("{op} on {kind}, which is not {expected}")]
    NotContainer {
        op: &'static str,
        kind: &'static str,
        expected: &'static str,
    },
    /// A global not on the allow-list: refused by name, nothing was
    /// imported or run. Said without the `pickle: ` prefix (its words name
    /// the pickle).
    #[error("pickle imports {module}.{name}, which is not allowed in a checkpoint (nothing was run){}", module_hint(.module))]
    Global { module: String, name: String },
    #[error("REDUCE calls {0}, not an allowed global")]
    ReduceNotGlobal(&'static str),
    #[error("REDUCE arguments are not a tuple")]
    ReduceArgs,
    #[error("set() of something that is not a list")]
    SetArg,
    #[error("torch.Size of something that is not a tuple")]
    SizeArg,
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
    Budget { limit: u64, what: &'static str },
    #[error("strings and bytes exceed the limit of {0} bytes")]
    BytesLimit(u64),
    #[error("more than {0} values: refused")]
    ValuesLimit(u64),
    #[error("more than {0} memo entries: refused")]
    MemoLimit(u64),
    #[error("more than {0} nested MARKs: refused")]
    MarksLimit(u64),
    #[error("more values than 32-bit positions address: refused")]
    Positions,
    #[error("more than {0} values reached through shared references: refused")]
    VisitsLimit(u64),
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
#[allow(missing_docs)] // a variant's message says what it and its fields are
pub enum PyTorchError {
    // ---- the container -----------------------------------------------------------
    #[error("a tar archive (the format of torch before 0.4) is not supported: load it and save it again with a recent torch")]
    TarArchive,
    #[error("a TorchScript archive (constants.pkl, code/): load it with torch.jit.load and save its state_dict()")]
    TorchScript,
    #[error("{0} data.pkl members; a checkpoint has one")]
    DataPklCount(usize),
    #[error("member {member:?} is {size} bytes; more than the {limit} we read")]
    MemberTooLarge {
        member: String,
        size: u64,
        limit: u64,
    },
    #[error("byteorder is {0:?}, not little or big")]
    Byteorder(String),
    #[error(
        "storage member {0:?} is compressed; torch.save stores them (unzip and re-zip with -0)"
    )]
    CompressedStorage(String),
    #[error("legacy magic number missing")]
    LegacyMagic,
    #[error("legacy protocol version is not 1001")]
    LegacyVersion,
    #[error("storage key list is not a list")]
    KeyListNotList,
    /// A legacy checkpoint's storage key list holding a non-string.
    #[error("a storage key is not a string")]
    KeyListItemNotString,

    // ---- storages ------------------------------------------------------------------
    #[error("storage {0} is listed twice")]
    ListedTwice(String),
    /// The storages' keys, together, past what the table of storages
    /// addresses.
    #[error("the storages' keys take {0} bytes, more than 4 GiB")]
    StorageKeys(u64),
    /// A storage the pickle declares and the file lacks.
    #[error("storage {0} is not in the file")]
    NotInFile(String),
    #[error("storage {0} is listed but the pickle never declares it")]
    NeverDeclared(String),
    #[error("file ends before storage {0}")]
    EndsBeforeStorage(String),
    #[error("storage {0} runs past the end of the file")]
    StoragePastEnd(String),
    #[error("storage {key} holds {count} elements but its tensors declare {declared}")]
    StorageCount {
        key: String,
        count: u64,
        declared: u64,
    },
    #[error("storage {key} is {bytes} bytes in the file but {numel} elements of {elem} bytes in the pickle")]
    StorageSize {
        key: String,
        bytes: u64,
        numel: u64,
        elem: u64,
    },
    #[error("storage {0} size overflows")]
    StorageOverflow(String),
    /// A storage declared with two different types or sizes.
    #[error("storage {key} is declared twice, as {first} and as {second}")]
    DeclaredTwice {
        key: String,
        first: StorageShape,
        second: StorageShape,
    },
    #[error("tensor storage is not a persistent id")]
    StorageNotPersistent,
    #[error("storage persistent id is not a tuple")]
    PersistentIdNotTuple,
    #[error("persistent id is not a storage")]
    PersistentIdNotStorage,
    #[error("storage type is not a storage class")]
    StorageTypeNotClass,
    #[error("storage key is not a string")]
    StorageKeyNotString,
    #[error("storage location is not a string")]
    LocationNotString,
    /// A storage on a device other than the CPU, CUDA and MPS.
    #[error("storage on device {0:?} is not supported")]
    Device(String),
    #[error("a legacy storage view is not supported")]
    LegacyView,
    #[error("quantized storage torch.{0}")]
    QuantizedStorage(String),

    // ---- tensors ---------------------------------------------------------------------
    #[error("tensor arguments are not a tuple")]
    ArgsNotTuple,
    /// An integer argument that is negative.
    #[error("{what} is negative ({value})")]
    Negative { what: &'static str, value: i64 },
    /// An integer argument that is something else.
    #[error("{0} is not an integer")]
    NotInteger(&'static str),
    /// A tuple argument that is something else.
    #[error("{0} is not a tuple")]
    NotTuple(&'static str),
    #[error("parameters wrapped too deeply")]
    WrappedTooDeeply,
    /// A tensor kind refused (sparse, quantized, ...).
    #[error("{0} is not supported")]
    Unsupported(&'static str),
    #[error("a parameter without data")]
    ParameterWithoutData,
    #[error("a parameter whose data is not a tensor")]
    ParameterDataNotTensor,
    #[error("_rebuild_from_type_v2 needs 4 arguments")]
    FromTypeArgs,
    #[error("a tensor subclass is not supported")]
    Subclass,
    #[error("_rebuild_from_type_v2 of something not a function")]
    FromTypeNotFunction,
    /// A value in a tensor's place that is not one.
    #[error("not a tensor")]
    NotATensor,
    #[error("_rebuild_tensor_v3 without a dtype")]
    V3WithoutDtype,
    #[error("an untyped storage without a dtype")]
    UntypedWithoutDtype,
    #[error("torch.{0} has no safetensors dtype")]
    NoSafetensorsDtype(String),
    #[error("quantized dtype torch.{0}")]
    QuantizedDtype(String),
    /// A tensor with its conjugate or negative bit set.
    #[error("the {0} bit is set (call .resolve_{0}() before saving)")]
    BitSet(String),
    #[error("size has {size} dims but stride has {stride}")]
    StrideDims { size: usize, stride: usize },
    #[error("view size overflows 64 bits")]
    ViewOverflow,
    #[error("view reaches byte {needed} of storage {key}, which has {len}")]
    ViewPastStorage { needed: u64, key: String, len: u64 },
    #[error("tensor size overflows 64 bits")]
    TensorOverflow,
    /// A tensor view that reaches more bytes than its storage holds many
    /// times over (a stride-0 expansion): refused unless expanded views are
    /// allowed. Said without the `PyTorch checkpoint: ` prefix.
    #[error("tensor is {tensor_bytes} bytes but views a storage of {storage_bytes}: expanded beyond {factor}x its storage (expansion-ratio) and past {allowance} bytes (expanded-view-bytes); pass --allow-expanded-views to write it, or raise the limit (--limit expanded-view-bytes={tensor_bytes})")]
    ExpandedView {
        tensor_bytes: u64,
        storage_bytes: u64,
        factor: u64,
        allowance: u64,
    },
    #[error("its tensors add up to {planned} bytes, more than {factor}x its {stored} bytes of storage (expansion-ratio) and than {allowance} bytes (expanded-file-bytes); pass --allow-expanded-views to write them, or raise the limit (--limit expanded-file-bytes={planned})")]
    Expanded {
        planned: u64,
        factor: u64,
        stored: u64,
        allowance: u64,
    },

    // ---- naming ------------------------------------------------------------------------
    #[error("--pt-root {root:?}: no key {part:?} there")]
    RootMissing { root: String, part: String },
    #[error("--pt-root {root:?} holds {what}, not tensors")]
    RootLeaf { root: String, what: String },
    /// A tensor where no name reaches it (a dict key, an object's arguments).
    #[error("a tensor {place} in {at:?}: no name reaches it, refused rather than dropped")]
    Unnamed { place: &'static str, at: String },
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
