//! PyTorch distributed checkpoints through the binary: every fixture of
//! `fixtures/dcp/` (saved by torch 2.15 on CPU, 2 and 4 ranks) converts to
//! what torch's own reconstruction wrote (`dcp_to_torch_save`, then
//! `safetensors.torch.save_file`): the same names, dtypes, shapes, bytes
//! and metadata. Hostile metadata and items are refused with exit 1 and
//! nothing at the output (`hostile`). A shard of a fan-out reads only its
//! chunks (`fanout`); inspect, validate, --dry-run, the report, the
//! filters and the library take a checkpoint (`surfaces`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::BIN;

mod fanout;
mod hostile;
mod surfaces;

fn fixtures() -> PathBuf {
    crate::support::fixtures().join("dcp")
}

/// Saved by `FileSystemWriter` (`.metadata` + `.distcp`), then by
/// `HuggingFaceStorageWriter` (a safetensors file a rank).
const CASES: &[&str] = &["shard0", "shard1", "mesh2d", "replicate", "fsdp2", "hf"];

fn convert(args: &[&Path]) -> Output {
    Command::new(BIN).args(args).output().expect("run convert")
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
