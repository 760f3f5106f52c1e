//! Hostile inputs, round 2 (issue 25): each class of crafted checkpoint is
//! refused (or read right) within a bound asserted in bytes: allocated
//! (the counting allocator) or written, never wall time.
//!
//! Every test holds the counting allocator's lock, not only those that
//! measure: a test building a large input beside a measuring one would
//! count in its peak.
//!
//! The checkpoints are built here, opcode by opcode ([`Pickle`]) and zipped
//! as `torch.save` lays them out ([`torch_zip`]), so each test shows the
//! exact construct it attacks.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use proptest::prelude::*;
use safetensors_stream::internals::pickle::{unpickle, Budget, Limits};
use safetensors_stream::internals::pytorch_model::{tensors, Naming};
use safetensors_stream::internals::Storages;
use safetensors_stream::{ErrorKind, IndexError, PickleError};
use serde_json::Value;
use support::numpy::{build_zip, ZipMember};

/// A protocol-2 pickle written opcode by opcode.
#[derive(Default)]
struct Pickle(Vec<u8>);

impl Pickle {
    fn new() -> Pickle {
        Pickle(b"\x80\x02".to_vec())
    }
    fn op(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.extend_from_slice(bytes);
        self
    }
    fn str(&mut self, s: &[u8]) -> &mut Self {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.op(s)
    }
    fn bytes(&mut self, s: &[u8]) -> &mut Self {
        self.0.push(b'B');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.op(s)
    }
    fn int(&mut self, v: i32) -> &mut Self {
        self.0.push(b'J');
        self.op(&v.to_le_bytes())
    }
    fn long(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&[0x8a, 8]);
        self.op(&v.to_le_bytes())
    }
    fn global(&mut self, module: &str, name: &str) -> &mut Self {
        self.0.push(b'c');
        self.op(format!("{module}\n{name}\n").as_bytes())
    }
    fn put(&mut self, k: u32) -> &mut Self {
        self.0.push(b'r');
        self.op(&k.to_le_bytes())
    }
    fn get(&mut self, k: u32) -> &mut Self {
        self.0.push(b'j');
        self.op(&k.to_le_bytes())
    }
    fn ints(&mut self, v: &[i64]) -> &mut Self {
        self.op(b"(");
        for &x in v {
            self.long(x);
        }
        self.op(b"t")
    }
    /// `_rebuild_tensor_v2(storage KEY of `numel` floats, offset, size, stride, False, OrderedDict())`.
    fn tensor(
        &mut self,
        key: &str,
        numel: i64,
        offset: i64,
        size: &[i64],
        stride: &[i64],
    ) -> &mut Self {
        self.tensor_of("FloatStorage", key, numel, offset, size, stride)
    }
    fn tensor_of(
        &mut self,
        class: &str,
        key: &str,
        numel: i64,
        offset: i64,
        size: &[i64],
        stride: &[i64],
    ) -> &mut Self {
        self.global("torch._utils", "_rebuild_tensor_v2").op(b"(");
        self.op(b"(").str(b"storage").global("torch", class);
        self.str(key.as_bytes()).str(b"cpu").long(numel).op(b"tQ");
        self.long(offset).ints(size).ints(stride).op(&[0x89]);
        self.global("collections", "OrderedDict").op(b")R");
        self.op(b"tR")
    }
    /// Python's pickler's put: `BINPUT` below 256, else `LONG_BINPUT`.
    fn memo(&mut self, k: u32) -> &mut Self {
        match u8::try_from(k) {
            Ok(k) => self.op(&[b'q', k]),
            Err(_) => self.put(k),
        }
    }
    /// Python's pickler's get: `BINGET` below 256, else `LONG_BINGET`.
    fn recall(&mut self, k: u32) -> &mut Self {
        match u8::try_from(k) {
            Ok(k) => self.op(&[b'h', k]),
            Err(_) => self.get(k),
        }
    }
    fn stop(&mut self) -> Vec<u8> {
        self.0.push(b'.');
        std::mem::take(&mut self.0)
    }
}

/// A `torch.save` zip: `archive/data.pkl`, `archive/byteorder` and each
/// storage as `archive/data/KEY`, stored, with CRCs.
pub(crate) fn torch_zip(pickle: &[u8], storages: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut members = vec![
        ZipMember::stored("archive/data.pkl", pickle.to_vec()),
        ZipMember::stored("archive/byteorder", b"little".to_vec()),
    ];
    for (key, data) in storages {
        members.push(ZipMember::stored(
            &format!("archive/data/{key}"),
            data.clone(),
        ));
    }
    build_zip(&members).0
}

pub(crate) fn floats(n: usize) -> Vec<u8> {
    (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

pub(crate) fn convert(dir: &Path, args: &[&str]) -> Output {
    Command::new(support::BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run convert")
}

pub(crate) fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    std::fs::write(dir.join(name), bytes).unwrap();
    name.to_string()
}

/// The error of a `--report json` run: its kind and message.
pub(crate) fn report_error(r: &Output) -> (String, String) {
    let text = String::from_utf8_lossy(&r.stderr);
    let line = text.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {text}"));
    let e = &v["error"];
    (
        e["kind"].as_str().unwrap().to_string(),
        e["message"].as_str().unwrap().to_string(),
    )
}

/// Converts `input` expecting a refusal of `kind`: exit 1, nothing written.
pub(crate) fn refused(dir: &Path, input: &str, extra: &[&str], kind: &str) -> String {
    let mut args = vec![input, "-o", "out.safetensors", "--report", "json"];
    args.extend_from_slice(extra);
    let r = convert(dir, &args);
    assert_eq!(
        r.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let (got, message) = report_error(&r);
    assert_eq!(got, kind, "{message}");
    assert!(!dir.join("out.safetensors").exists());
    message
}

/// The tensors a converted file holds, by name: (shape, data bytes).
pub(crate) fn output_tensors(path: &Path) -> Vec<(String, Vec<u64>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let shape = v.shape().iter().map(|&d| d as u64).collect();
            (n, shape, v.data().to_vec())
        })
        .collect();
    out.sort();
    out
}

// ---- bytes, not visits ------------------------------------------------------

/// A DAG: each level a dict of two long keys that both lead to the level
/// below, a tensor at the bottom. 2^8 paths, each named by 8 keys of 256
/// KiB: 512 MiB of names from a 0.5 MB pickle, 60 GB with 120 levels.
fn name_dag(levels: u32, key_len: usize) -> Vec<u8> {
    let mut p = Pickle::new();
    p.str(&vec![b'a'; key_len]).put(0).op(b"0");
    p.str(&vec![b'b'; key_len]).put(1).op(b"0");
    p.tensor("0", 1, 0, &[], &[]).put(2).op(b"0");
    for level in 0..levels {
        p.op(b"}(")
            .get(0)
            .get(2 + level)
            .get(1)
            .get(2 + level)
            .op(b"u");
        p.put(3 + level).op(b"0");
    }
    p.get(2 + levels);
    p.stop()
}

/// A DAG of dicts: `levels` levels, each a dict whose keys (one per
/// length in `key_lens`, memoized once) all lead to the one level below,
/// an empty dict at the bottom. Returns the pickle and what naming its
/// expansion costs: each edge of the expanded tree, its key and a dot.
fn dict_dag(levels: u32, key_lens: &[usize]) -> (Vec<u8>, usize) {
    let keys: Vec<Vec<u8>> = (0..key_lens.len())
        .map(|j| {
            let mut k = format!("k{j}").into_bytes();
            k.resize(k.len().max(key_lens[j]), b'x');
            k
        })
        .collect();
    let mut p = Pickle::new();
    for (j, k) in keys.iter().enumerate() {
        p.str(k).put(j as u32).op(b"0");
    }
    let first = keys.len() as u32;
    p.op(b"}").put(first).op(b"0");
    let edges: usize = keys.iter().map(|k| k.len() + 1).sum();
    let mut cost = 0;
    for level in 1..=levels {
        p.op(b"}(");
        for j in 0..keys.len() {
            p.get(j as u32).get(first + level - 1);
        }
        p.op(b"u").put(first + level).op(b"0");
        cost = keys.len() * cost + edges;
    }
    p.get(first + levels);
    (p.stop(), cost)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A value shared through the memo costs, each time a path reaches
    /// it, what it cost the first time: naming a DAG is charged exactly
    /// its expansion, however small the pickle that shares it.
    #[test]
    fn naming_a_dag_is_charged_exactly_its_expansion(
        levels in 1u32..6,
        key_lens in proptest::collection::vec(1usize..48, 1..4),
    ) {
        let _g = crate::alloc::serial();
        let (pickle, cost) = dict_dag(levels, &key_lens);
        let (mut p, _) = unpickle(&pickle, Limits::default()).unwrap();
        let storages = Storages::declared(&p).unwrap();
        p.budget = Budget::new(cost);
        prop_assert!(tensors(&p, &Naming::default(), &storages).is_ok());
        p.budget = Budget::new(cost - 1);
        let e = tensors(&p, &Naming::default(), &storages).unwrap_err();
        prop_assert!(matches!(e.kind(), ErrorKind::Pickle(PickleError::Budget { .. })), "{}", e);
    }
}

#[test]
fn a_shared_key_named_along_every_path_is_charged_each_time() {
    let _g = crate::alloc::serial();
    let pickle = name_dag(8, 256 << 10);
    let (result, peak) = crate::alloc::peak_during(|| {
        let (p, _) = unpickle(&pickle, Limits::for_input(pickle.len()))?;
        tensors(&p, &Naming::default(), &Storages::declared(&p)?)
    });
    let e = result.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Pickle(PickleError::Budget { .. })),
        "{e}"
    );
    // The walk's: widened by the pickle's bytes, which are freed before it.
    let budget = Budget::for_input(pickle.len()).limit() + pickle.len();
    assert!(e.to_string().contains(&budget.to_string()), "{e}");
    eprintln!("pickle {} bytes, peak {peak} bytes", pickle.len());
    // Before: 512 MiB of names.
    assert_within_the_header_bound("a name DAG", pickle.len(), peak);
}

/// `bytearray(b)` 300 times over one shared 1 MiB bytes: 300 MiB of
/// copies from a 1 MB pickle.
#[test]
fn copies_made_by_constructors_are_charged() {
    let _g = crate::alloc::serial();
    for (module, name, arg) in [
        ("builtins", "bytearray", true),
        ("_codecs", "encode", false),
    ] {
        let mut p = Pickle::new();
        if arg {
            p.bytes(&vec![7u8; 1 << 20]).put(0).op(b"0");
        } else {
            p.str(&vec![b'x'; 1 << 20]).put(0).op(b"0");
        }
        p.op(b"]("); // a list of 300 copies
        for _ in 0..300 {
            p.global(module, name).op(b"(").get(0);
            if !arg {
                p.str(b"latin1");
            }
            p.op(b"tR");
        }
        p.op(b"e");
        let pickle = p.stop();
        let (result, peak) =
            crate::alloc::peak_during(|| unpickle(&pickle, Limits::for_input(pickle.len())));
        let e = result.unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Pickle(PickleError::Budget { .. })),
            "{name}: {e}"
        );
        eprintln!("{name}: pickle {} bytes, peak {peak}", pickle.len());
        assert_within_the_header_bound(name, pickle.len(), peak);
    }
}

/// `set(l)` of one shared list of 200,000 items, 400 times: 320 MB of
/// copied item lists.
#[test]
fn set_copies_of_a_shared_list_are_charged() {
    let _g = crate::alloc::serial();
    let mut p = Pickle::new();
    p.op(b"](");
    for _ in 0..200_000 {
        p.op(b"N");
    }
    p.op(b"e").put(0).op(b"0]");
    p.op(b"(");
    for _ in 0..400 {
        p.global("builtins", "frozenset").op(b"(").get(0).op(b"tR");
    }
    p.op(b"e");
    let pickle = p.stop();
    let (result, peak) =
        crate::alloc::peak_during(|| unpickle(&pickle, Limits::for_input(pickle.len())));
    let e = result.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Pickle(PickleError::Budget { .. })),
        "{e}"
    );
    assert_within_the_header_bound("set copies", pickle.len(), peak);
}

/// A `torch.save` of 200,000 tensors (the densest kind: one float each,
/// short names, a storage each) fits a budget of twice its pickle and 8
/// MiB: its factor, not the floor of 48 MiB, carries a real checkpoint.
/// It holds 1.74 times its pickle in values (2.07 with the memo, while
/// reading), and its records 0.95 more once the walk names them (after
/// the pickle's bytes are freed).
#[test]
fn a_state_dict_fits_twice_its_pickle_and_8_mib() {
    // Its 60 MB would count in the peaks the others measure.
    let _g = crate::alloc::serial();
    let pickle = state_dict_pickle(200_000);
    let len = pickle.len();
    let limits = Limits {
        budget: 2 * len + (8 << 20),
        ..Limits::for_input(len)
    };
    let (p, _) = unpickle(&pickle, limits).unwrap();
    eprintln!(
        "pickle {len} bytes, values {} ({:.2}x)",
        p.budget.used(),
        p.budget.used() as f64 / len as f64
    );
    let t = tensors(&p, &Naming::default(), &Storages::declared(&p).unwrap()).unwrap();
    assert_eq!(t.tensors.len(), 200_000);
}

/// The README's bound on a header, 3 times its bytes + 64 MiB, for what
/// reading a pickle of `len` bytes allocated at its `peak`: the pickle's
/// own bytes, held by the caller, are the first of the three.
fn assert_within_the_header_bound(what: &str, len: usize, peak: usize) {
    assert!(
        len + peak <= 3 * len + (64 << 20),
        "{what}: peak {peak} beside a pickle of {len} bytes"
    );
}

/// `pickle` unpickled under the counter: refused on its budget, the peak
/// within the README's bound.
fn unpickle_refused_within_the_bound(what: &str, pickle: &[u8]) {
    let (r, peak) = crate::alloc::peak_during(|| unpickle(pickle, Limits::for_input(pickle.len())));
    refused_within_the_bound(what, r.map(|_| ()), pickle.len(), peak);
}

/// Refused for its budget, within the README's bound: `r` is the result
/// of reading `pickle` and `peak` what it allocated.
fn refused_within_the_bound<T: std::fmt::Debug>(
    what: &str,
    r: safetensors_stream::Result<T>,
    len: usize,
    peak: usize,
) {
    eprintln!("{what}: pickle {len} bytes, peak {peak}");
    let e = r.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Pickle(PickleError::Budget { .. })),
        "{what}: {e}"
    );
    assert_within_the_header_bound(what, len, peak);
}

/// One opcode byte pushes an 8-byte slot (`NEWTRUE`, `DUP`): 16 Mi of
/// them held 128 MiB of stack (192 MiB as it last doubled) for a 16 MB
/// pickle that parses (`STOP` pops one). The stack is charged now.
#[test]
fn the_stack_is_charged_to_the_budget() {
    let _g = crate::alloc::serial();
    for (what, op) in [("NEWTRUE", 0x88u8), ("DUP", b'2')] {
        let mut p = Pickle::new();
        p.op(&[0x88]).op(&vec![op; 16 << 20]);
        let pickle = p.stop();
        unpickle_refused_within_the_bound(what, &pickle);
    }
}

/// A `LONG_BINPUT` 63 past the memo list's end grows it by 64 entries
/// (256 bytes) for 5 bytes of pickle, and was charged 32: a million of
/// them held 256 MiB for a 5 MB pickle that parses. The memo is charged
/// what it grows by now.
#[test]
fn the_memo_is_charged_what_it_grows_by() {
    let _g = crate::alloc::serial();
    let mut p = Pickle::new();
    p.op(b"N");
    for i in 0..1_000_000u32 {
        p.put(64 * i + 63);
    }
    let pickle = p.stop();
    unpickle_refused_within_the_bound("memo", &pickle);
}

/// One tensor whose shape is a million ones (a `DUP` each), its stride the
/// same tuple, named along 20 paths: each path copied the shape (8 MB),
/// 160 MB of shapes from a 1 MB pickle. The walk charges its copies now.
#[test]
fn shapes_copied_along_many_paths_are_charged() {
    let _g = crate::alloc::serial();
    let dims = 1_000_000;
    let mut p = Pickle::new();
    p.global("torch._utils", "_rebuild_tensor_v2").op(b"(");
    p.op(b"(").str(b"storage").global("torch", "FloatStorage");
    p.str(b"0").str(b"cpu").long(1000).op(b"tQ");
    p.op(b"K\x00(K\x01")
        .op(&vec![b'2'; dims - 1])
        .op(b"t")
        .put(1);
    p.get(1).op(&[0x89]);
    p.global("collections", "OrderedDict").op(b")R");
    p.op(b"tR").put(2).op(b"0");
    p.op(b"](");
    for _ in 0..20 {
        p.get(2);
    }
    p.op(b"e");
    let pickle = p.stop();
    let (r, peak) = crate::alloc::peak_during(|| {
        let (p, _) = unpickle(&pickle, Limits::for_input(pickle.len()))?;
        tensors(&p, &Naming::default(), &Storages::declared(&p)?)
    });
    refused_within_the_bound("shapes", r.map(|t| t.tensors.len()), pickle.len(), peak);
}

/// `set(l)` of one shared list of a million items, 40 times, in a pickle
/// padded to 5 MB with `PROTO` opcodes: 160 MB of copies, inside the old
/// budget (32 times the pickle + 16 MiB) and far past the README's 3
/// times + 64 MiB. The budget is twice the pickle + 48 MiB now.
#[test]
fn the_budget_keeps_a_pickle_within_the_readme_bound() {
    let _g = crate::alloc::serial();
    let mut p = Pickle::new();
    p.global("builtins", "set").put(0).op(b"(");
    p.op(&vec![0x88; 1 << 20]).op(b"l").put(1).op(b"0");
    for _ in 0..40 {
        p.get(0).get(1).op(b"\x85R0");
    }
    for _ in 0..(2 << 20) {
        p.op(b"\x80\x02");
    }
    p.op(b"N");
    let pickle = p.stop();
    unpickle_refused_within_the_bound("set copies", &pickle);
}

#[test]
fn a_pickle_bomb_through_the_binary_is_one_line_naming_the_budget() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let pt = torch_zip(&name_dag(8, 256 << 10), &[("0", floats(1))]);
    let input = write(tmp.path(), "dag.pt", &pt);
    for extra in [&[][..], &["--dry-run"][..]] {
        let msg = refused(tmp.path(), &input, extra, "pickle_budget");
        assert!(msg.contains("budget of"), "{msg}");
    }
    let r = convert(tmp.path(), &[&input, "-o", "out.safetensors"]);
    assert_eq!(r.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

// ---- expanded views ---------------------------------------------------------

#[test]
fn one_float_viewed_as_a_terabyte_is_refused_and_writes_nothing() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}")
        .str(b"huge")
        .tensor("0", 1, 0, &[1 << 40], &[0])
        .op(b"s");
    let input = write(
        tmp.path(),
        "huge.pt",
        &torch_zip(&p.stop(), &[("0", floats(1))]),
    );
    for extra in [&[][..], &["--dry-run"][..]] {
        let msg = refused(tmp.path(), &input, extra, "expanded_view");
        assert!(
            msg.contains("\"huge\"") && msg.contains("4398046511104"),
            "{msg}"
        );
    }
}

/// A checkpoint of one tensor `name` viewing storage "0" (`storage`) with
/// `size` and `stride`, written as `file`.
pub(crate) fn one_view(
    dir: &Path,
    file: &str,
    size: &[i64],
    stride: &[i64],
    storage: Vec<u8>,
) -> String {
    let mut p = Pickle::new();
    p.op(b"}")
        .str(b"view")
        .tensor("0", (storage.len() / 4) as i64, 0, size, stride)
        .op(b"s");
    write(dir, file, &torch_zip(&p.stop(), &[("0", storage)]))
}

#[test]
fn a_small_expanded_view_converts_without_the_flag() {
    // Position ids kept as a stride-0 view: 4 KiB from 4 bytes, 1024x its
    // storage, under the 4 MiB a view may have whatever its factor.
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let input = one_view(tmp.path(), "ids.pt", &[1, 1024], &[0, 0], floats(1));
    let r = convert(tmp.path(), &[&input, "-o", "out.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let t = output_tensors(&tmp.path().join("out.safetensors"));
    assert_eq!(t[0].1, vec![1, 1024]);
    assert_eq!(t[0].2, floats(1).repeat(1024));
}

#[test]
fn a_broadcast_past_16x_and_4_mib_needs_the_flag_and_then_converts() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    // Exactly 4 MiB (524,288 rows of 2 floats) is written by default ...
    let rows = (4 << 20) / 8;
    let input = one_view(tmp.path(), "at.pt", &[rows, 2], &[0, 1], floats(2));
    let r = convert(tmp.path(), &[&input, "-o", "out.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::remove_file(tmp.path().join("out.safetensors")).unwrap();
    // ... one row more is refused, saying how to allow it ...
    let input = one_view(tmp.path(), "past.pt", &[rows + 1, 2], &[0, 1], floats(2));
    let msg = refused(tmp.path(), &input, &[], "expanded_view");
    assert!(
        msg.contains("4194312 bytes")
            && msg.contains("past 4194304 bytes")
            && msg.contains("--allow-expanded-views"),
        "{msg}"
    );
    // ... and written with it.
    let r = convert(
        tmp.path(),
        &[&input, "--allow-expanded-views", "-o", "out.safetensors"],
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let t = output_tensors(&tmp.path().join("out.safetensors"));
    assert_eq!(t[0].1, vec![rows as u64 + 1, 2]);
    assert_eq!(t[0].2, floats(2).repeat(rows as usize + 1));
}

/// A checkpoint of `views` tied views of one storage of `floats` floats.
fn tied(dir: &Path, file: &str, views: usize, n: usize) -> String {
    let mut p = Pickle::new();
    p.op(b"}(");
    for i in 0..views {
        p.str(format!("tied.{i}").as_bytes())
            .tensor("0", n as i64, 0, &[n as i64], &[1]);
    }
    p.op(b"u");
    write(dir, file, &torch_zip(&p.stop(), &[("0", floats(n))]))
}

#[test]
fn tied_views_past_16x_their_storage_and_64_mib_in_all_are_refused() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    // 17 views of 16 bytes: 17x, but 272 bytes in all, are written.
    let input = tied(tmp.path(), "small.pt", 17, 4);
    let r = convert(tmp.path(), &[&input, "-o", "out.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        output_tensors(&tmp.path().join("out.safetensors")).len(),
        17
    );
    std::fs::remove_file(tmp.path().join("out.safetensors")).unwrap();
    // 17 views of 4 MiB: 17x and 68 MiB, refused before a byte is written.
    let input = tied(tmp.path(), "big.pt", 17, 1 << 20);
    let msg = refused(tmp.path(), &input, &["--dry-run"], "py_torch");
    assert!(
        msg.contains("16x")
            && msg.contains("67108864 bytes")
            && msg.contains("--allow-expanded-views"),
        "{msg}"
    );
    refused(tmp.path(), &input, &[], "py_torch");
}

// ---- integrity ---------------------------------------------------------------

/// Two views split one storage; a flipped byte in the first half.
#[test]
fn a_corrupt_storage_split_by_two_views_is_refused() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}(");
    p.str(b"a").tensor("0", 8, 0, &[4], &[1]);
    p.str(b"b").tensor("0", 8, 4, &[4], &[1]);
    p.op(b"u");
    let mut pt = torch_zip(&p.stop(), &[("0", floats(8))]);
    let good = floats(8);
    let at = pt.windows(good.len()).position(|w| w == good).unwrap();
    // Both outputs from the good archive, first.
    let input = write(tmp.path(), "good.pt", &pt);
    let r = convert(tmp.path(), &[&input, "-o", "good.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    pt[at + 5] ^= 0x40;
    let input = write(tmp.path(), "split.pt", &pt);
    refused(tmp.path(), &input, &[], "crc_mismatch");
    refused(tmp.path(), &input, &["--include", "b"], "crc_mismatch");
}

/// A big-endian checkpoint's views that are not whole storages (a
/// transposed one, a part of one) are read by blocking readers into a file
/// and through the async sink to a stream: both swap each element's bytes.
#[test]
fn big_endian_views_are_swapped_on_every_road() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}(");
    p.str(b"t").tensor("0", 6, 0, &[3, 2], &[1, 3]);
    p.str(b"tail").tensor("0", 6, 2, &[4], &[1]);
    p.op(b"u");
    let big: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_be_bytes()).collect();
    let members = [
        ZipMember::stored("archive/data.pkl", p.stop()),
        ZipMember::stored("archive/byteorder", b"big".to_vec()),
        ZipMember::stored("archive/data/0", big),
    ];
    let input = write(tmp.path(), "big.pt", &build_zip(&members).0);
    let le = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let want = [
        ("t", vec![3, 2], le(&[0., 3., 1., 4., 2., 5.])),
        ("tail", vec![4], le(&[2., 3., 4., 5.])),
    ];
    let r = convert(tmp.path(), &[&input, "-o", "out.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let to_file = std::fs::read(tmp.path().join("out.safetensors")).unwrap();
    let r = convert(tmp.path(), &[&input, "-o", "-"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    for (road, bytes) in [("file", to_file), ("stream", r.stdout)] {
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        for (name, shape, data) in &want {
            let v = st.tensor(name).unwrap();
            let got: Vec<u64> = v.shape().iter().map(|&d| d as u64).collect();
            assert_eq!((&got, v.data()), (shape, &data[..]), "{road}: {name}");
        }
    }
}

/// Two shards, each a storage split by two views, at the same place in
/// their files; only the second's is corrupt. A storage is known by its
/// file as well as its place: the first passing does not pass the second.
#[test]
fn a_corrupt_split_storage_in_the_second_shard_is_refused() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let shard = |prefix: &str| {
        let mut p = Pickle::new();
        p.op(b"}(");
        p.str(format!("{prefix}0").as_bytes())
            .tensor("0", 8, 0, &[4], &[1]);
        p.str(format!("{prefix}1").as_bytes())
            .tensor("0", 8, 4, &[4], &[1]);
        p.op(b"u");
        torch_zip(&p.stop(), &[("0", floats(8))])
    };
    let (first, mut second) = (shard("a"), shard("b"));
    let good = floats(8);
    let at = second.windows(good.len()).position(|w| w == good).unwrap();
    assert_eq!(first.windows(good.len()).position(|w| w == good), Some(at));
    second[at + 5] ^= 0x40;
    write(tmp.path(), "pytorch_model-00001-of-00002.bin", &first);
    write(tmp.path(), "pytorch_model-00002-of-00002.bin", &second);
    let map = |p: &str, n: u8| {
        format!(
            r#""{p}{n}":"pytorch_model-0000{}-of-00002.bin""#,
            1 + (p == "b") as u8
        )
    };
    let entries = [map("a", 0), map("a", 1), map("b", 0), map("b", 1)].join(",");
    let index = format!(r#"{{"metadata":{{"total_size":64}},"weight_map":{{{entries}}}}}"#);
    let input = write(tmp.path(), "pytorch_model.bin.index.json", index.as_bytes());
    let msg = refused(tmp.path(), &input, &[], "crc_mismatch");
    assert!(
        msg.contains("b0"),
        "the first view of the corrupt storage: {msg}"
    );
}

/// More views of one storage than the copy engine looks at in one window
/// (16,384): those after the first window are copied as plain spans once
/// the storage has passed its check, so a flipped byte in the last view's
/// part is still refused, and the good archive's bytes all arrive.
#[test]
fn a_corrupt_storage_split_by_many_views_is_refused() {
    let _g = crate::alloc::serial();
    const VIEWS: usize = 20_000;
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}(");
    for i in 0..VIEWS {
        let name = format!("t{i:05}");
        p.str(name.as_bytes())
            .tensor("0", VIEWS as i64, i as i64, &[1], &[1]);
    }
    p.op(b"u");
    let mut pt = torch_zip(&p.stop(), &[("0", floats(VIEWS))]);
    let input = write(tmp.path(), "good.pt", &pt);
    let r = convert(tmp.path(), &[&input, "-o", "good.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let got = output_tensors(&tmp.path().join("good.safetensors"));
    assert_eq!(got.len(), VIEWS);
    let data: Vec<u8> = got.into_iter().flat_map(|(_, _, d)| d).collect();
    assert_eq!(data, floats(VIEWS), "every view's float, in name order");

    let good = floats(VIEWS);
    let at = pt.windows(good.len()).position(|w| w == good).unwrap();
    pt[at + good.len() - 2] ^= 0x40; // in the last view's float
    let input = write(tmp.path(), "split.pt", &pt);
    refused(tmp.path(), &input, &[], "crc_mismatch");
}

#[test]
fn two_members_of_one_name_are_refused() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}").str(b"w").tensor("0", 2, 0, &[2], &[1]).op(b"s");
    let pickle = p.stop();
    let twice = |name: &str, a: Vec<u8>, b: Vec<u8>| {
        let mut members = vec![ZipMember::stored("archive/data.pkl", pickle.clone())];
        members.push(ZipMember::stored(name, a));
        members.push(ZipMember::stored(name, b));
        if name != "archive/data/0" {
            members.push(ZipMember::stored("archive/data/0", floats(2)));
        }
        build_zip(&members).0
    };
    let cases = [
        (
            "byteorder",
            twice("archive/byteorder", b"little".to_vec(), b"big".to_vec()),
        ),
        ("storage", twice("archive/data/0", floats(2), vec![0; 8])),
    ];
    for (what, pt) in cases {
        let input = write(tmp.path(), &format!("{what}.pt"), &pt);
        let msg = refused(tmp.path(), &input, &[], "zip");
        assert!(msg.contains("appears twice"), "{what}: {msg}");
    }
    // An npz as well (the same directory reader).
    let npz = build_zip(&[
        ZipMember::stored("x.npy", support::numpy::npy("<f4", false, &[1], &floats(1))),
        ZipMember::stored("x.npy", support::numpy::npy("<f4", false, &[1], &floats(1))),
    ])
    .0;
    let input = write(tmp.path(), "twice.npz", &npz);
    refused(tmp.path(), &input, &[], "zip");
}

#[test]
fn a_byteorder_other_than_little_or_big_is_refused() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}").str(b"w").tensor("0", 2, 0, &[2], &[1]).op(b"s");
    let pt = build_zip(&[
        ZipMember::stored("archive/data.pkl", p.stop()),
        ZipMember::stored("archive/byteorder", b"middle".to_vec()),
        ZipMember::stored("archive/data/0", floats(2)),
    ])
    .0;
    let input = write(tmp.path(), "middle.pt", &pt);
    refused(tmp.path(), &input, &[], "py_torch");
}

#[test]
fn one_storage_declared_with_two_dtypes_is_refused() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}(");
    p.str(b"f").tensor_of("FloatStorage", "0", 2, 0, &[2], &[1]);
    p.str(b"i").tensor_of("IntStorage", "0", 2, 0, &[2], &[1]);
    p.op(b"u");
    let input = write(
        tmp.path(),
        "twotypes.pt",
        &torch_zip(&p.stop(), &[("0", floats(2))]),
    );
    let msg = refused(tmp.path(), &input, &[], "py_torch");
    assert!(msg.contains("declared twice"), "{msg}");
}

// ---- nothing dropped silently ------------------------------------------------

#[test]
fn tensors_no_name_reaches_are_refused_not_dropped() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let t = |p: &mut Pickle| {
        p.tensor("0", 2, 0, &[2], &[1]);
    };
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // {"s": {tensor}}
    let mut p = Pickle::new();
    p.op(b"}").str(b"s").op(&[0x8f, b'(']);
    t(&mut p);
    p.op(&[0x90]).op(b"s");
    cases.push(("inside a set", p.stop()));
    // {"f": frozenset([tensor])}
    let mut p = Pickle::new();
    p.op(b"}")
        .str(b"f")
        .global("builtins", "frozenset")
        .op(b"((");
    t(&mut p);
    p.op(b"ltRs");
    cases.push(("inside a set", p.stop()));
    // {tensor: 1}
    let mut p = Pickle::new();
    p.op(b"}");
    t(&mut p);
    p.int(1).op(b"s");
    cases.push(("dict key", p.stop()));
    // {"od": OrderedDict([("w", tensor)])}
    let mut p = Pickle::new();
    p.op(b"}")
        .str(b"od")
        .global("collections", "OrderedDict")
        .op(b"(((");
    p.str(b"w");
    t(&mut p);
    p.op(b"tltRs");
    cases.push(("constructor arguments", p.stop()));
    for (place, pickle) in cases {
        let input = write(
            tmp.path(),
            "hidden.pt",
            &torch_zip(&pickle, &[("0", floats(2))]),
        );
        let msg = refused(tmp.path(), &input, &[], "py_torch");
        assert!(msg.contains(place), "{place}: {msg}");
    }
}

#[test]
fn the_skip_warning_counts_only_values_and_lists_their_paths() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}(").str(b"epoch").int(3).str(b"w");
    p.tensor("0", 2, 0, &[2], &[1]);
    p.str(b"opt")
        .op(b"}")
        .str(b"lr")
        .global("builtins", "complex")
        .op(b"(")
        .int(1)
        .op(b"tRs");
    p.op(b"u");
    let input = write(
        tmp.path(),
        "skips.pt",
        &torch_zip(&p.stop(), &[("0", floats(2))]),
    );
    let r = convert(tmp.path(), &[&input, "-o", "out.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        stderr.contains("skipped 2 non-tensor values") && stderr.contains("epoch, opt.lr"),
        "{stderr}"
    );
}

// ---- compatibility -----------------------------------------------------------

#[test]
fn bool_keys_are_spelled_as_python_does_and_names_are_never_empty() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Pickle::new();
    p.op(b"}(").op(&[0x88]);
    p.tensor("0", 2, 0, &[2], &[1]);
    p.op(&[0x89]).tensor("0", 2, 0, &[2], &[1]).op(b"u");
    let input = write(
        tmp.path(),
        "bools.pt",
        &torch_zip(&p.stop(), &[("0", floats(2))]),
    );
    let r = convert(tmp.path(), &[&input, "-o", "bools.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let names: Vec<String> = output_tensors(&tmp.path().join("bools.safetensors"))
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(names, ["False", "True"]);

    let mut p = Pickle::new();
    p.op(b"}")
        .str(b"state_dict")
        .tensor("0", 2, 0, &[2], &[1])
        .op(b"s");
    let input = write(
        tmp.path(),
        "sd.pt",
        &torch_zip(&p.stop(), &[("0", floats(2))]),
    );
    let r = convert(tmp.path(), &[&input, "-o", "sd.safetensors"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let t = output_tensors(&tmp.path().join("sd.safetensors"));
    assert_eq!(t[0].0, "state_dict");

    let mut p = Pickle::new();
    p.op(b"}").str(b"").tensor("0", 2, 0, &[2], &[1]).op(b"s");
    let input = write(
        tmp.path(),
        "empty.pt",
        &torch_zip(&p.stop(), &[("0", floats(2))]),
    );
    let msg = refused(tmp.path(), &input, &[], "py_torch");
    assert!(msg.contains("empty"), "{msg}");
}

// ---- messages ----------------------------------------------------------------

/// A storage key with terminal escapes, a newline that would forge a
/// second line, and 10,000 characters: one escaped line, cut.
#[test]
fn names_from_a_file_are_escaped_and_lines_cut() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let key = format!(
        "k\u{1b}[2J\u{7}\r\nerror: forged\u{202e}{}",
        "x".repeat(10_000)
    );
    let mut p = Pickle::new();
    p.op(b"}(");
    p.str(b"f")
        .tensor_of("FloatStorage", &key, 2, 0, &[2], &[1]);
    p.str(b"i").tensor_of("IntStorage", &key, 2, 0, &[2], &[1]);
    p.op(b"u");
    let input = write(
        tmp.path(),
        "escape.pt",
        &torch_zip(&p.stop(), &[("0", floats(2))]),
    );
    let r = convert(tmp.path(), &[&input, "-o", "out.safetensors"]);
    assert_eq!(r.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for raw in ['\u{1b}', '\u{7}', '\r', '\u{202e}'] {
        assert!(!stderr.contains(raw), "{raw:?} printed raw");
    }
    assert!(
        stderr.contains("\\u{1b}[2J") && stderr.contains("\\u{202e}"),
        "{stderr}"
    );
    assert!(
        stderr.chars().count() < 2200,
        "{} chars",
        stderr.chars().count()
    );
    assert!(stderr.contains("more characters cut"));
}

/// `torch.save(..., pickle_protocol=1)` and `=0` (fixtures/pytorch/protocols/
/// generate.py): the tensors torch saved, named as in protocol 2.
#[test]
fn checkpoints_saved_with_pickle_protocols_0_and_1_convert() {
    let _g = crate::alloc::serial();
    let dir = support::fixtures().join("pytorch/protocols");
    let want: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let want = want.as_object().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for proto in [0, 1] {
        let input = dir.join(format!("protocol{proto}.pt"));
        let r = convert(
            tmp.path(),
            &[input.to_str().unwrap(), "-o", "out.safetensors"],
        );
        assert!(
            r.status.success(),
            "protocol {proto}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let got = output_tensors(&tmp.path().join("out.safetensors"));
        assert_eq!(got.len(), want.len(), "protocol {proto}");
        for (name, shape, data) in got {
            let w = &want[&name];
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex, w["hex"].as_str().unwrap(), "protocol {proto}: {name}");
            let ws: Vec<u64> = serde_json::from_value(w["shape"].clone()).unwrap();
            assert_eq!(shape, ws, "protocol {proto}: {name}");
        }
    }
}

// ---- other inputs ------------------------------------------------------------

/// Runs `convert` with a guard: a run still going after a minute is killed
/// and reported as hung (a guard against blocking, not a timing bound).
fn convert_guarded(dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(support::BIN)
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..600 {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    panic!("convert {args:?} blocked");
}

#[test]
fn a_fifo_or_device_named_as_a_shard_is_refused_without_blocking() {
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("model-00001.safetensors");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", tmp.path().join("model-00002.safetensors")).unwrap();
    for (shard, what) in [
        ("model-00001.safetensors", "FIFO"),
        ("model-00002.safetensors", "character device"),
    ] {
        let index =
            format!(r#"{{"metadata": {{"total_size": 8}}, "weight_map": {{"w": "{shard}"}}}}"#);
        for (name, pt) in [
            ("model.safetensors.index.json", false),
            ("pytorch_model.bin.index.json", true),
        ] {
            if pt {
                let link = tmp.path().join(shard.replace(".safetensors", ".bin"));
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(tmp.path().join(shard), &link).unwrap();
            }
            let index = if pt {
                index.replace(".safetensors\"", ".bin\"")
            } else {
                index.clone()
            };
            std::fs::write(tmp.path().join(name), &index).unwrap();
            let r = convert_guarded(
                tmp.path(),
                &[name, "-o", "out.safetensors", "--report", "json"],
            );
            assert_eq!(
                r.status.code(),
                Some(1),
                "{name}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            let (kind, msg) = report_error(&r);
            assert_eq!(kind, "not_regular_file", "{name}: {msg}");
            assert!(msg.contains(what), "{msg}");
        }
    }
}

/// `/dev/zero` as an index or a raw manifest: refused at its first byte,
/// having read (and allocated) kilobytes, not the 100 MB cap.
#[test]
fn dev_zero_as_an_index_or_manifest_fails_at_its_first_byte() {
    use safetensors_stream::index::ShardIndex;
    use safetensors_stream::source::RawSpec;
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let index = tmp.path().join("model.safetensors.index.json");
    std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
    let (r, peak) = crate::alloc::peak_during(|| ShardIndex::from_json_file(&index));
    let e = r.unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Index(IndexError::IndexJson(_))),
        "{e}"
    );
    assert_eq!(e.offset(), Some(0));
    assert!(peak < 1 << 20, "peak {peak}");
    let (r, peak) =
        crate::alloc::peak_during(|| RawSpec::from_manifest_file(Path::new("/dev/zero")));
    assert!(r.is_err());
    assert!(peak < 1 << 20, "peak {peak}");
    // Through the binary, one line.
    let r = convert_guarded(
        tmp.path(),
        &["model.safetensors.index.json", "-o", "out.safetensors"],
    );
    assert_eq!(r.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&r.stderr).lines().count(), 1);
}

/// The densest plain pickle (one `None` per byte, a 32-byte value each)
/// fits its budget, and a 1 MB one stays far under 256 MiB.
#[test]
fn the_densest_plain_pickle_fits_its_budget() {
    let _g = crate::alloc::serial();
    let mut p = Pickle::new();
    p.op(b"](");
    p.op(&vec![b'N'; 990_000]);
    p.op(b"e");
    let pickle = p.stop();
    let (result, peak) =
        crate::alloc::peak_during(|| unpickle(&pickle, Limits::for_input(pickle.len())));
    let (v, _) = result.unwrap();
    assert_eq!(v.len(), 990_001);
    eprintln!("pickle {} bytes, peak {peak}", pickle.len());
    assert!(peak < 256 << 20, "peak {peak}");
}

/// A header whose one metadata value is a 90 MB string (plain, and with an
/// escape every 8 bytes): read within 3x the header + 64 MiB.
#[test]
fn a_90_mb_metadata_string_is_read_within_the_header_bound() {
    use safetensors_stream::header::Rules;
    use safetensors_stream::source::read_file_header;
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    for (what, unit) in [("plain", "abcdefgh"), ("escaped", "abcdef\\n")] {
        let value = unit.repeat(90_000_000 / 8);
        let json = format!(
            r#"{{"__metadata__":{{"big":"{value}"}},"t":{{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}}}"#
        );
        drop(value);
        let mut file = (json.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(json.as_bytes());
        file.push(0);
        let n = json.len();
        drop(json);
        let path = tmp.path().join("meta.safetensors");
        std::fs::write(&path, &file).unwrap();
        drop(file);
        let (h, peak) = crate::alloc::peak_during(|| read_file_header(&path, Rules::STRICT));
        let h = h.unwrap();
        assert_eq!(h.tensors.len(), 1);
        drop(h);
        eprintln!(
            "{what}: header {n} bytes, peak {peak} ({:.2}x)",
            peak as f64 / n as f64
        );
        assert!(peak <= 3 * n + (64 << 20), "{what}: peak {peak} for {n}");
    }
}

/// Issue 25: a sharded output holds every shard's temp file open until the
/// set commits, so 1,200 shards failed at ~507 under `ulimit -n 1024`. The
/// binary raises its soft limit to the hard one: 300 shards under a soft
/// limit of 64 (when the hard limit allows more) commit whole.
#[test]
fn more_shards_than_the_soft_open_file_limit() {
    let _g = crate::alloc::serial();
    let (_, hard) = open_file_limits();
    if hard < 400 {
        eprintln!("skipped: the hard limit on open files is {hard}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..300).map(|i| format!("t{i:03}")).collect();
    let tensors: Vec<(&str, Vec<u8>)> = names.iter().map(|n| (n.as_str(), floats(64))).collect();
    let input = dir.path().join("many.safetensors");
    std::fs::write(&input, support::faults::safetensors_bytes(&tensors)).unwrap();
    let script = format!(
        "ulimit -Sn 64 && exec {} {} --max-shard-size 300B -o {}",
        env!("CARGO_BIN_EXE_safetensors-convert"),
        input.display(),
        dir.path().join("out/model.safetensors").display()
    );
    let o = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let shards = std::fs::read_dir(dir.path().join("out")).unwrap().count();
    assert_eq!(shards, 301, "300 shards and the index");
}

/// (soft, hard) limits on open files of this process.
fn open_file_limits() -> (u64, u64) {
    let l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    (l.current.unwrap_or(u64::MAX), l.maximum.unwrap_or(u64::MAX))
}

// ---- header memory -----------------------------------------------------------

/// Memo keys handed out in turn, as Python's pickler does.
struct Memo<'a> {
    p: &'a mut Pickle,
    next: u32,
    shared: std::collections::HashMap<&'static str, u32>,
}

impl Memo<'_> {
    /// Memoizes the value just written.
    fn put(&mut self) -> u32 {
        self.p.memo(self.next);
        self.next += 1;
        self.next - 1
    }
    /// A string or global written once and recalled after (`"storage"`,
    /// `"cpu"`, `_rebuild_tensor_v2`): `write` writes it the first time.
    fn once(&mut self, what: &'static str, write: impl FnOnce(&mut Pickle)) {
        match self.shared.get(what) {
            Some(&k) => {
                self.p.recall(k);
            }
            None => {
                write(self.p);
                let k = self.put();
                self.shared.insert(what, k);
            }
        }
    }
    /// `_rebuild_tensor_v2(("storage", FloatStorage, KEY, "cpu", 1), 0, (1,), (1,), False, OrderedDict())`.
    fn tensor(&mut self, key: &str, hooks: u32) {
        self.once("rebuild", |p| {
            p.global("torch._utils", "_rebuild_tensor_v2");
        });
        self.p.op(b"((");
        self.once("storage", |p| {
            p.str(b"storage");
        });
        self.once("float", |p| {
            p.global("torch", "FloatStorage");
        });
        self.p.str(key.as_bytes());
        self.put();
        self.once("cpu", |p| {
            p.str(b"cpu");
        });
        self.p.op(b"K\x01t");
        self.put();
        self.p.op(b"QK\x00K\x01\x85");
        self.put();
        self.p.op(b"K\x01\x85");
        self.put();
        self.p.op(b"\x89").recall(hooks).op(b")R");
        self.put();
        self.p.op(b"t");
        self.put();
        self.p.op(b"R");
        self.put();
    }
}

/// The `data.pkl` of `torch.save(state_dict)` for `n` one-float tensors
/// `layer.{i}.w`, each on its own storage `i`, byte for byte as torch
/// writes it (protocol 2): an `OrderedDict` set 1,000 items at a time,
/// every string, tuple, global and object memoized.
pub(crate) fn state_dict_pickle(n: usize) -> Vec<u8> {
    let mut p = Pickle::new();
    let mut m = Memo {
        p: &mut p,
        next: 0,
        shared: Default::default(),
    };
    m.p.global("collections", "OrderedDict");
    let od = m.put();
    m.p.op(b")R");
    m.put();
    let all: Vec<usize> = (0..n).collect();
    for batch in all.chunks(1000) {
        if batch.len() > 1 {
            m.p.op(b"(");
        }
        for &i in batch {
            m.p.str(format!("layer.{i}.w").as_bytes());
            m.put();
            m.tensor(&i.to_string(), od);
        }
        m.p.op(if batch.len() > 1 { b"u" } else { b"s" });
    }
    p.stop()
}

#[test]
fn the_state_dict_pickle_is_torchs() {
    let _g = crate::alloc::serial();
    // pickle.dumps of the same three tensors through torch's persistent_id.
    let torch = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01(X\t\x00\x00\x00layer.0.wq\x02ctorch._utils\n_rebuild_tensor_v2\nq\x03((X\x07\x00\x00\x00storageq\x04ctorch\nFloatStorage\nq\x05X\x01\x00\x00\x000q\x06X\x03\x00\x00\x00cpuq\x07K\x01tq\x08QK\x00K\x01\x85q\tK\x01\x85q\n\x89h\x00)Rq\x0btq\x0cRq\rX\t\x00\x00\x00layer.1.wq\x0eh\x03((h\x04h\x05X\x01\x00\x00\x001q\x0fh\x07K\x01tq\x10QK\x00K\x01\x85q\x11K\x01\x85q\x12\x89h\x00)Rq\x13tq\x14Rq\x15X\t\x00\x00\x00layer.2.wq\x16h\x03((h\x04h\x05X\x01\x00\x00\x002q\x17h\x07K\x01tq\x18QK\x00K\x01\x85q\x19K\x01\x85q\x1a\x89h\x00)Rq\x1btq\x1cRq\x1du.";
    assert_eq!(state_dict_pickle(3), torch.to_vec());
}

/// A `torch.save` of 50,000 one-float tensors, each on its own storage:
/// opening it (the zip's directory, the pickle, the names and views),
/// counted by the allocator, within 3 times its pickle and 3 MiB. Issue
/// 25 asks for 3x + 64 MiB of a million tensors; a floor that large would
/// let any code pass at 50,000, so this one is small: 4.05x (the code
/// before) does not pass.
#[test]
fn a_50_000_tensor_checkpoint_opens_within_3x_its_pickle_and_3_mib() {
    use safetensors_stream::source::open_input;
    use safetensors_stream::SourceOptions;
    let _g = crate::alloc::serial();
    let n = 50_000;
    let pickle = state_dict_pickle(n);
    let keys: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let storages: Vec<(&str, Vec<u8>)> = keys
        .iter()
        .zip(0..)
        .map(|(k, i)| (k.as_str(), (i as f32).to_le_bytes().to_vec()))
        .collect();
    let zip = torch_zip(&pickle, &storages);
    drop(storages);
    drop(keys);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("many.pt");
    std::fs::write(&path, &zip).unwrap();
    drop(zip);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let notice = |_: &safetensors_stream::Note| {};
    let (src, peak) = crate::alloc::peak_during(|| {
        rt.block_on(open_input(&path, &SourceOptions::default(), &notice))
            .unwrap()
    });
    assert_eq!(src.tensors().len(), n);
    assert_eq!(src.tensors()[n - 1].name, format!("layer.{}.w", n - 1));
    let len = pickle.len();
    eprintln!(
        "pickle {len} bytes, open peak {peak} ({:.2}x)",
        peak as f64 / len as f64
    );
    // 3.50x, at the end of the unpickling: the pickle's bytes, the arena
    // (7 values of 12 bytes a tensor, their strings and tuple items in
    // pools), the memo (4 bytes an entry, 1 MiB chunks) and the storages'
    // table (30 bytes each). The walk that names the tensors comes after
    // the bytes and the memo are freed and builds the records the source
    // keeps (a TensorMeta and a 32-byte place each), nothing beside them.
    // 4.05x when the walk built its own list beside interned storage keys
    // and the storages took 48 bytes; 10.12x when values were 40-byte
    // enums in a doubling Vec, each storage had a hash map entry and a zip
    // entry, and each view a copy of its storage key, shape and strides;
    // 16.13x when the directory and the pickle's bytes lived until the
    // tree was built, the memo was a hash map and every 0 and 1 a value.
    assert!(
        peak <= 3 * len + (3 << 20),
        "peak {peak} for a pickle of {len}"
    );
}

static FREED_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Opening a checkpoint whose pickle is 10 MiB or more tells the caller
/// each time a phase has freed memory (the zip's directory, the pickle's
/// bytes, its values): three calls, which the `convert` binary answers
/// with its allocator's collect. A small checkpoint's phases free too
/// little to be worth one: no call. The library calls no allocator itself.
#[test]
fn a_large_checkpoint_tells_the_caller_when_its_phases_free_memory() {
    use safetensors_stream::source::{open_input, FreedMemoryHook};
    use safetensors_stream::SourceOptions;
    use std::sync::atomic::Ordering;
    fn count() {
        FREED_CALLS.fetch_add(1, Ordering::SeqCst);
    }
    // Its 10 MiB pickle would move the counts of a test measuring beside it.
    let _g = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let options = SourceOptions::default().freed_memory(FreedMemoryHook::new(count));
    let calls_opening = |pad: usize| {
        let mut p = Pickle::new();
        p.op(b"}(").str(b"pad").str(&vec![b'x'; pad]);
        p.str(b"w").tensor("0", 1, 0, &[1], &[1]).op(b"u");
        let path = tmp.path().join(format!("pad-{pad}.pt"));
        std::fs::write(&path, torch_zip(&p.stop(), &[("0", floats(1))])).unwrap();
        let before = FREED_CALLS.load(Ordering::SeqCst);
        let src = rt
            .block_on(open_input(
                &path,
                &options,
                &|_: &safetensors_stream::Note| {},
            ))
            .unwrap();
        assert_eq!(src.tensors()[0].name, "w");
        FREED_CALLS.load(Ordering::SeqCst) - before
    };
    assert_eq!(calls_opening(10 << 20), 3);
    assert_eq!(calls_opening(1000), 0);
}
