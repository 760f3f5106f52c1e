//! Quantized checkpoints as objects: every scheme that converts from a
//! local file converts from its object to the same bytes, copied as it is
//! and dequantized (scales, zeros, records and `config.json` read by ranged
//! GETs from the bucket), against a local S3 server (moto).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::quantized::CASES;
use crate::support::{fixtures, moto, stderr, BIN};

fn run(endpoint: &str, input: &dyn AsRef<std::ffi::OsStr>, out: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .envs(moto::env(endpoint))
        .stdin(Stdio::null())
        .arg(input)
        .arg("-o")
        .arg(out)
        .arg("--no-sync")
        .args(extra)
        .output()
        .unwrap()
}

/// The case's input file: its index if it has one, else its model file.
fn entry(case: &str) -> &'static str {
    let dir = fixtures().join("quantized").join(case);
    if dir.join("model.safetensors.index.json").exists() {
        "model.safetensors.index.json"
    } else {
        "model.safetensors"
    }
}

#[test]
#[ignore = "needs a local S3 server (moto): run with -- --ignored, see tests/support/moto.rs"]
fn quantized_objects_convert_to_the_bytes_of_local_files() {
    let ep = moto::server("quantized_objects");
    let b = moto::bucket(ep, "quantized");
    let tmp = tempfile::tempdir().unwrap();
    for case in CASES {
        let dir: PathBuf = fixtures().join("quantized").join(case);
        // The checkpoint's files (shards, index, config.json), not the expectations.
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap();
            let name = f.file_name().to_string_lossy().into_owned();
            if !name.starts_with("expected-") {
                moto::put(
                    ep,
                    &b,
                    &format!("{case}/{name}"),
                    &std::fs::read(f.path()).unwrap(),
                );
            }
        }
        let local = dir.join(entry(case));
        let url = format!("s3://{b}/{case}/{}", entry(case));
        for (how, extra) in [
            ("as it is", &[][..]),
            ("dequantized", &["--dequantize"][..]),
        ] {
            let want = tmp
                .path()
                .join(format!("{case}-{}-local.safetensors", extra.len()));
            let got = tmp
                .path()
                .join(format!("{case}-{}-object.safetensors", extra.len()));
            let o = run(ep, &local, &want, extra);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{case} {how}, local: {}",
                stderr(&o)
            );
            let o = run(ep, &url, &got, extra);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{case} {how}, object: {}",
                stderr(&o)
            );
            assert!(
                std::fs::read(&got).unwrap() == std::fs::read(&want).unwrap(),
                "{case} {how}: the object's conversion differs from the local file's"
            );
        }
    }
}
