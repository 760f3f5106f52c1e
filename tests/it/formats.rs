//! ONNX models and Flax MessagePack files: every fixture (written by onnx
//! 1.23 and flax 0.12, see `fixtures/onnx/make_onnx.py` and
//! `fixtures/msgpack/make_msgpack.py`) converts byte-identical to the file
//! `safetensors.numpy.save_file` wrote from the same arrays, through the
//! library (file span and reader paths) and the binary (file, standard
//! input, standard output); listings match; hostile files (truncated,
//! lengths past the end, external data leading out of the model's folder,
//! deep nesting, a 2^60-element claim) are refused by name, with exit 1
//! and nothing left behind (that they allocate nothing on a claim:
//! `tests/memory/formats.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;
use crate::support::convert_bytes as convert;
use safetensors_stream::convert::ConvertOptions;
use safetensors_stream::source::msgpack::error::MsgpackError;
use safetensors_stream::source::msgpack::MsgpackSource;
use safetensors_stream::source::onnx::error::OnnxError;
use safetensors_stream::source::{open_input, Source, SourceOptions};
use safetensors_stream::{Category, Error, ErrorKind, SinkOptions};
use support::formats::{fb, fv, map1, model, ndarray, tensor, varint};
use support::{block_on, fixtures};

/// Each fixture and the file the reference wrote from the same arrays.
const CASES: [(&str, &str); 7] = [
    ("onnx/raw.onnx", "onnx/expected/raw.safetensors"),
    ("onnx/typed.onnx", "onnx/expected/typed.safetensors"),
    (
        "onnx/external/model.onnx",
        "onnx/expected/external.safetensors",
    ),
    (
        "onnx/external/handmade.onnx",
        "onnx/expected/handmade.safetensors",
    ),
    (
        "msgpack/nested.msgpack",
        "msgpack/expected/nested.safetensors",
    ),
    (
        "msgpack/model.msgpack",
        "msgpack/expected/model.safetensors",
    ),
    (
        "msgpack/chunked.msgpack",
        "msgpack/expected/chunked.safetensors",
    ),
];

fn fixture(p: &str) -> PathBuf {
    fixtures().join(p)
}

#[test]
fn every_fixture_converts_byte_identical_through_both_library_paths() {
    for (input, expected) in CASES {
        let want = std::fs::read(fixture(expected)).unwrap();
        for fast in [true, false] {
            let opts = ConvertOptions::default()
                .sync(false)
                .fast_path(fast)
                .sink(SinkOptions::default().buffer_size(4096));
            let got = convert(&fixture(input), &opts).unwrap();
            assert!(
                got == want,
                "{input} (fast path {fast}) differs from {expected}"
            );
        }
    }
}

/// Name -> (dtype, shape) of a safetensors file.
fn header_of(bytes: &[u8]) -> BTreeMap<String, (String, Vec<u64>)> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, v)| {
            let shape = v.shape().iter().map(|&d| d as u64).collect();
            (n, (format!("{:?}", v.dtype()), shape))
        })
        .collect()
}

fn open(path: &Path) -> Result<Box<dyn Source>, Error> {
    block_on(open_input(path, &SourceOptions::default(), &|_| {}))
}

#[test]
fn listings_name_every_array_with_its_dtype_and_shape() {
    for (input, expected) in CASES {
        let src = open(&fixture(input)).unwrap();
        let listed: BTreeMap<String, (String, Vec<u64>)> = src
            .tensors()
            .iter()
            .map(|t| (t.name.clone(), (t.dtype.to_string(), t.shape.clone())))
            .collect();
        let want = header_of(&std::fs::read(fixture(expected)).unwrap());
        assert_eq!(listed, want, "{input}");
    }
    // The file's own order: an ONNX graph's initializers as listed, flax's sorted keys.
    let names: Vec<String> = open(&fixture("onnx/raw.onnx"))
        .unwrap()
        .tensors()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names[..3], ["layer.0.weight", "layer.0.bias", "half"]);
    let src = open(&fixture("msgpack/chunked.msgpack")).unwrap();
    assert!(src.file_span(0).is_none() && src.open_blocking(0).is_some());
    assert_eq!(src.tensors()[0].name, "big");
}

// ---- hostile ONNX ------------------------------------------------------------

fn onnx_error(bytes: &[u8]) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let path = support::write(dir.path(), "m.onnx", bytes);
    let e = open(&path).err().expect("refused");
    assert_eq!(e.category(), Category::BadInput, "{e}");
    e
}

/// A hostile file, and what its error must be.
type Case<E> = (Vec<u8>, fn(&E) -> bool);

fn onnx_kind(e: &Error) -> &OnnxError {
    match e.kind() {
        ErrorKind::Onnx(o) => o,
        other => panic!("not an ONNX error: {other:?} ({e})"),
    }
}

#[test]
fn a_hand_built_model_reads_packed_and_unpacked_fields() {
    // float_data unpacked (one fixed32 field per value), dims packed, int64_data packed.
    let f: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|v| [vec![0x25], v.to_le_bytes().to_vec()].concat())
        .collect();
    let packed_dims = fb(1, &[2]);
    let w = [packed_dims, fv(2, 1), fb(8, b"w"), f].concat();
    let i64s: Vec<u8> = [varint(5), varint(u64::MAX)].concat();
    let n = tensor("n", 7, &[2], &fb(7, &i64s));
    let dir = tempfile::tempdir().unwrap();
    let path = support::write(dir.path(), "m.onnx", &model(&[w, n]));
    let got = convert(&path, &ConvertOptions::default().sync(false)).unwrap();
    let st = safetensors::SafeTensors::deserialize(&got).unwrap();
    let w = st.tensor("w").unwrap();
    assert_eq!(
        w.data(),
        [1.5f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat()
    );
    let n = st.tensor("n").unwrap();
    assert_eq!(
        n.data(),
        [5i64.to_le_bytes(), (-1i64).to_le_bytes()].concat()
    );
}

#[test]
fn hostile_models_are_refused_by_name_with_offsets() {
    let raw4 = fb(9, &[0; 4]);
    // 2^60 elements claimed over 4 bytes of data: more bits than 64 bits count.
    let e = onnx_error(&model(&[tensor("big", 1, &[1 << 30, 1 << 30], &raw4)]));
    assert_eq!(
        (e.kind().name(), e.tensor()),
        ("shape_overflow", Some("big")),
        "{e}"
    );
    // 2^40 elements over 4 bytes.
    let e = onnx_error(&model(&[tensor("big", 1, &[1 << 20, 1 << 20], &raw4)]));
    assert!(matches!(onnx_kind(&e), OnnxError::DataLength { .. }), "{e}");
    assert!(e.to_string().contains("\"big\""), "{e}");
    // raw_data claiming 2^40 bytes in a tiny file.
    let claim = [tensor("w", 1, &[4], &[]), vec![0x4a], varint(1 << 40)].concat();
    let e = onnx_error(&model(&[claim]));
    assert!(matches!(onnx_kind(&e), OnnxError::PastEnd { .. }), "{e}");
    // A graph longer than the file.
    let mut m = model(&[tensor("w", 1, &[1], &raw4)]);
    m.truncate(m.len() - 2);
    let e = onnx_error(&m);
    assert!(matches!(onnx_kind(&e), OnnxError::PastEnd { .. }), "{e}");
    assert_eq!(e.offset(), Some(8), "{e}");
    let cases: Vec<Case<OnnxError>> = vec![
        (model(&[tensor("w", 1, &[2], &raw4)]), |o| {
            matches!(
                o,
                OnnxError::DataLength {
                    expected: 8,
                    actual: 4,
                    ..
                }
            )
        }),
        (
            model(&[tensor("w", 1, &[1], &raw4), tensor("w", 1, &[1], &raw4)]),
            |o| matches!(o, OnnxError::DuplicateTensor(_)),
        ),
        (model(&[tensor("s", 8, &[1], &[])]), |o| {
            matches!(o, OnnxError::Unsupported { name: "STRING", .. })
        }),
        (model(&[tensor("u", 0, &[1], &raw4)]), |o| {
            matches!(o, OnnxError::DataType(0))
        }),
        (model(&[tensor("n", 1, &[u64::MAX], &raw4)]), |o| {
            matches!(o, OnnxError::NegativeDim(-1))
        }),
        (model(&[tensor("d", 1, &[1; 65], &raw4)]), |o| {
            matches!(o, OnnxError::TooManyDims)
        }),
        (model(&[tensor("e", 1, &[3], &[])]), |o| {
            matches!(o, OnnxError::NoData { .. })
        }),
        (model(&[tensor("c", 1, &[3], &fb(4, &[0; 8]))]), |o| {
            matches!(
                o,
                OnnxError::ElementCount {
                    expected: 3,
                    actual: 2,
                    ..
                }
            )
        }),
        (model(&[tensor("p", 6, &[1], &fb(5, &[0x80]))]), |o| {
            matches!(o, OnnxError::PackedVarint(_))
        }),
        (model(&[tensor("g", 1, &[1], &fb(3, &[]))]), |o| {
            matches!(o, OnnxError::Segment)
        }),
        (model(&[[fv(2, 1), raw4.clone()].concat()]), |o| {
            matches!(o, OnnxError::NoName)
        }),
        // A group (wire type 3) in a tensor.
        (model(&[tensor("w", 1, &[1], &[0x1b])]), |o| {
            matches!(o, OnnxError::WireType { wire: 3, .. })
        }),
        (
            model(&[tensor("x", 1, &[1], &[fb(14, &[]), raw4.clone()].concat())]),
            |o| matches!(o, OnnxError::FieldType { field: 14, .. }),
        ),
    ];
    for (i, (bytes, is)) in cases.into_iter().enumerate() {
        let e = onnx_error(&bytes);
        assert!(is(onnx_kind(&e)), "case {i}: {e}");
        assert!(e.offset().is_some(), "case {i}: {e}");
    }
}

#[test]
fn every_cut_inside_the_graph_is_refused() {
    let whole = std::fs::read(fixture("onnx/raw.onnx")).unwrap();
    // The graph is field 7 after ir_version and producer_name, its length a 2-byte varint.
    assert_eq!(whole[13], 0x3a);
    let graph_len = usize::from(whole[14] & 0x7f) | usize::from(whole[15]) << 7;
    let graph_end = 16 + graph_len;
    let dir = tempfile::tempdir().unwrap();
    for cut in 14..graph_end {
        let path = support::write(dir.path(), "cut.onnx", &whole[..cut]);
        let e = open(&path)
            .err()
            .unwrap_or_else(|| panic!("cut at {cut} opened"));
        assert!(matches!(e.kind(), ErrorKind::Onnx(_)), "cut {cut}: {e}");
    }
}

#[test]
fn external_data_stays_inside_the_models_folder() {
    for (name, words) in [
        ("escape_dotdot", "leads out of the model's folder (`..`)"),
        ("escape_abs", "is an absolute path"),
    ] {
        let e = open(&fixture(&format!("onnx/hostile/{name}.onnx")))
            .err()
            .expect("refused");
        assert!(e.to_string().contains(words), "{name}: {e}");
        assert_eq!(e.tensor(), Some("w"));
    }
    // A symbolic link beside the model that leads out of its folder.
    let top = tempfile::tempdir().unwrap();
    let folder = top.path().join("m");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(top.path().join("secret.bin"), [0u8; 48]).unwrap();
    let ext = fixture("onnx/external");
    std::fs::copy(ext.join("handmade.onnx"), folder.join("handmade.onnx")).unwrap();
    std::os::unix::fs::symlink("../secret.bin", folder.join("a.bin")).unwrap();
    let e = open(&folder.join("handmade.onnx")).err().expect("refused");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A FIFO as the external file: refused by its open handle, never waited on.
    std::fs::remove_file(folder.join("a.bin")).unwrap();
    let fifo = rustix::fs::FileType::Fifo;
    let mode = rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR;
    rustix::fs::mknodat(rustix::fs::CWD, folder.join("a.bin"), fifo, mode, 0).unwrap();
    let e = open(&folder.join("handmade.onnx")).err().expect("refused");
    assert!(
        e.to_string()
            .contains("\"a.bin\" is a FIFO, not a regular file"),
        "{e}"
    );
    // Offsets and lengths past the end of the external file.
    std::fs::remove_file(folder.join("a.bin")).unwrap();
    std::fs::write(folder.join("a.bin"), [0u8; 10]).unwrap();
    let e = open(&folder.join("handmade.onnx")).err().expect("refused");
    assert!(e.to_string().contains("runs past the end"), "{e}");
    // The location missing: named.
    std::fs::remove_file(folder.join("a.bin")).unwrap();
    let e = open(&folder.join("handmade.onnx")).err().expect("refused");
    assert!(e.to_string().contains("\"a.bin\" cannot be opened"), "{e}");
}

// ---- hostile MessagePack -----------------------------------------------------

fn msgpack_error(bytes: &[u8]) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let path = support::write(dir.path(), "f.msgpack", bytes);
    let e = open(&path).err().expect("refused");
    assert_eq!(e.category(), Category::BadInput, "{e}");
    e
}

fn msgpack_kind(e: &Error) -> &MsgpackError {
    match e.kind() {
        ErrorKind::Msgpack(m) => m,
        other => panic!("not a MessagePack error: {other:?} ({e})"),
    }
}

#[test]
fn hostile_msgpack_files_are_refused_by_name_with_offsets() {
    // 2^60 elements over 4 bytes, then 2^40.
    let e = msgpack_error(&map1(
        "big",
        &ndarray(&[1 << 30, 1 << 30], "float32", &[0; 4]),
    ));
    assert_eq!(
        (e.kind().name(), e.tensor()),
        ("shape_overflow", Some("big"))
    );
    let e = msgpack_error(&map1(
        "big",
        &ndarray(&[1 << 20, 1 << 20], "float32", &[0; 4]),
    ));
    assert!(
        matches!(msgpack_kind(&e), MsgpackError::DataLength { .. }),
        "{e}"
    );
    assert_eq!(e.tensor(), Some("big"));
    // A bin claiming 4 GiB in a tiny file.
    let mut claim = map1("w", &ndarray(&[1], "uint8", &[7]));
    let n = claim.len();
    claim[n - 5..n - 1].copy_from_slice(&u32::MAX.to_be_bytes());
    let e = msgpack_error(&claim);
    assert!(
        matches!(msgpack_kind(&e), MsgpackError::ExtLength { .. }),
        "{e}"
    );
    // A map claiming 2^32 - 1 entries.
    let e = msgpack_error(&[0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, b'a', 0xc0]);
    assert!(
        matches!(msgpack_kind(&e), MsgpackError::Truncated(_)),
        "{e}"
    );
    // Nested 100 deep.
    let mut deep = vec![0xc0];
    for _ in 0..100 {
        deep = map1("a", &deep);
    }
    let e = msgpack_error(&deep);
    assert!(matches!(msgpack_kind(&e), MsgpackError::TooDeep(64)), "{e}");
    let w = ndarray(&[2], "float32", &[0; 8]);
    let cases: Vec<Case<MsgpackError>> = vec![
        ([map1("w", &w), vec![0]].concat(), |m| {
            matches!(m, MsgpackError::Trailing(1))
        }),
        (map1("w", &[0xc1]), |m| matches!(m, MsgpackError::Reserved)),
        (
            map1("w", &ndarray(&[2], "complex128", &[0; 32])),
            |m| matches!(m, MsgpackError::Dtype(d) if d == "complex128"),
        ),
        (map1("w", &ndarray(&[3], "float32", &[0; 8])), |m| {
            matches!(
                m,
                MsgpackError::DataLength {
                    expected: 12,
                    actual: 8
                }
            )
        }),
        (
            [
                vec![0x82],
                map1("a.b", &w)[1..].to_vec(),
                map1("a", &map1("b", &w))[1..].to_vec(),
            ]
            .concat(),
            |m| matches!(m, MsgpackError::DuplicateTensor(n) if n == "a.b"),
        ),
        (
            [
                vec![0x82],
                map1("a", &w)[1..].to_vec(),
                vec![0xc3],
                w.clone(),
            ]
            .concat(),
            |m| matches!(m, MsgpackError::KeyType("a boolean")),
        ),
        (map1("w", &[0xc7, 2, 1, 0x93, 0x90]), |m| {
            matches!(m, MsgpackError::Truncated(_))
        }),
        (map1("w", &[0xc7, 1, 1, 0x92]), |m| {
            matches!(m, MsgpackError::Ndarray(_))
        }),
    ];
    // Not a map at the top: not recognised as MessagePack, and refused if opened as it.
    let mut f = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut f, &[0x91, 0xc0]).unwrap();
    let e = MsgpackSource::open(f, 2, "list.msgpack").unwrap_err();
    assert!(matches!(msgpack_kind(&e), MsgpackError::NotAMap), "{e}");
    for (i, (bytes, is)) in cases.into_iter().enumerate() {
        let e = msgpack_error(&bytes);
        assert!(is(msgpack_kind(&e)), "case {i}: {e}");
        assert!(e.offset().is_some(), "case {i}: {e}");
    }
}

#[test]
fn chunked_arrays_not_as_flax_writes_them_are_refused() {
    let chunk = |n: usize| ndarray(&[n as u64], "float32", &vec![0; 4 * n]);
    let chunked = |shape: &[u8], chunks: &[u8]| {
        let mut m = vec![0x83];
        m.extend_from_slice(&[0xb9]);
        m.extend_from_slice(b"__msgpack_chunked_array__");
        m.push(0xc3);
        m.extend_from_slice(&[0xa5]);
        m.extend_from_slice(b"shape");
        m.extend_from_slice(shape);
        m.extend_from_slice(&[0xa6]);
        m.extend_from_slice(b"chunks");
        m.extend_from_slice(chunks);
        map1("t", &m)
    };
    let shape5 = [0x81, 0xa1, b'0', 5];
    let good = [vec![0x82, 0xa1, b'0'], chunk(3), vec![0xa1, b'1'], chunk(2)].concat();
    let dir = tempfile::tempdir().unwrap();
    let path = support::write(dir.path(), "ok.msgpack", &chunked(&shape5, &good));
    let src = open(&path).unwrap();
    assert_eq!(src.tensors()[0].shape, [5]);
    for (shape, chunks, words) in [
        (
            vec![0x81, 0xa1, b'0', 6],
            good.clone(),
            "its chunks hold 5 elements",
        ),
        (
            shape5.to_vec(),
            [vec![0x81, 0xa1, b'1'], chunk(5)].concat(),
            "key \"1\" is not \"0\"",
        ),
        (
            shape5.to_vec(),
            [
                vec![0x82, 0xa1, b'0'],
                chunk(3),
                vec![0xa1, b'1'],
                ndarray(&[2], "int32", &[0; 8]),
            ]
            .concat(),
            "dtypes differ",
        ),
        (shape5.to_vec(), vec![0x80], "no chunks"),
    ] {
        let e = msgpack_error(&chunked(&shape, &chunks));
        assert!(matches!(msgpack_kind(&e), MsgpackError::Chunked(_)), "{e}");
        assert!(e.to_string().contains(words), "{words}: {e}");
    }
}

#[test]
fn every_cut_of_a_flax_file_is_refused() {
    let whole = std::fs::read(fixture("msgpack/nested.msgpack")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in 1..whole.len() {
        let path = support::write(dir.path(), "cut.msgpack", &whole[..cut]);
        let e = open(&path)
            .err()
            .unwrap_or_else(|| panic!("cut at {cut} opened"));
        // Until its first key is whole, a cut file is of no format.
        let recognised = cut >= 2;
        let msgpack = matches!(e.kind(), ErrorKind::Msgpack(_));
        assert_eq!(msgpack, recognised, "cut {cut}: {e}");
    }
}

// ---- the binary ----------------------------------------------------------------

fn bin() -> Command {
    Command::new(support::BIN)
}

#[test]
fn the_binary_converts_from_files_standard_input_and_to_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (input, expected)) in CASES.into_iter().enumerate() {
        let want = std::fs::read(fixture(expected)).unwrap();
        let out = dir.path().join(format!("{i}.safetensors"));
        support::converts_to(&fixture(input), &out, &want);
        // To standard output: the readers, not the file spans.
        let o = bin()
            .arg(fixture(input))
            .args(["-o", "-"])
            .output()
            .unwrap();
        assert!(o.status.success() && o.stdout == want, "{input} to stdout");
    }
    // From standard input: spooled; an ONNX model's external data has no folder there.
    for (input, expected) in [CASES[0], CASES[1], CASES[4], CASES[6]] {
        let o = bin()
            .args(["-", "-o", "-"])
            .stdin(std::fs::File::open(fixture(input)).unwrap())
            .output()
            .unwrap();
        assert!(o.status.success(), "{input}: {}", support::stderr(&o));
        assert!(
            o.stdout == std::fs::read(fixture(expected)).unwrap(),
            "{input}"
        );
        assert!(support::stderr(&o).contains("spooling"));
    }
    let o = bin()
        .args(["-", "-o", "-"])
        .stdin(std::fs::File::open(fixture("onnx/external/model.onnx")).unwrap())
        .output()
        .unwrap();
    assert_eq!(support::code(&o), 1);
    assert!(
        support::stderr(&o).contains("no folder"),
        "{}",
        support::stderr(&o)
    );
}

#[test]
fn the_binary_inspects_validates_plans_and_reports() {
    for (input, what, name, skipped) in [
        ("onnx/typed.onnx", "an ONNX model", "layer.0.weight", None),
        (
            "msgpack/nested.msgpack",
            "a Flax MessagePack file",
            "params.Dense_0.kernel",
            Some("skipped 4 values that are not arrays: lr, note, nothing, step"),
        ),
    ] {
        let input = fixture(input);
        let o = bin().arg("inspect").arg(&input).output().unwrap();
        let text = String::from_utf8(o.stdout).unwrap();
        assert!(o.status.success() && text.contains(name), "{text}");
        let o = bin()
            .args(["inspect", "--json"])
            .arg(&input)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v.to_string().contains(name), "{v}");
        let o = bin().arg("validate").arg(&input).output().unwrap();
        assert_eq!(support::code(&o), 1);
        let err = support::stderr(&o);
        assert!(
            err.contains(&format!("{what}, not a safetensors file")),
            "{err}"
        );
        let o = bin()
            .arg(&input)
            .args(["--dry-run", "--json"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", support::stderr(&o));
        let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(plan.to_string().contains(name), "{plan}");
        let dir = tempfile::tempdir().unwrap();
        let o = bin()
            .arg(&input)
            .args(["--report", "json", "-o"])
            .arg(dir.path().join("r.safetensors"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", support::stderr(&o));
        let err = support::stderr(&o);
        if let Some(words) = skipped {
            assert!(err.contains(words), "{err}");
        }
        let report = err.lines().last().unwrap();
        let r: serde_json::Value = serde_json::from_str(report).unwrap();
        assert!(r.to_string().contains("tensors"), "{r}");
    }
}

#[test]
fn the_binary_refuses_hostile_files_in_one_line_and_leaves_nothing() {
    let inputs = tempfile::tempdir().unwrap();
    let big = model(&[tensor("big", 1, &[1 << 30, 1 << 30], &fb(9, &[0; 4]))]);
    let deep = (0..100).fold(vec![0xc0], |v, _| map1("a", &v));
    let mut cut = std::fs::read(fixture("msgpack/chunked.msgpack")).unwrap();
    cut.truncate(cut.len() / 2);
    for (name, bytes, words) in [
        ("big.onnx", big, "\"big\""),
        ("deep.msgpack", deep, "deeper than 64"),
        ("cut.msgpack", cut, "ends inside"),
    ] {
        let path = support::write(inputs.path(), name, &bytes);
        let out = tempfile::tempdir().unwrap();
        let o = bin()
            .arg(&path)
            .arg("-o")
            .arg(out.path().join("o.safetensors"))
            .output()
            .unwrap();
        assert_eq!(support::code(&o), 1, "{name}");
        let err = support::stderr(&o);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(words), "{name}: {err}");
        assert!(
            support::listing(out.path()).is_empty(),
            "{name} left files behind"
        );
    }
    let out = tempfile::tempdir().unwrap();
    let o = bin()
        .arg(fixture("onnx/hostile/escape_dotdot.onnx"))
        .arg("-o")
        .arg(out.path().join("o.safetensors"))
        .output()
        .unwrap();
    assert_eq!(support::code(&o), 1);
    assert!(support::listing(out.path()).is_empty());
}

#[test]
fn sparse_initializers_are_left_out_and_said() {
    let w = tensor("w", 1, &[1], &fb(9, &[0; 4]));
    let graph: Vec<u8> = [fb(5, &w), fb(15, b"\x0a\x00")].concat();
    let bytes = [fv(1, 9), fb(7, &graph)].concat();
    let dir = tempfile::tempdir().unwrap();
    let path = support::write(dir.path(), "m.onnx", &bytes);
    let said = std::sync::Mutex::new(Vec::new());
    let notice = |s: &safetensors_stream::Note| said.lock().unwrap().push(s.to_string());
    let src = block_on(open_input(&path, &SourceOptions::default(), &notice)).unwrap();
    assert_eq!(src.tensors().len(), 1);
    let said = said.into_inner().unwrap();
    assert!(
        said.iter()
            .any(|s| s.contains("1 sparse initializers are not read")),
        "{said:?}"
    );
}
