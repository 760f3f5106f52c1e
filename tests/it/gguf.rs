//! GGUF inputs: every block type bit-identical to gguf-py 0.19's
//! `dequantize` (Q8_K and Q1_0, which it cannot dequantize: to ggml's C
//! reference), then rounded to nearest even, in both byte orders and
//! through both the file and the async paths; plain types copied; the
//! metadata; hostile headers refused by name, without a panic (that they
//! allocate nothing on a claimed count: `tests/memory/gguf.rs`); the
//! binary's subcommands.

use crate::support;
use crate::support::convert_bytes as convert;

use std::collections::BTreeMap;

use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use safetensors_stream::convert::ConvertOptions;
use safetensors_stream::source::gguf::error::GgufError;
use safetensors_stream::source::gguf::header::read_header;
use safetensors_stream::source::{open_input, GgufOptions, SourceOptions};
use safetensors_stream::{Dtype, Error, ErrorKind, SinkOptions};
use support::block_on;
use support::gguf::{fixture as gguf_fixture, parse, Builder};

/// Each tensor's bytes in a safetensors file.
fn tensors_in(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("a safetensors file");
    st.tensors()
        .into_iter()
        .map(|(name, view)| (name, view.data().to_vec()))
        .collect()
}

fn options(to: Option<Dtype>) -> ConvertOptions {
    ConvertOptions::default()
        .sync(false)
        .source(SourceOptions::default().dequantize(to))
}

type Tensors = Arc<BTreeMap<String, Vec<u8>>>;

/// The converted fixture, per (file, output dtype, fast path), converted once.
fn converted(file: &str, to: Option<Dtype>, fast: bool) -> Tensors {
    type Key = (String, Option<Dtype>, bool);
    static DONE: OnceLock<Mutex<BTreeMap<Key, Tensors>>> = OnceLock::new();
    let done = DONE.get_or_init(Default::default);
    let key = (file.to_string(), to, fast);
    if let Some(t) = done.lock().unwrap().get(&key) {
        return t.clone();
    }
    let opts = options(to)
        .fast_path(fast)
        .sink(SinkOptions::default().buffer_size(4096));
    let bytes = convert(&gguf_fixture(file), &opts).unwrap();
    let t = Arc::new(tensors_in(&bytes));
    done.lock().unwrap().insert(key, t.clone());
    t
}

fn expected(file: &str) -> BTreeMap<String, Vec<u8>> {
    tensors_in(&std::fs::read(gguf_fixture(file)).unwrap())
}

/// Checks one quantized tensor in every output dtype, byte order and path.
fn check_type(name: &str) {
    for (to, want) in [
        (None, "expected_bf16.safetensors"),
        (Some(Dtype::BF16), "expected_bf16.safetensors"),
        (Some(Dtype::F32), "expected_f32.safetensors"),
        (Some(Dtype::F16), "expected_f16.safetensors"),
    ] {
        let want = &expected(want)[name];
        for file in ["types_le.gguf", "types_be.gguf"] {
            for fast in [true, false] {
                let got = &converted(file, to, fast)[name];
                assert!(
                    got == want,
                    "{name} in {file} as {to:?} (fast path {fast}) differs from gguf-py"
                );
            }
        }
    }
}

macro_rules! per_type {
    ($($test:ident: $name:literal,)*) => {$(
        #[test]
        fn $test() {
            check_type($name);
        }
    )*};
}

per_type! {
    q4_0_matches_gguf_py: "q4_0",
    q4_1_matches_gguf_py: "q4_1",
    q5_0_matches_gguf_py: "q5_0",
    q5_1_matches_gguf_py: "q5_1",
    q8_0_matches_gguf_py: "q8_0",
    q2_k_matches_gguf_py: "q2_k",
    q3_k_matches_gguf_py: "q3_k",
    q4_k_matches_gguf_py: "q4_k",
    q5_k_matches_gguf_py: "q5_k",
    q6_k_matches_gguf_py: "q6_k",
    iq2_xxs_matches_gguf_py: "iq2_xxs",
    iq2_xs_matches_gguf_py: "iq2_xs",
    iq2_s_matches_gguf_py: "iq2_s",
    iq3_xxs_matches_gguf_py: "iq3_xxs",
    iq3_s_matches_gguf_py: "iq3_s",
    iq1_s_matches_gguf_py: "iq1_s",
    iq1_m_matches_gguf_py: "iq1_m",
    iq4_nl_matches_gguf_py: "iq4_nl",
    q8_k_matches_ggmls_c_reference: "q8_k",
    q1_0_matches_ggmls_c_reference: "q1_0",
    iq4_xs_matches_gguf_py: "iq4_xs",
    tq1_0_matches_gguf_py: "tq1_0",
    tq2_0_matches_gguf_py: "tq2_0",
    mxfp4_matches_gguf_py: "mxfp4",
    nvfp4_matches_gguf_py: "nvfp4",
}

#[test]
fn plain_types_pass_through_in_both_byte_orders() {
    let want = expected("expected_f32.safetensors");
    for name in ["f32", "f16", "bf16", "f64", "i8", "i16", "i32", "i64"] {
        for file in ["types_le.gguf", "types_be.gguf"] {
            for fast in [true, false] {
                let got = &converted(file, Some(Dtype::F32), fast)[name];
                assert!(got == &want[name], "{name} in {file} (fast path {fast})");
            }
        }
    }
}

#[test]
fn the_listing_has_output_dtypes_and_row_major_shapes() {
    let notice = |_: &safetensors_stream::Note| {};
    let src = block_on(open_input(
        &gguf_fixture("types_be.gguf"),
        &SourceOptions::default(),
        &notice,
    ))
    .unwrap();
    let find = |n: &str| src.tensors().iter().find(|t| t.name == n).unwrap().clone();
    assert_eq!(find("q4_k").dtype, Dtype::BF16);
    assert_eq!(find("q4_k").shape, vec![8, 512]);
    assert_eq!(find("f16").dtype, Dtype::F16);
    assert_eq!(find("f16").shape, vec![2, 3, 4]);
    assert_eq!(find("i64").shape, vec![1, 1, 1, 2]);
    assert_eq!(find("f64").dtype, Dtype::F64);
    assert_eq!(find("iq1_m").shape, vec![3, 512]);
    assert_eq!(src.tensors().len(), 33);
    // Without --gguf-metadata, no __metadata__.
    assert!(src.metadata().is_none());
}

#[test]
fn gguf_metadata_copies_scalars_and_counts_the_arrays() {
    let notes = Mutex::new(Vec::new());
    let notice = |m: &safetensors_stream::Note| notes.lock().unwrap().push(m.to_string());
    let opts = SourceOptions::default().gguf(GgufOptions::default().metadata(true));
    let src = block_on(open_input(&gguf_fixture("types_le.gguf"), &opts, &notice)).unwrap();
    let md = src.metadata().unwrap();
    assert_eq!(md["general.architecture"], "llama");
    assert_eq!(md["test.u64"], "9223372036854775809");
    assert_eq!(md["test.i8"], "-100");
    assert_eq!(md["test.f32"], "0.5");
    assert_eq!(md["test.bool"], "true");
    assert_eq!(md["test.string"], "quote \" and newline \n");
    assert!(!md.contains_key("test.strings") && !md.contains_key("test.nested"));
    let notes = notes.into_inner().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("skipped 3 array-valued keys")),
        "{notes:?}"
    );
}

// ---- hostile headers ---------------------------------------------------------

fn gguf_error(bytes: &[u8]) -> (GgufError, Error) {
    let e = parse(bytes).expect_err("refused");
    match e.kind() {
        ErrorKind::Gguf(g) => (clone_kind(g), e),
        other => panic!("not a GGUF error: {other:?}"),
    }
}

/// GgufError is not Clone; its Debug text identifies it well enough here.
fn clone_kind(g: &GgufError) -> GgufError {
    match g {
        GgufError::Version1 => GgufError::Version1,
        GgufError::Version(v) => GgufError::Version(*v),
        other => GgufError::Alignment(format!("{other:?}")),
    }
}

#[test]
fn a_good_hand_built_file_parses_in_both_byte_orders() {
    for big in [false, true] {
        let mut b = Builder::new(3, 1, 1, big);
        b.str("general.alignment").u32(4).u32(32);
        b.tensor("w", &[4, 2], 0, 0);
        let bytes = b.data(&[0u8; 32]);
        let h = read_header(&bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(h.big_endian, big);
        assert_eq!(h.version, 3);
        assert_eq!(h.tensor_count(), 1);
    }
}

#[test]
fn version_1_is_refused_by_name_and_2_is_read() {
    let (k, e) = gguf_error(&Builder::new(1, 0, 0, false).data(&[]));
    assert!(matches!(k, GgufError::Version1));
    assert!(
        e.to_string().contains("GGUF version 1 is not supported"),
        "{e}"
    );
    let (k, _) = gguf_error(&Builder::new(4, 0, 0, false).data(&[]));
    assert!(matches!(k, GgufError::Version(4)));
    parse(&Builder::new(2, 0, 0, false).data(&[])).unwrap();
    parse(&Builder::new(2, 0, 0, true).data(&[])).unwrap();
}

#[test]
fn tensor_rules_are_enforced_by_name() {
    let one = |dims: &[u64], ty: u32, offset: u64, data: usize| {
        let mut b = Builder::new(3, 1, 0, false);
        b.tensor("blk.0.\"odd\"\nname", dims, ty, offset);
        let bytes = b.data(&vec![0u8; data]);
        parse(&bytes).map_err(|e| e.to_string())
    };
    let err = |r: Result<(), String>| r.expect_err("refused");
    // Five dimensions.
    assert!(err(one(&[1, 1, 1, 1, 1], 0, 0, 4)).contains("5 dimensions"));
    // Q8_1: neither gguf-py nor ggml dequantizes it, so it is refused by name.
    let e = err(one(&[32], 9, 0, 40));
    assert!(e.contains("Q8_1 is not supported: neither gguf-py"), "{e}");
    // The codebook-grid IQ types, Q8_K and Q1_0 are read.
    for (ty, bytes) in [
        (16, 66),
        (17, 74),
        (18, 98),
        (19, 50),
        (21, 110),
        (22, 82),
        (29, 56),
    ] {
        one(&[256], ty, 0, bytes).unwrap();
    }
    one(&[256], 15, 0, 292).unwrap();
    one(&[128], 41, 0, 18).unwrap();
    // An unknown type id.
    assert!(err(one(&[4], 99, 0, 16)).contains("unknown ggml tensor type 99"));
    // A row that is not whole blocks.
    assert!(err(one(&[48], 2, 0, 64)).contains("not whole Q4_0 blocks of 32"));
    // Past the end of the file, and offsets that overflow.
    assert!(err(one(&[32], 0, 0, 64)).contains("data runs to byte"));
    // (2^64 - 32 is a multiple of the alignment: the end is what overflows.)
    assert!(err(one(&[1], 0, u64::MAX - 31, 4)).contains("data runs to byte"));
    // Dimensions whose product overflows.
    assert!(err(one(&[1 << 40, 1 << 40], 0, 0, 4)).contains("overflow"));
    // ... in either order, a zero among them or not: the row-major shape is the
    // reverse of the file's, so [0, 2^40, 2^40] would overflow as [2^40, 2^40, 0].
    for dims in [
        [0, 1 << 40, 1 << 40],
        [1 << 40, 1 << 40, 0],
        [1 << 40, 0, 1 << 40],
    ] {
        assert!(err(one(&dims, 0, 0, 4)).contains("overflow"), "{dims:?}");
    }
    // An empty tensor whose other dimensions fit is read.
    one(&[0, 1 << 40, 1 << 20], 0, 0, 4).unwrap();
    // The name is escaped in the message.
    let e = err(one(&[48], 2, 0, 64));
    assert!(e.contains("blk.0.\\\"odd\\\"\\nname"), "{e}");
    // And a good one is accepted.
    one(&[32], 2, 0, 18).unwrap();
}

#[test]
fn overlapping_and_duplicate_tensors_are_refused() {
    let mut b = Builder::new(3, 2, 0, false);
    b.tensor("a", &[16], 0, 0).tensor("b", &[8], 0, 32);
    let e = parse(&b.data(&[0u8; 96])).unwrap_err().to_string();
    assert!(e.contains("tensors \"a\" and \"b\" overlap"), "{e}");
    let mut b = Builder::new(3, 2, 0, false);
    b.tensor("a", &[4], 0, 0).tensor("a", &[4], 0, 16);
    let e = parse(&b.data(&[0u8; 32])).unwrap_err().to_string();
    assert!(e.contains("tensor \"a\" appears twice"), "{e}");
    // Back to back, each at a multiple of the alignment, is fine.
    let mut b = Builder::new(3, 2, 0, false);
    b.tensor("a", &[4], 0, 0).tensor("b", &[4], 0, 32);
    parse(&b.data(&[0u8; 48])).unwrap();
}

#[test]
fn a_tensor_off_the_alignment_is_refused_by_name_and_offset() {
    // ggml's gguf.cpp refuses a tensor not at a multiple of general.alignment
    // (32 when absent): "tensor 'b' has offset 16, expected 32".
    let mut b = Builder::new(3, 2, 0, false);
    b.tensor("a", &[4], 0, 0).tensor("b", &[4], 0, 16);
    let bytes = b.data(&[0u8; 32]);
    let e = parse(&bytes).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Gguf(GgufError::Misaligned {
                offset: 16,
                alignment: 32
            })
        ),
        "{e:?}"
    );
    assert_eq!(e.tensor(), Some("b"));
    // The byte offset is where b's info starts, after its name: past the
    // 24-byte preamble, a's info (8 + 1 name, 4 + 8 dims, 4 type, 8 offset)
    // and b's name (8 + 1).
    assert_eq!(e.offset(), Some(24 + 33 + 9));
    let text = e.to_string();
    assert!(
        text.contains("offset 16 is not a multiple of general.alignment 32"),
        "{text}"
    );
    // A declared alignment is the one checked: 16 is aligned to 16, 8 is not.
    let aligned = |align: u32, offset: u64| {
        let mut b = Builder::new(3, 2, 1, false);
        b.str("general.alignment").u32(4).u32(align);
        b.tensor("a", &[2], 0, 0).tensor("b", &[2], 0, offset);
        parse(&b.data(&[0u8; 64]))
    };
    aligned(16, 16).unwrap();
    aligned(8, 8).unwrap();
    let e = aligned(16, 8).unwrap_err().to_string();
    assert!(
        e.contains("offset 8 is not a multiple of general.alignment 16"),
        "{e}"
    );
    // Through the library, the error names the input too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("misaligned.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let e = convert(&path, &options(None)).unwrap_err();
    assert!(
        e.input().is_some_and(|i| i.contains("misaligned.gguf")),
        "{e}"
    );
    assert_eq!(e.tensor(), Some("b"));
}

#[test]
fn metadata_rules_are_enforced() {
    // general.alignment must be a u32 power of two.
    for (ty, value) in [(4u32, 3u64), (4, 0), (10, 32)] {
        let mut b = Builder::new(3, 0, 1, false);
        b.str("general.alignment").u32(ty);
        if ty == 4 {
            b.u32(value as u32)
        } else {
            b.u64(value)
        };
        let e = parse(&b.data(&[])).unwrap_err();
        // At the key-value, right after the 24-byte preamble.
        assert_eq!(e.offset(), Some(24), "{e}");
        let e = e.to_string();
        assert!(e.contains("general.alignment"), "{e}");
    }
    // An unknown value type, named with its key.
    let mut b = Builder::new(3, 0, 1, false);
    b.str("x.y").u32(13).u64(0);
    let e = parse(&b.data(&[])).unwrap_err().to_string();
    assert!(e.contains("\"x.y\" has unknown value type 13"), "{e}");
    // A key twice.
    let mut b = Builder::new(3, 0, 2, false);
    b.str("k").u32(0).out.push(1);
    b.str("k").u32(0).out.push(2);
    let e = parse(&b.data(&[])).unwrap_err().to_string();
    assert!(e.contains("\"k\" appears twice"), "{e}");
    // Arrays nested past the limit.
    let mut b = Builder::new(3, 0, 1, false);
    b.str("deep").u32(9);
    for _ in 0..20 {
        b.u32(9).u64(1);
    }
    b.u32(0).u64(0);
    let e = parse(&b.data(&[0u8; 64])).unwrap_err().to_string();
    assert!(e.contains("deeper than 8"), "{e}");
    // Every truncation of a good file is an error, never a panic.
    let good = std::fs::read(gguf_fixture("types_le.gguf")).unwrap();
    let h = read_header(&good[..], good.len() as u64).unwrap();
    for cut in (0..h.data_start as usize).step_by(7) {
        assert!(parse(&good[..cut]).is_err(), "cut at {cut}");
    }
}

// ---- the binary ----------------------------------------------------------------

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
}

#[test]
fn the_binary_converts_inspects_and_validates_a_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let input = gguf_fixture("types_be.gguf");
    let o = bin()
        .arg(&input)
        .args(["--dequantize-to", "F32", "--gguf-metadata", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::stderr(&o));
    let bytes = std::fs::read(&out).unwrap();
    let got = tensors_in(&bytes);
    let want = expected("expected_f32.safetensors");
    assert_eq!(got, want);
    let (_, md) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(md.metadata().as_ref().unwrap()["general.name"], "fixture");

    // From standard input: spooled, same bytes.
    let piped = dir.path().join("piped.safetensors");
    let o = bin()
        .args(["-", "--dequantize-to", "F32", "--gguf-metadata", "-o"])
        .arg(&piped)
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert_eq!(tensors_in(&std::fs::read(&piped).unwrap()), want);

    // To standard output (the async path), BF16 by default.
    let o = bin().arg(&input).args(["-o", "-"]).output().unwrap();
    assert!(o.status.success(), "{}", support::stderr(&o));
    let got = tensors_in(&o.stdout);
    assert_eq!(got["q6_k"], expected("expected_bf16.safetensors")["q6_k"]);

    // inspect lists tensors and metadata; --json too.
    let o = bin().arg("inspect").arg(&input).output().unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(o.status.success() && text.contains("q4_k") && text.contains("general.name"));
    assert!(text.contains("[8, 512]"), "{text}");
    let o = bin()
        .args(["inspect", "--json"])
        .arg(&input)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["metadata"]["test.u32"], "4000000000");

    // validate says what it is.
    let o = bin().arg("validate").arg(&input).output().unwrap();
    assert!(!o.status.success());
    assert!(
        support::stderr(&o).contains("a GGUF file, not a safetensors file"),
        "{}",
        support::stderr(&o)
    );

    // --dry-run --json and --report json.
    let o = bin()
        .arg(&input)
        .args(["--dry-run", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::stderr(&o));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(plan.to_string().contains("q5_k"));
    let report = dir.path().join("r.safetensors");
    let o = bin()
        .arg(&input)
        .args(["--report", "json", "-o"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&support::stderr(&o)).unwrap();
    assert!(r.to_string().contains("tensors"), "{r}");
}

#[test]
fn the_binary_refuses_a_bad_gguf_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Builder::new(3, 1, 0, false);
    b.tensor("w", &[32], 9, 0);
    let path = support::write(dir.path(), "q8_1.gguf", &b.data(&[0u8; 40]));
    let o = bin()
        .arg(&path)
        .args(["-o"])
        .arg(dir.path().join("o.safetensors"))
        .output()
        .unwrap();
    assert_eq!(support::code(&o), 1);
    let err = support::stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("Q8_1 is not supported") && err.contains("\"w\""),
        "{err}"
    );
}

#[test]
fn a_metadata_string_over_the_callers_limit_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Builder::new(3, 1, 1, false);
    b.str("general.name").u32(8).str(&"x".repeat(100));
    b.tensor("w", &[4, 2], 0, 0);
    let path = dir.path().join("named.gguf");
    std::fs::write(&path, b.data(&[0u8; 32])).unwrap();
    let notice = |_: &safetensors_stream::Note| {};
    let open = |limit: u64| {
        let limits = safetensors_stream::Limits::default()
            .with(safetensors_stream::Limit::GgufStringBytes, limit)
            .unwrap();
        block_on(open_input(
            &path,
            &SourceOptions::default().limits(limits),
            &notice,
        ))
    };
    assert!(open(100).is_ok(), "at the limit");
    let e = open(99).err().expect("over the limit");
    let ErrorKind::Limit(refusal) = e.kind() else {
        panic!("not a limit: {e}");
    };
    assert_eq!((refusal.limit, refusal.value), ("gguf-string-bytes", 99));
    assert_eq!(
        refusal.raise.as_deref(),
        Some("--limit gguf-string-bytes=198")
    );
    assert!(e.to_string().contains("string of 100 bytes"), "{e}");
    // The binary: refused below, converted at the string's length.
    let out = dir.path().join("out.safetensors");
    let run = |limit: &str| {
        bin()
            .arg(&path)
            .args(["--limit", limit, "-o"])
            .arg(&out)
            .output()
            .unwrap()
    };
    let o = run("gguf-string-bytes=64");
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("--limit gguf-string-bytes=128"), "{stderr}");
    assert!(!out.exists());
    assert!(run("gguf-string-bytes=100").status.success());
}

#[test]
fn a_tensor_count_over_the_callers_limit_is_refused_before_listing() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Builder::new(3, 3, 0, false);
    for (k, name) in ["a", "b", "c"].iter().enumerate() {
        b.tensor(name, &[8], 0, 32 * k as u64);
    }
    let path = dir.path().join("three.gguf");
    std::fs::write(&path, b.data(&[0u8; 96])).unwrap();
    let notice = |_: &safetensors_stream::Note| {};
    let open = |limit: u64| {
        let limits = safetensors_stream::Limits::default()
            .with(safetensors_stream::Limit::TensorCount, limit)
            .unwrap();
        block_on(open_input(
            &path,
            &SourceOptions::default().limits(limits),
            &notice,
        ))
    };
    assert!(open(3).is_ok(), "at the limit");
    let e = open(2).err().expect("over the limit");
    let ErrorKind::Limit(refusal) = e.kind() else {
        panic!("not a limit: {e}");
    };
    assert_eq!((refusal.limit, refusal.value), ("tensor-count", 2));
    // Refused by the header's count (its offset), not once listed.
    assert!(
        e.to_string().contains("the GGUF header lists 3 tensors"),
        "{e}"
    );
}
