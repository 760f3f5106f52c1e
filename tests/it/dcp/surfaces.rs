//! Every way in takes a distributed checkpoint: `inspect` (its tensors,
//! global shapes and how they are cut), `validate`, `--dry-run`, the JSON
//! report, the name filters and renames, and the library.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

use super::{fixtures, read, CASES};
use crate::support::BIN;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(BIN).args(args).output().expect("run convert");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (o.status.code(), text(o.stdout), text(o.stderr))
}

fn case(name: &str) -> String {
    fixtures().join(name).display().to_string()
}

fn cases() -> Value {
    serde_json::from_slice(&std::fs::read(fixtures().join("cases.json")).unwrap()).unwrap()
}

/// `inspect --json` lists every tensor with its global shape and dtype,
/// the dimensions its chunks cut, and each non-empty chunk as torch's
/// metadata lists it, with its item's place.
#[test]
fn inspect_shows_global_shapes_and_how_each_tensor_is_cut() {
    let cases = cases();
    for name in CASES {
        let (code, stdout, stderr) = run(&["inspect", "--json", &case(name)]);
        assert_eq!(code, Some(0), "{name}: {stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let want = &cases[name];
        let tensors = v["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), want["tensors"].as_object().unwrap().len());
        for t in tensors {
            let n = t["name"].as_str().unwrap();
            assert_eq!(t["shape"], want["tensors"][n][1], "{name}: {n}");
            let mut chunks: Vec<Value> = want["chunks"][n]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c[1].as_array().unwrap().iter().all(|s| s != 0))
                .cloned()
                .collect();
            let mut pieces: Vec<Value> = t["pieces"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| serde_json::json!([p["offsets"], p["sizes"]]))
                .collect();
            // In the metadata's order; an HF checkpoint's as its files list them.
            if *name == "hf" {
                let key = |v: &Value| v.to_string();
                chunks.sort_by_key(key);
                pieces.sort_by_key(key);
            }
            assert_eq!(pieces, chunks, "{name}: {n}");
            for p in t["pieces"].as_array().unwrap() {
                let file = p["file"].as_str().unwrap();
                assert!(file.ends_with(".distcp") || file.ends_with(".safetensors"));
                assert!(p["length"].as_u64().unwrap() > 0);
            }
        }
    }
    // Read the way a person does: the cut of each tensor.
    let (_, text, _) = run(&["inspect", &case("mesh2d")]);
    assert!(text.contains("  stored in pieces:\n"), "{text}");
    assert!(text.contains("    rc [6, 8]: cut at dims [0, 1], 4 pieces: [0, 0]+[3, 4] "));
    let (_, text, _) = run(&["inspect", &case("shard1")]);
    assert!(text.contains("    w [4, 6]: cut at dim 1, 2 pieces: [0, 0]+[4, 3] __0_0.distcp@"));
    let (_, text, _) = run(&["inspect", &case("replicate")]);
    assert!(text.contains("    model.rep [3, 4]: whole, 1 piece: [0, 0]+[3, 4] "));
}

#[test]
fn validate_and_dry_run_take_a_checkpoint() {
    for name in CASES {
        let (code, stdout, stderr) = run(&["validate", &case(name)]);
        assert_eq!(code, Some(0), "{name}: {stdout}{stderr}");
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("o.safetensors");
        let out = out.to_str().unwrap();
        let (code, stdout, stderr) = run(&[&case(name), "--dry-run", "--json", "-o", out]);
        assert_eq!(code, Some(0), "{name}: {stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let expected = fixtures().join(format!("expected/{name}.safetensors"));
        let want = read(&std::fs::read(expected).unwrap()).0;
        assert_eq!(v["tensors"], want.len(), "{name}");
        let planned: Vec<&str> = v["outputs"][0]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        let mut sorted = planned.clone();
        sorted.sort();
        assert_eq!(sorted, want.keys().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "{name}");
    }
}

#[test]
fn the_json_report_counts_the_tensors_and_says_what_was_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.safetensors");
    let args = [&case("replicate"), "-o", out.to_str().unwrap()];
    let (code, _, stderr) = run(&[&args[..], &["--report", "json"]].concat());
    assert_eq!(code, Some(0), "{stderr}");
    let report: Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(report["tensors"], 4);
    // 3x4 + 9x2 + 5 floats and one double.
    assert_eq!(report["data_bytes"], (12 + 18 + 5) * 4 + 8);
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("skipped 3 non-tensor values") && warnings.contains("step"),
        "{warnings}"
    );
}

/// The model alone out of a model + optimizer checkpoint, its dotted
/// names renamed, as for any other input.
#[test]
fn include_exclude_and_prefixes_select_and_rename_the_model() {
    let want = read(&std::fs::read(fixtures().join("expected/fsdp2.safetensors")).unwrap()).0;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o.safetensors");
    let out = out.to_str().unwrap();
    for filter in [&["--include", "model.*"][..], &["--exclude", "optim.*"]] {
        let args = [
            &case("fsdp2"),
            "--strip-prefix",
            "model.",
            "--prefix",
            "net.",
        ];
        let (code, _, stderr) = run(&[&args[..], filter, &["-o", out]].concat());
        assert_eq!(code, Some(0), "{filter:?}: {stderr}");
        let got = read(&std::fs::read(out).unwrap()).0;
        let expected: BTreeMap<String, _> = want
            .iter()
            .filter_map(|(n, t)| Some((format!("net.{}", n.strip_prefix("model.")?), t.clone())))
            .collect();
        assert_eq!(expected.len(), 4);
        assert_eq!(got, expected, "{filter:?}");
    }
    // Nested optimizer state keeps its dotted names.
    let (code, _, stderr) = run(&[&case("fsdp2"), "--include", "optim.state.0.*", "-o", out]);
    assert_eq!(code, Some(0), "{stderr}");
    let got = read(&std::fs::read(out).unwrap()).0;
    assert!(
        got.contains_key("optim.state.0.weight.exp_avg_sq"),
        "{got:?}"
    );
    assert_eq!(got.len(), 6);
}

#[test]
fn the_library_converts_a_checkpoint_folder() {
    use safetensors_stream::{convert_blocking, ConvertOptions, Output};
    let tmp = tempfile::tempdir().unwrap();
    for name in CASES {
        let out = tmp.path().join(format!("{name}.safetensors"));
        let input = fixtures().join(name);
        let report = convert_blocking(
            std::slice::from_ref(&input),
            &Output::File(out.clone()),
            &ConvertOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = fixtures().join(format!("expected/{name}.safetensors"));
        let want = read(&std::fs::read(expected).unwrap()).0;
        assert_eq!(report.tensors, want.len());
        assert_eq!(read(&std::fs::read(&out).unwrap()).0, want, "{name}");
    }
}
