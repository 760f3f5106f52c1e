//! PyTorch distributed checkpoints through the binary: every fixture of
//! `fixtures/dcp/` (saved by torch 2.15 on CPU, 2 and 4 ranks) converts to
//! what torch's own reconstruction wrote (`dcp_to_torch_save`, then
//! `safetensors.torch.save_file`): the same names, dtypes, shapes, bytes
//! and metadata. Hostile metadata and items are refused with exit 1 and
//! nothing at the output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::faults::tree;
use crate::support::BIN;

fn fixtures() -> PathBuf {
    crate::support::fixtures().join("dcp")
}

const CASES: &[&str] = &["shard0", "shard1", "mesh2d", "replicate", "fsdp2"];

fn convert(args: &[&Path]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run convert")
}

/// A safetensors file's tensors (dtype, shape, bytes) by name, and its metadata.
type Tensors = BTreeMap<String, (String, Vec<usize>, Vec<u8>)>;

fn read(bytes: &[u8]) -> (Tensors, BTreeMap<String, String>) {
    let st = safetensors::SafeTensors::deserialize(bytes).expect("a safetensors file");
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes).unwrap();
    let tensors = st
        .tensors()
        .into_iter()
        .map(|(name, v)| {
            let dtype = format!("{:?}", v.dtype());
            (name, (dtype, v.shape().to_vec(), v.data().to_vec()))
        })
        .collect();
    let meta = meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    (tensors, meta)
}

#[test]
fn every_fixture_converts_to_torchs_reconstruction() {
    let dir = tempfile::tempdir().unwrap();
    for case in CASES {
        let out = dir.path().join(format!("{case}.safetensors"));
        let run = convert(&[&fixtures().join(case), Path::new("-o"), &out]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{case}: {stderr}");
        let got = read(&std::fs::read(&out).unwrap());
        let want = read(
            &std::fs::read(
                fixtures()
                    .join("expected")
                    .join(format!("{case}.safetensors")),
            )
            .unwrap(),
        );
        assert_eq!(got.1, want.1, "{case}: metadata");
        assert_eq!(
            got.0.keys().collect::<Vec<_>>(),
            want.0.keys().collect::<Vec<_>>(),
            "{case}: names"
        );
        for (name, w) in &want.0 {
            assert_eq!(&got.0[name], w, "{case}: tensor {name}");
        }
    }
}

/// A copy of `case`'s `.distcp` files in a folder of its own, with
/// `metadata` as its `.metadata`.
fn checkpoint_with(dir: &Path, case: &str, metadata: &[u8]) -> PathBuf {
    let ckpt = dir.join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    for e in std::fs::read_dir(fixtures().join(case)).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "distcp") {
            std::fs::copy(&p, ckpt.join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(ckpt.join(".metadata"), metadata).unwrap();
    ckpt
}

/// Runs convert in `cwd` (a conversion with a JSON report); its exit
/// code, the report and its standard error.
fn convert_in(cwd: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let subcommand = matches!(args.first(), Some(&("inspect" | "validate")));
    let report: &[&str] = if subcommand {
        &[]
    } else {
        &["--report", "json"]
    };
    let r = Command::new(BIN)
        .args(args)
        .args(report)
        .current_dir(cwd)
        .output()
        .expect("run convert");
    let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
    let last = stderr.lines().last().unwrap_or_default();
    let report = serde_json::from_str(last).unwrap_or(serde_json::Value::Null);
    (r.status.code(), report, stderr)
}

#[test]
fn hostile_metadata_is_refused_with_exit_1_and_nothing_left() {
    let cases: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(fixtures().join("hostile/cases.json")).unwrap())
            .unwrap();
    assert!(cases.len() >= 12, "{cases:?}");
    for (name, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let metadata = std::fs::read(fixtures().join(format!("hostile/{name}.metadata"))).unwrap();
        checkpoint_with(tmp.path(), "shard0", &metadata);
        std::fs::write(tmp.path().join("out.safetensors"), b"old bytes").unwrap();
        let before = tree(tmp.path());
        let (code, report, stderr) = convert_in(tmp.path(), &["ckpt", "-o", "out.safetensors"]);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        let error = &report["error"];
        assert_eq!(error["kind"], want["kind"], "{name}: {stderr}");
        let message = error["message"].as_str().unwrap_or_default();
        let words = want["message"].as_str().unwrap();
        assert!(
            message.contains(words),
            "{name}: {message:?} lacks {words:?}"
        );
        assert_eq!(
            std::fs::read(tmp.path().join("out.safetensors")).unwrap(),
            b"old bytes",
            "{name}: output touched"
        );
        // Nothing new: no temporary, no marker of a command run.
        assert_eq!(tree(tmp.path()), before, "{name}");
    }
}

#[test]
fn an_evil_global_is_refused_by_inspect_and_dry_run_and_runs_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let metadata = std::fs::read(fixtures().join("hostile/evil_global.metadata")).unwrap();
    checkpoint_with(tmp.path(), "shard0", &metadata);
    let before = tree(tmp.path());
    for args in [
        &["ckpt", "--dry-run", "-o", "x.safetensors"][..],
        &["inspect", "ckpt"],
        &["validate", "ckpt"],
    ] {
        let (code, _, stderr) = convert_in(tmp.path(), args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("posix.system"), "{args:?}: {stderr}");
    }
    assert_eq!(tree(tmp.path()), before);
}

/// A storage's bytes changed after torch wrote them: its CRC-32 (which
/// torch's reader does not check) refuses it, naming the tensor.
#[test]
fn a_corrupt_chunk_is_refused_by_its_crc() {
    let tmp = tempfile::tempdir().unwrap();
    let metadata = std::fs::read(fixtures().join("shard1/.metadata")).unwrap();
    let ckpt = checkpoint_with(tmp.path(), "shard1", &metadata);
    // The column-cut "w" is the first item of rank 1's file; its storage
    // member `archive/data/0` holds its 48 bytes.
    let path = ckpt.join("__1_0.distcp");
    let mut bytes = std::fs::read(&path).unwrap();
    let name = find(&bytes, b"archive/data/0").expect("the storage's local header");
    // The local header's 30 bytes end with the name's and the extra field's lengths.
    let extra = u16::from_le_bytes([bytes[name - 2], bytes[name - 1]]) as usize;
    bytes[name + 14 + extra + 4] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let (code, report, stderr) = convert_in(tmp.path(), &["ckpt", "-o", "out.safetensors"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(report["error"]["kind"], "crc_mismatch", "{stderr}");
    assert_eq!(report["error"]["tensor"], "w", "{stderr}");
    assert!(!tmp.path().join("out.safetensors").exists());
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
