//! PyTorch checkpoints through the binary: every fixture converts to what
//! `torch.load(weights_only=True)` returns (fixtures/pytorch/generate.py
//! wrote the expectations), refusals exit 1 with nothing at the output,
//! and malicious pickles are refused without running their command.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pytorch")
}

fn convert(args: &[&std::ffi::OsStr], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run convert")
}

fn o(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Every `*.expected.json` with the checkpoint it describes.
fn expectations() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir().join("ok")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            let Some(stem) = name.strip_suffix(".expected.json") else {
                continue;
            };
            let input = stem.strip_suffix(".dedupe").unwrap_or(stem);
            let doc: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            out.push((d.join(input), doc));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 13, "fixtures missing: {}", out.len());
    out
}

/// Checks a safetensors file's tensors and metadata against an expectation.
fn check_output(bytes: &[u8], doc: &Value, what: &str) {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes).unwrap();
    let got_meta: BTreeMap<String, String> = meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let want_meta: BTreeMap<String, String> =
        serde_json::from_value(doc["metadata"].clone()).unwrap();
    assert_eq!(got_meta, want_meta, "{what}: metadata");
    let want = doc["tensors"].as_object().unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    let mut want_names: Vec<String> = want.keys().cloned().collect();
    want_names.sort();
    assert_eq!(names, want_names, "{what}: names");
    for (name, t) in want {
        let v = st.tensor(name).unwrap();
        assert_eq!(
            format!("{:?}", v.dtype()),
            t["dtype"].as_str().unwrap(),
            "{what}: {name} dtype"
        );
        let shape: Vec<usize> = serde_json::from_value(t["shape"].clone()).unwrap();
        assert_eq!(v.shape(), shape.as_slice(), "{what}: {name} shape");
        assert_eq!(
            v.data(),
            hex(t["hex"].as_str().unwrap()),
            "{what}: {name} bytes"
        );
    }
}

fn args_of(doc: &Value) -> Vec<String> {
    doc["args"]
        .as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn every_checkpoint_converts_to_what_torch_loads() {
    let tmp = tempfile::tempdir().unwrap();
    for (input, doc) in expectations() {
        let what = input.display().to_string();
        let out = tmp.path().join("out.safetensors");
        let mut args: Vec<std::ffi::OsString> = vec![input.clone().into()];
        args.extend(args_of(&doc).into_iter().map(Into::into));
        // To a file (the fast path: positional copies) and to stdout (the streaming sink).
        let mut to_file = args.clone();
        to_file.extend([
            "-o".into(),
            out.clone().into(),
            "--no-sync".into(),
            "-q".into(),
        ]);
        let refs: Vec<&std::ffi::OsStr> = to_file.iter().map(|s| s.as_os_str()).collect();
        let r = convert(&refs, tmp.path());
        assert!(
            r.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        check_output(&std::fs::read(&out).unwrap(), &doc, &what);
        let mut to_stdout = args.clone();
        to_stdout.extend(["-o".into(), "-".into(), "-q".into()]);
        let refs: Vec<&std::ffi::OsStr> = to_stdout.iter().map(|s| s.as_os_str()).collect();
        let r = convert(&refs, tmp.path());
        assert!(
            r.status.success(),
            "{what} to stdout: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        check_output(&r.stdout, &doc, &format!("{what} to stdout"));
    }
}

#[test]
fn a_checkpoint_from_standard_input_is_spooled() {
    let input = dir().join("ok/views.pt");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir().join("ok/views.pt.expected.json")).unwrap())
            .unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .args(["-", "-o", "-"])
        .stdin(std::fs::File::open(input).unwrap())
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stderr).contains("spooling"));
    check_output(&r.stdout, &doc, "stdin");
}

fn error_kind(r: &Output) -> String {
    let text = String::from_utf8_lossy(&r.stderr);
    let line = text.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {text}"));
    v["error"]["kind"].as_str().unwrap().to_string()
}

#[test]
fn refused_checkpoints_exit_1_and_leave_the_output_alone() {
    let cases: BTreeMap<String, String> =
        serde_json::from_slice(&std::fs::read(dir().join("refused/cases.json")).unwrap()).unwrap();
    assert!(cases.len() >= 10);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.safetensors");
    for (name, kind) in cases {
        std::fs::write(&out, b"old bytes").unwrap();
        let input = dir().join("refused").join(&name);
        let r = convert(
            &[
                input.as_os_str(),
                o("-o"),
                out.as_os_str(),
                o("--report"),
                o("json"),
            ],
            tmp.path(),
        );
        assert_eq!(
            r.status.code(),
            Some(1),
            "{name}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(error_kind(&r), kind, "{name}");
        assert_eq!(
            std::fs::read(&out).unwrap(),
            b"old bytes",
            "{name}: output touched"
        );
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            1,
            "{name}: temp left"
        );
    }
}

#[test]
fn malicious_pickles_are_refused_and_run_nothing() {
    let cases: BTreeMap<String, Value> =
        serde_json::from_slice(&std::fs::read(dir().join("malicious/cases.json")).unwrap())
            .unwrap();
    assert!(cases.len() >= 7);
    for (name, case) in cases {
        // A fresh folder: the payload's `touch` would create its marker here.
        let tmp = tempfile::tempdir().unwrap();
        let input = dir().join("malicious").join(&name);
        for args in [
            vec!["-o", "out.safetensors"],
            vec!["--dry-run", "-o", "out.safetensors"],
        ] {
            let mut all: Vec<&std::ffi::OsStr> = vec![input.as_os_str()];
            all.extend(args.iter().map(|s| std::ffi::OsStr::new(*s)));
            all.extend([o("--report"), o("json")]);
            let r = convert(&all, tmp.path());
            assert_eq!(
                r.status.code(),
                Some(1),
                "{name}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            assert_eq!(error_kind(&r), case["kind"].as_str().unwrap(), "{name}");
        }
        let r = convert(&[o("inspect"), input.as_os_str()], tmp.path());
        assert_eq!(r.status.code(), Some(1), "{name}: inspect");
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(
            left.is_empty(),
            "{name}: left {left:?} (marker {})",
            case["marker"]
        );
    }
}

#[test]
fn dry_run_and_inspect_list_tensors_without_reading_data() {
    // Corrupt every storage's bytes: listing still works, converting fails on the CRC.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("corrupt.pt");
    let mut bytes = std::fs::read(dir().join("ok/views.pt")).unwrap();
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir().join("ok/views.pt.expected.json")).unwrap())
            .unwrap();
    let embed = hex(doc["tensors"]["tied.embed"]["hex"].as_str().unwrap());
    let at = bytes
        .windows(embed.len())
        .position(|w| w == embed)
        .expect("the storage's bytes");
    bytes[at] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();

    let r = convert(
        &[
            path.as_os_str(),
            o("--dry-run"),
            o("--json"),
            o("-o"),
            o("x"),
        ],
        tmp.path(),
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let plan: Value = serde_json::from_slice(&r.stdout).unwrap();
    let listed = plan["outputs"][0]["tensors"].as_array().unwrap().len();
    assert_eq!(listed, doc["tensors"].as_object().unwrap().len());

    let r = convert(&[o("inspect"), path.as_os_str(), o("--json")], tmp.path());
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: Value = serde_json::from_slice(&r.stdout).unwrap();
    let names: Vec<&str> = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"transposed") && names.contains(&"nested.deeper.list.1"));
    assert_eq!(v["metadata"]["format"], "pt");

    let out = tmp.path().join("out.safetensors");
    let r = convert(
        &[
            path.as_os_str(),
            o("-o"),
            out.as_os_str(),
            o("--report"),
            o("json"),
        ],
        tmp.path(),
    );
    assert_eq!(
        r.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert_eq!(error_kind(&r), "crc_mismatch");
    assert!(!out.exists());
}

#[test]
fn skipped_values_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let input = dir().join("ok/training.pt");
    let r = convert(
        &[
            input.as_os_str(),
            o("-o"),
            o("out.safetensors"),
            o("--report"),
            o("json"),
        ],
        tmp.path(),
    );
    assert!(r.status.success());
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&r.stderr).trim()).unwrap();
    let warnings = v["warnings"].to_string();
    // epoch, best, name and the optimizer's param_groups values.
    assert!(
        warnings.contains("skipped") && warnings.contains("non-tensor"),
        "{warnings}"
    );
}

#[test]
fn a_top_level_key_that_is_missing_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let input = dir().join("ok/training.pt");
    let r = convert(
        &[
            input.as_os_str(),
            o("--pt-root"),
            o("nope"),
            o("-o"),
            o("o"),
            o("--report"),
            o("json"),
        ],
        tmp.path(),
    );
    assert_eq!(r.status.code(), Some(1));
    assert_eq!(error_kind(&r), "py_torch");
}

/// Contiguous tensors offer their bytes in place (the kernel-copy fast
/// path), with the byte swap a big-endian checkpoint needs; strided views
/// do not, and are gathered instead.
#[tokio::test]
async fn contiguous_tensors_lie_in_the_file_and_strided_ones_do_not() {
    use safetensors_stream::source::open_input;
    use safetensors_stream::source::SourceOptions;
    use safetensors_stream::source::Transform;

    let options = SourceOptions::default();
    let quiet = |_: &safetensors_stream::Note| {};
    let src = open_input(&dir().join("ok/views.pt"), &options, &quiet)
        .await
        .unwrap();
    let find = |name: &str| src.tensors().iter().position(|t| t.name == name).unwrap();
    for name in ["tied.embed", "scalar", "empty", "param"] {
        assert!(src.file_span(find(name)).is_some(), "{name}");
    }
    // Strided views are gathered; contiguous parts of a storage with a
    // CRC-32 are read by a blocking reader, which checks the whole storage
    // once (a part alone cannot be checked against the member's CRC).
    for name in [
        "transposed",
        "channels_last",
        "expanded",
        "step",
        "step2d",
        "disjoint.a",
        "disjoint.b",
    ] {
        assert!(src.file_span(find(name)).is_none(), "{name}");
        assert!(src.open_blocking(find(name)).is_some(), "{name}");
    }
    for name in ["tied.embed", "scalar", "param"] {
        assert!(src.open_blocking(find(name)).is_none(), "{name}: a span");
    }
    // Once one part has been read, the storage has passed its check, and
    // its other parts lie in the file like any tensor.
    let (a, b) = (find("disjoint.a"), find("disjoint.b"));
    let mut src = src;
    src.open(a).await.unwrap();
    let span = src.file_span(b).expect("a part of a checked storage");
    assert!(span.crc.is_none(), "checked already, not again");

    let big = open_input(&dir().join("ok/dtypes-big.pt"), &options, &quiet)
        .await
        .unwrap();
    for (k, t) in big.tensors().iter().enumerate() {
        let span = big.file_span(k).unwrap();
        let want = match t.dtype.bits() {
            8 => Transform::Identity,
            _ if t.dtype == safetensors_stream::Dtype::C64 => Transform::SwapBytes { width: 4 },
            bits => Transform::SwapBytes {
                width: bits as usize / 8,
            },
        };
        assert_eq!(span.transform, want, "{}", t.name);
    }
}

/// `--pt-root` on a legacy checkpoint: storages outside the chosen value
/// still have to be stepped over to find the ones inside it.
/// A sharded checkpoint's `weight_map` must say where each tensor is: a
/// tensor held in another shard than it says, and one it lists that no
/// shard holds, are each refused by name (the safetensors index's words).
#[test]
fn a_weight_map_that_misplaces_a_tensor_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let sharded = dir().join("ok/sharded");
    let (first, second) = (
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model-00002-of-00002.bin",
    );
    for shard in [first, second] {
        std::fs::copy(sharded.join(shard), tmp.path().join(shard)).unwrap();
    }
    let index = tmp.path().join("pytorch_model.bin.index.json");
    let refused = |map: Value| {
        let json = serde_json::json!({"metadata": {"total_size": 168}, "weight_map": map});
        std::fs::write(&index, json.to_string()).unwrap();
        let r = convert(
            &[index.as_os_str(), o("-o"), o("out.safetensors")],
            tmp.path(),
        );
        assert_eq!(r.status.code(), Some(1));
        String::from_utf8(r.stderr).unwrap()
    };
    let mut map = serde_json::json!({
        "lm_head.weight": second,
        "model.embed.weight": first,
        "model.layers.0.weight": second,
        "model.layers.1.weight": second,
    });
    let said = refused(map.clone());
    let words = format!(
        r#"shard {first} holds tensor "model.layers.0.weight", which the weight_map assigns to {second}"#
    );
    assert!(said.contains(&words), "{said}");
    map["model.layers.0.weight"] = first.into();
    map["model.extra"] = first.into();
    let said = refused(map);
    let words =
        format!(r#"weight_map puts tensor "model.extra" in {first}, which does not hold it"#);
    assert!(said.contains(&words), "{said}");
    assert!(!tmp.path().join("out.safetensors").exists());
}

#[test]
fn a_legacy_subtree_converts_past_storages_it_does_not_use() {
    let tmp = tempfile::tempdir().unwrap();
    let input = dir().join("ok/views-legacy.pt");
    let doc: Value = serde_json::from_slice(
        &std::fs::read(dir().join("ok/views-legacy.pt.expected.json")).unwrap(),
    )
    .unwrap();
    let mut tensors = serde_json::Map::new();
    for (name, t) in doc["tensors"].as_object().unwrap() {
        if let Some(rest) = name.strip_prefix("nested.") {
            tensors.insert(rest.to_string(), t.clone());
        }
    }
    assert_eq!(tensors.len(), 2);
    let want = serde_json::json!({"metadata": {"format": "pt"}, "tensors": tensors});
    let r = convert(
        &[
            input.as_os_str(),
            o("--pt-root"),
            o("nested"),
            o("-o"),
            o("-"),
        ],
        tmp.path(),
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    check_output(&r.stdout, &want, "legacy --pt-root nested");
}

/// A strided view is gathered out of order, so its storage's CRC-32 is
/// checked in a pass of its own first: a flipped byte is refused.
#[test]
fn a_strided_view_of_a_corrupt_storage_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("corrupt.pt");
    let mut bytes = std::fs::read(dir().join("ok/views.pt")).unwrap();
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir().join("ok/views.pt.expected.json")).unwrap())
            .unwrap();
    // "transposed" views the storage of "tied.embed"; flip its last byte.
    let embed = hex(doc["tensors"]["tied.embed"]["hex"].as_str().unwrap());
    let at = bytes.windows(embed.len()).position(|w| w == embed).unwrap();
    bytes[at + embed.len() - 1] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    for out in ["out.safetensors", "-"] {
        let r = convert(
            &[
                path.as_os_str(),
                o("--include"),
                o("transposed"),
                o("-o"),
                o(out),
                o("--report"),
                o("json"),
            ],
            tmp.path(),
        );
        assert_eq!(
            r.status.code(),
            Some(1),
            "{out}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(error_kind(&r), "crc_mismatch", "{out}");
    }
    assert!(!tmp.path().join("out.safetensors").exists());
}

/// A protocol-2 pickle of `{name: tensor}`, each tensor all of a
/// `ByteStorage` (`name`, storage key, bytes), as `torch.save` writes one.
fn byte_tensors(tensors: &[(&str, &str, u32)]) -> Vec<u8> {
    use crate::support::torch::{rebuild_tensor, text};
    let mut p = b"\x80\x02}(".to_vec();
    for &(name, key, n) in tensors {
        text(&mut p, name);
        rebuild_tensor(&mut p, "ByteStorage", key, n as i32);
    }
    p.extend_from_slice(b"u.");
    p
}

/// A stored member as a zip's records describe it: where its local header
/// is and what the records claim, whatever bytes actually follow.
struct Claim {
    name: String,
    at: u32,
    crc: u32,
    compressed: u32,
    uncompressed: u32,
}

/// Appends the local header of `m` (sizes and CRC as claimed) to `out`,
/// which must be `m.at` bytes long.
fn local_header(out: &mut Vec<u8>, m: &Claim) {
    assert_eq!(out.len(), m.at as usize);
    out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    for x in [20u16, 0, 0, 0, 0x21] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    for x in [m.crc, m.compressed, m.uncompressed] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(m.name.as_bytes());
}

/// Appends the central directory of `members` and the end record to `out`.
fn central_directory(out: &mut Vec<u8>, members: &[Claim]) {
    let offset = out.len() as u32;
    for m in members {
        out.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        for x in [20u16, 20, 0, 0, 0, 0x21] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        for x in [m.crc, m.compressed, m.uncompressed] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        for x in [m.name.len() as u16, 0, 0, 0, 0] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&m.at.to_le_bytes());
        out.extend_from_slice(m.name.as_bytes());
    }
    let size = out.len() as u32 - offset;
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    let n = members.len() as u16;
    for x in [0u16, 0, n, n] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
}

/// Appends `data` to `out` as a member `name` stored as it is (honest
/// sizes and CRC); returns what the directory should say of it.
fn append_stored(out: &mut Vec<u8>, name: &str, data: &[u8]) -> Claim {
    let len = data.len() as u32;
    let claim = Claim {
        name: name.into(),
        at: out.len() as u32,
        crc: crc32fast::hash(data),
        compressed: len,
        uncompressed: len,
    };
    local_header(out, &claim);
    out.extend_from_slice(data);
    claim
}

/// A zip checkpoint of `(name, bytes)` members, each stored as it is
/// (honest sizes and CRCs), one after the other.
fn honest_zip(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let claims: Vec<Claim> = members
        .iter()
        .map(|&(name, data)| append_stored(&mut out, name, data))
        .collect();
    central_directory(&mut out, &claims);
    out
}

/// Converts `pt` (written as `name` in `tmp`, removed after) to
/// `out.safetensors` over an old output, with a JSON report.
fn convert_over_old(tmp: &Path, name: &str, pt: &[u8]) -> Output {
    let input = tmp.join(name);
    std::fs::write(&input, pt).unwrap();
    std::fs::write(tmp.join("out.safetensors"), b"old bytes").unwrap();
    let args = [
        input.as_os_str(),
        o("-o"),
        o("out.safetensors"),
        o("--report"),
        o("json"),
    ];
    let r = convert(&args, tmp);
    std::fs::remove_file(&input).unwrap();
    r
}

/// `pt` is refused as a bad zip whose message names the input and says
/// `words`, and the old output is left as it was, with no temp beside it.
fn assert_refused_as_zip(tmp: &Path, name: &str, pt: &[u8], words: &[&str]) {
    let r = convert_over_old(tmp, name, pt);
    let text = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(1), "{name}: {text}");
    assert_eq!(error_kind(&r), "zip", "{name}: {text}");
    let report: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let input = report["error"]["input"].as_str().unwrap_or_default();
    assert!(input.ends_with(name), "{name}: input {input:?}");
    let message = report["error"]["message"].as_str().unwrap_or_default();
    for w in [name].iter().chain(words) {
        assert!(message.contains(w), "{name}: no {w:?} in {message}");
    }
    let out = tmp.join("out.safetensors");
    assert_eq!(std::fs::read(&out).unwrap(), b"old bytes", "{name}");
    assert_eq!(
        std::fs::read_dir(tmp).unwrap().count(),
        1,
        "{name}: temp left"
    );
}

/// A stored member is its bytes: one whose directory claims more bytes
/// inflated than it holds would be read past its end, into bytes of the
/// archive no member owns. A storage of 0 bytes that claims 16 (the 16
/// after it carrying their own CRC) and a `data.pkl` of 2 bytes that
/// claims the real pickle lying after it are both refused, before any
/// byte is written.
#[test]
fn a_stored_member_that_claims_more_than_it_holds_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let hidden = [0x41u8; 16];
    let pickle = byte_tensors(&[("hidden", "0", 16)]);
    // Honest, the same members convert: the builder is sound.
    let members: [(&str, &[u8]); 3] = [
        ("archive/data.pkl", &pickle),
        ("archive/byteorder", b"little"),
        ("archive/data/0", &hidden),
    ];
    let r = convert_over_old(tmp.path(), "honest.pt", &honest_zip(&members));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

    // The storage holds no bytes but claims 16: those after it.
    let mut pt = Vec::new();
    let mut claims: Vec<Claim> = members[..2]
        .iter()
        .map(|&(name, data)| append_stored(&mut pt, name, data))
        .collect();
    let storage = Claim {
        name: "archive/data/0".into(),
        at: pt.len() as u32,
        crc: crc32fast::hash(&hidden),
        compressed: 0,
        uncompressed: 16,
    };
    local_header(&mut pt, &storage);
    pt.extend_from_slice(&hidden);
    claims.push(storage);
    central_directory(&mut pt, &claims);
    let words = ["stored member \"archive/data/0\" has sizes 0 and 16"];
    assert_refused_as_zip(tmp.path(), "storage-past-end.pt", &pt, &words);

    // `data.pkl` holds 2 bytes (no STOP) and claims the pickle after them.
    let mut pt = Vec::new();
    let pkl = Claim {
        name: "archive/data.pkl".into(),
        at: 0,
        crc: 0,
        compressed: 2,
        uncompressed: pickle.len() as u32,
    };
    local_header(&mut pt, &pkl);
    pt.extend_from_slice(&pickle);
    let mut claims = vec![pkl];
    for &(name, data) in &members[1..] {
        claims.push(append_stored(&mut pt, name, data));
    }
    central_directory(&mut pt, &claims);
    let words = [format!(
        "stored member \"archive/data.pkl\" has sizes 2 and {}",
        pickle.len()
    )];
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_refused_as_zip(tmp.path(), "pickle-past-end.pt", &pt, &words);
}

/// Storage members that share bytes (each local header inside the member
/// before it, all running to one end, every CRC valid) would make one run
/// of bytes many tensors, past the expansion cap: refused before any byte
/// is written, naming both members.
#[test]
fn storage_members_that_overlap_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let names = ["archive/data/0", "archive/data/1"];
    let header = 30 + names[0].len() as u32;
    let data = 64u32;
    // Member k's header at k * header; both end at `end`.
    let end = 2 * header + data;
    let sizes = [end - header, end - 2 * header];
    let mut region = vec![7u8; end as usize];
    let mut claims = Vec::new();
    for k in (0..2).rev() {
        let at = k as u32 * header;
        let body = &region[(at + header) as usize..];
        let claim = Claim {
            name: names[k].into(),
            at,
            crc: crc32fast::hash(body),
            compressed: sizes[k],
            uncompressed: sizes[k],
        };
        let mut h = vec![0u8; at as usize];
        local_header(&mut h, &claim);
        region[at as usize..(at + header) as usize].copy_from_slice(&h[at as usize..]);
        claims.push(claim);
    }
    claims.reverse();
    let pickle = byte_tensors(&[("a", "0", sizes[0]), ("b", "1", sizes[1])]);
    let mut pt = region;
    for (name, data) in [
        ("archive/data.pkl", &pickle[..]),
        ("archive/byteorder", b"little"),
    ] {
        claims.push(append_stored(&mut pt, name, data));
    }
    central_directory(&mut pt, &claims);
    let words = ["members \"archive/data/0\" and \"archive/data/1\" overlap"];
    assert_refused_as_zip(tmp.path(), "overlap.pt", &pt, &words);

    // The same storages one after the other convert: the builder is sound.
    let (a, b) = (vec![7u8; sizes[0] as usize], vec![7u8; sizes[1] as usize]);
    let members: [(&str, &[u8]); 4] = [
        ("archive/data.pkl", &pickle),
        ("archive/byteorder", b"little"),
        (names[0], &a),
        (names[1], &b),
    ];
    let r = convert_over_old(tmp.path(), "apart.pt", &honest_zip(&members));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}
