//! The machine on whole pickles: the ones a checkpoint writes, hostile
//! ones, and records of a table's classes.

use super::*;
use crate::{ErrorKind, PickleError, Result};

fn run(p: &[u8]) -> Result<Pickled> {
    unpickle(p, Limits::default()).map(|(v, _)| v)
}

#[test]
fn refuses_unlisted_globals_by_name() {
    let e = run(b"\x80\x02cbuiltins\neval\nq\x00.").unwrap_err();
    match e.kind() {
        ErrorKind::Pickle(PickleError::Global { module, name }) => {
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

/// A pickle written opcode by opcode as Python's pickler writes protocol 4
/// (no memo: it only shares, and nothing here is shared).
struct Writer(Vec<u8>);

impl Writer {
    fn new() -> Writer {
        Writer(b"\x80\x04".to_vec())
    }

    fn op(mut self, bytes: &[u8]) -> Writer {
        self.0.extend_from_slice(bytes);
        self
    }

    fn str(self, s: &str) -> Writer {
        self.op(&[0x8c, s.len() as u8]).op(s.as_bytes())
    }

    fn int(self, v: u8) -> Writer {
        self.op(&[b'K', v])
    }

    /// `STACK_GLOBAL` of `module.name`.
    fn global(self, module: &str, name: &str) -> Writer {
        self.str(module).str(name).op(b"\x93")
    }

    /// `torch.Size((a, b))`, as torch reduces it.
    fn size(self, a: u8, b: u8) -> Writer {
        self.global("torch", "Size").int(a).int(b).op(b"\x86\x85R")
    }

    /// A dataclass instance: `cls.__new__(cls)` (`NEWOBJ` of `()`), then
    /// `BUILD` with its attributes, which `fields` pushes as key, value...
    fn dataclass(self, module: &str, name: &str, fields: impl FnOnce(Writer) -> Writer) -> Writer {
        let w = self.global(module, name).op(b")\x81}(");
        fields(w).op(b"ub")
    }

    fn stop(self) -> Vec<u8> {
        self.op(b".").0
    }
}

const DCP: &str = "torch.distributed.checkpoint.metadata";
const FILESYSTEM: &str = "torch.distributed.checkpoint.filesystem";

/// A distributed checkpoint's `.metadata` for one tensor `w` of 2x3
/// float32 in one chunk, as torch 2.x pickles it: dataclasses by `NEWOBJ`
/// and `BUILD` of their `__dict__`, `TensorProperties` by its
/// `__getstate__` tuple (dtype, layout, requires_grad, memory format as
/// a `_MEM_FORMAT_ENCODING` member, pin_memory), `torch.Size` and enum
/// members by `REDUCE`, the layout by `_get_layout("torch.strided")`.
fn dcp_metadata() -> Vec<u8> {
    let properties = |w: Writer| {
        w.global(DCP, "TensorProperties")
            .op(b")\x81(")
            .global("torch", "float32")
            .global("torch.serialization", "_get_layout")
            .str("torch.strided")
            .op(b"\x85R\x89")
            .global(DCP, "_MEM_FORMAT_ENCODING")
            .int(0)
            .op(b"\x85R\x89tb")
    };
    let chunk = |w: Writer| {
        w.dataclass(DCP, "ChunkStorageMetadata", |w| {
            w.str("offsets").size(0, 0).str("sizes").size(2, 3)
        })
    };
    let tensor = |w: Writer| {
        w.dataclass(DCP, "TensorStorageMetadata", |w| {
            let w = properties(w.str("properties"));
            let w = w.str("size").size(2, 3).str("chunks").op(b"]");
            chunk(w).op(b"a")
        })
    };
    let index = |w: Writer| {
        w.dataclass(DCP, "MetadataIndex", |w| {
            w.str("fqn")
                .str("w")
                .str("offset")
                .size(0, 0)
                .str("index")
                .int(0)
        })
    };
    let info = |w: Writer| {
        w.dataclass(FILESYSTEM, "_StorageInfo", |w| {
            w.str("relative_path")
                .str("__0_0.distcp")
                .str("offset")
                .int(0)
                .str("length")
                .int(24)
        })
    };
    Writer::new()
        .dataclass(DCP, "Metadata", |w| {
            let w = tensor(w.str("state_dict_metadata").op(b"}(").str("w")).op(b"u");
            let w = w.str("planner_data").op(b"N");
            let w = info(index(w.str("storage_data").op(b"}("))).op(b"u");
            w.str("version").str("1.0.0")
        })
        .stop()
}

const DCP_CLASSES: &[Class] = &[
    Class::new(DCP, "Metadata"),
    Class::new(DCP, "TensorStorageMetadata"),
    Class::new(DCP, "TensorProperties"),
    Class::new(DCP, "ChunkStorageMetadata"),
    Class::new(DCP, "MetadataIndex"),
    Class::new(DCP, "_MEM_FORMAT_ENCODING"),
    Class::new(FILESYSTEM, "_StorageInfo"),
];

/// torch's globals that a `.metadata` holds as values.
fn dcp_globals(module: &str, name: &str) -> Option<Global> {
    Global::lookup(module, name)
        .filter(|g| matches!(g, Global::Dtype(_) | Global::Size | Global::GetLayout))
}

fn class_of(v: &Pickled, id: Id) -> &'static str {
    match v.get(id) {
        Node::Object { class, .. } => class.name,
        n => panic!("not an object: {n:?}"),
    }
}

fn ints(v: &Pickled, id: Id) -> Vec<i64> {
    let Node::Tuple(items) = v.get(id) else {
        panic!("not a tuple: {:?}", v.get(id))
    };
    items
        .iter()
        .map(|&i| match v.get(i) {
            Node::Int(n) => n,
            n => panic!("not an int: {n:?}"),
        })
        .collect()
}

#[test]
fn a_table_s_classes_are_built_as_objects() {
    let allow = Allow {
        globals: dcp_globals,
        classes: DCP_CLASSES,
    };
    let (v, _) = unpickle_with(&dcp_metadata(), Limits::default(), allow).unwrap();
    let at = |id: Id, name: &str| v.attribute(id, name).unwrap_or_else(|| panic!("{name}"));
    assert_eq!(class_of(&v, v.root), "Metadata");
    assert_eq!(v.get(at(v.root, "planner_data")), Node::None);
    assert_eq!(v.get(at(v.root, "version")), Node::Str("1.0.0"));

    let Node::Dict(&[(name, tensor)]) = v.get(at(v.root, "state_dict_metadata")) else {
        panic!("state_dict_metadata")
    };
    assert_eq!(v.get(name), Node::Str("w"));
    assert_eq!(class_of(&v, tensor), "TensorStorageMetadata");
    assert_eq!(ints(&v, at(tensor, "size")), [2, 3]);
    let Node::List(&[chunk]) = v.get(at(tensor, "chunks")) else {
        panic!("chunks")
    };
    assert_eq!(class_of(&v, chunk), "ChunkStorageMetadata");
    assert_eq!(ints(&v, at(chunk, "offsets")), [0, 0]);
    assert_eq!(ints(&v, at(chunk, "sizes")), [2, 3]);

    // TensorProperties' state is the tuple its `__getstate__` returns.
    let properties = at(tensor, "properties");
    let Node::Object {
        class,
        state: Some(state),
        ..
    } = v.get(properties)
    else {
        panic!("properties")
    };
    assert_eq!(class, Class::new(DCP, "TensorProperties"));
    assert_eq!(v.attribute(properties, "dtype"), None, "not a dict state");
    let Node::Tuple(&[dtype, layout, grad, format, pinned]) = v.get(state) else {
        panic!("{:?}", v.get(state))
    };
    assert_eq!(v.get(dtype), Node::Global(Global::Dtype("float32")));
    assert!(matches!(
        v.get(layout),
        Node::Call {
            func: Global::GetLayout,
            ..
        }
    ));
    assert_eq!(
        (v.get(grad), v.get(pinned)),
        (Node::Bool(false), Node::Bool(false))
    );
    let Node::Object {
        class,
        args,
        state: None,
    } = v.get(format)
    else {
        panic!("{:?}", v.get(format))
    };
    assert_eq!(class.name, "_MEM_FORMAT_ENCODING");
    assert_eq!(ints(&v, args), [0]);

    let Node::Dict(&[(key, info)]) = v.get(at(v.root, "storage_data")) else {
        panic!("storage_data")
    };
    assert_eq!(class_of(&v, key), "MetadataIndex");
    assert_eq!(v.get(at(key, "fqn")), Node::Str("w"));
    assert_eq!(ints(&v, at(key, "offset")), [0, 0]);
    assert_eq!(class_of(&v, info), "_StorageInfo");
    assert_eq!(v.get(at(info, "relative_path")), Node::Str("__0_0.distcp"));
    assert_eq!(v.get(at(info, "length")), Node::Int(24));
}

#[test]
fn a_class_the_table_lacks_is_refused_by_name() {
    // Without `_StorageInfo`, and as a checkpoint (no class at all).
    let allow = Allow {
        globals: dcp_globals,
        classes: &DCP_CLASSES[..6],
    };
    let refused = |r: Result<(Pickled, usize)>| match r.map(|_| ()).unwrap_err().kind() {
        ErrorKind::Pickle(PickleError::Global { module, name }) => (module.clone(), name.clone()),
        k => panic!("{k:?}"),
    };
    let p = dcp_metadata();
    let named = |m: &str, n: &str| (m.to_string(), n.to_string());
    assert_eq!(
        refused(unpickle_with(&p, Limits::default(), allow)),
        named(FILESYSTEM, "_StorageInfo")
    );
    assert_eq!(
        refused(unpickle(&p, Limits::default())),
        named(DCP, "Metadata")
    );
    // The table's globals are its own: no tensor rebuild call here.
    let rebuild = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n.";
    assert_eq!(
        refused(unpickle_with(rebuild, Limits::default(), allow)),
        named("torch._utils", "_rebuild_tensor_v2")
    );
    assert!(unpickle(rebuild, Limits::default()).is_ok());
}
