//! `convert validate` and `convert inspect`, run as a user would: the built
//! binary on the reference fixtures, on hand-built bad files, and on a
//! sharded checkpoint built in a temporary folder.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use safetensors_stream::header::{Metadata, Order, TensorMeta};
use safetensors_stream::Dtype;
use serde_json::{json, Value};
use support::reference::{build_file, raw_file, reference_dir};
use support::write;

fn convert(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .args(args)
        .output()
        .expect("run convert")
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 stdout")
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8(out.stderr.clone())
        .expect("UTF-8 stderr")
        .lines()
        .map(str::to_string)
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `validate` and expects failure with exit code `want` and exactly one
/// stderr line naming `path` and containing `message`.
fn assert_validate_fails(args: &[&str], want: i32, path: &Path, message: &str) {
    let out = convert(args);
    let err = stderr_lines(&out);
    assert_eq!(code(&out), want, "{args:?}: {err:?}");
    assert_eq!(err.len(), 1, "{args:?}: {err:?}");
    assert!(
        err[0].contains(s(path)),
        "{:?} lacks the path {path:?}",
        err[0]
    );
    assert!(err[0].contains(message), "{:?} lacks {message:?}", err[0]);
}

fn reference_fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(reference_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 32);
    files
}

// ---- validate ----------------------------------------------------------------------

#[test]
fn validate_accepts_every_reference_fixture() {
    let files = reference_fixtures();
    for mode in [None, Some("--reference")] {
        let mut args = vec!["validate"];
        args.extend(mode);
        args.extend(files.iter().map(|p| s(p)));
        let out = convert(&args);
        assert_eq!(code(&out), 0, "{:?}", stderr_lines(&out));
        assert!(out.stderr.is_empty(), "{:?}", stderr_lines(&out));
        let text = stdout(&out);
        assert_eq!(text.lines().count(), files.len(), "{text}");
        for f in &files {
            assert!(text.contains(&format!("{}: valid", f.display())), "{text}");
        }
    }
    // --quiet prints nothing for valid files.
    let out = convert(&["validate", "--quiet", s(&files[0])]);
    assert_eq!(code(&out), 0);
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

#[test]
fn validate_counts_tensors_and_bytes() {
    let f = reference_dir().join("spec_four.safetensors");
    let out = convert(&["validate", s(&f)]);
    assert_eq!(code(&out), 0);
    assert!(
        stdout(&out).starts_with(&format!("{}: valid (4 tensors, 19 data bytes", f.display())),
        "{}",
        stdout(&out)
    );
}

fn overlap_file() -> Vec<u8> {
    let json = r#"{"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},"b":{"dtype":"U8","shape":[16],"data_offsets":[8,24]}}"#;
    raw_file(json, 24)
}

#[test]
fn validate_names_the_file_and_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "model.safetensors", &overlap_file());
    for mode in [None, Some("--reference")] {
        let mut args = vec!["validate"];
        args.extend(mode);
        args.push(s(&bad));
        let out = convert(&args);
        assert_eq!(code(&out), 1);
        assert_eq!(
            stderr_lines(&out),
            [format!(
                r#"safetensors-convert: {}: tensors "a" [0,16) and "b" [8,24) overlap"#,
                bad.display()
            )]
        );
        assert!(out.stdout.is_empty());
    }

    // With good files around it: one line for the bad one, exit 1.
    let good = reference_dir().join("spec_a.safetensors");
    let out = convert(&["validate", s(&good), s(&bad), s(&good)]);
    assert_eq!(code(&out), 1);
    assert_eq!(stderr_lines(&out).len(), 1);
    assert_eq!(stdout(&out).lines().count(), 2);

    // Other rules, each named.
    let short = write(dir.path(), "short.safetensors", b"\x10\0\0");
    assert_validate_fails(
        &["validate", s(&short)],
        1,
        &short,
        "shorter than the 8-byte",
    );
    let huge = write(dir.path(), "huge.safetensors", &u64::MAX.to_le_bytes());
    assert_validate_fails(
        &["validate", s(&huge)],
        1,
        &huge,
        "exceeds the limit of 100000000",
    );
    let long = write(
        dir.path(),
        "long.safetensors",
        &raw_file(
            r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#,
            3,
        ),
    );
    assert_validate_fails(
        &["validate", s(&long)],
        1,
        &long,
        "file is 64 bytes but its header describes 63",
    );
}

#[test]
fn reference_mode_accepts_what_only_strict_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "dup.safetensors",
            raw_file(
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                1,
            ),
            r#"duplicate key "a" in the header (strict mode)"#,
        ),
        (
            "lead.safetensors",
            raw_file(" {}", 0),
            "header starts with byte 0x20, not '{' (strict mode)",
        ),
        (
            "extra.safetensors",
            raw_file(
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}"#,
                1,
            ),
            r#"unknown field "x" in tensor "a" (strict mode)"#,
        ),
        (
            "tab.safetensors",
            raw_file("{}\t", 0),
            "header padding holds byte 0x09",
        ),
    ];
    for (name, bytes, message) in cases {
        let p = write(dir.path(), name, &bytes);
        assert_validate_fails(&["validate", s(&p)], 1, &p, message);
        let out = convert(&["validate", "--reference", s(&p)]);
        assert_eq!(code(&out), 0, "{name}: {:?}", stderr_lines(&out));
        assert!(stdout(&out).contains(&format!("{}: valid", p.display())));
    }
}

#[test]
fn missing_file_is_an_environment_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.safetensors");
    assert_validate_fails(&["validate", s(&missing)], 3, &missing, "");
    // I/O outranks bad input when both happen.
    let bad = write(dir.path(), "bad.safetensors", &overlap_file());
    let out = convert(&["validate", s(&bad), s(&missing)]);
    assert_eq!(code(&out), 3);
    assert_eq!(stderr_lines(&out).len(), 2);
}

#[test]
fn usage_errors_exit_2() {
    let out = convert(&["validate"]);
    assert_eq!(code(&out), 2);
    let out = convert(&["frobnicate"]);
    assert_eq!(code(&out), 2);
}

// ---- inspect -----------------------------------------------------------------------

#[test]
fn inspect_prints_a_table() {
    let f = reference_dir().join("spec_four.safetensors");
    let out = convert(&["inspect", s(&f)]);
    assert_eq!(code(&out), 0, "{:?}", stderr_lines(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], f.display().to_string());
    let head: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(head, ["name", "dtype", "shape", "bytes", "offset"]);
    // Rows in offset order: name, dtype, shape, bytes, offset.
    let rows: Vec<Vec<&str>> = lines[2..6]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["b", "I64", "[1]", "8", "0"],
            ["s", "F32", "[]", "4", "8"],
            ["w", "F16", "[2]", "4", "12"],
            ["m", "U8", "[3]", "3", "16"],
        ]
    );
    assert!(
        text.contains("4 tensors, data 19 bytes, header 248 bytes, file 275 bytes"),
        "{text}"
    );
    assert!(text.contains(r#""format": "np""#), "{text}");
}

#[test]
fn inspect_json_has_every_field() {
    let f = reference_dir().join("spec_four.safetensors");
    let out = convert(&["inspect", "--json", s(&f)]);
    assert_eq!(code(&out), 0, "{:?}", stderr_lines(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("inspect --json prints JSON");
    assert_eq!(v["tensors"], 4);
    assert_eq!(v["data_bytes"], 19);
    assert_eq!(v["index"], Value::Null);
    let file = &v["files"][0];
    assert_eq!(v["files"].as_array().unwrap().len(), 1);
    assert_eq!(file["path"], s(&f));
    assert_eq!(file["header_len"], 248);
    assert_eq!(file["file_len"], 275);
    assert_eq!(file["data_bytes"], 19);
    assert_eq!(file["metadata"], json!({"format": "np"}));
    assert_eq!(
        file["tensors"],
        json!([
            {"name": "b", "dtype": "I64", "shape": [1], "bytes": 8, "data_offsets": [0, 8]},
            {"name": "s", "dtype": "F32", "shape": [], "bytes": 4, "data_offsets": [8, 12]},
            {"name": "w", "dtype": "F16", "shape": [2], "bytes": 4, "data_offsets": [12, 16]},
            {"name": "m", "dtype": "U8", "shape": [3], "bytes": 3, "data_offsets": [16, 19]},
        ])
    );
    // Names that need escaping survive the round trip.
    let f = reference_dir().join("escape_names.safetensors");
    let out = convert(&["inspect", "--json", s(&f)]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let names: Vec<&str> = v["files"][0]["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"quote\"back\\slash\nnew\ttab"), "{names:?}");
}

#[test]
fn inspect_refuses_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.safetensors", &overlap_file());
    let out = convert(&["inspect", s(&bad)]);
    assert_eq!(code(&out), 1);
    assert!(out.stdout.is_empty());
    let err = stderr_lines(&out);
    assert_eq!(err.len(), 1);
    assert!(err[0].contains("overlap") && err[0].contains(s(&bad)));
}

// ---- sharded checkpoints ---------------------------------------------------------------

const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";
const INDEX: &str = "model.safetensors.index.json";

/// Two shards (a, b | c) and their index in `dir`; returns the index path.
fn write_checkpoint(dir: &Path, index: &Value) -> PathBuf {
    let t = |n: &str, d, s: &[u64]| {
        let m = TensorMeta::new(n, d, s.to_vec());
        let len = m.byte_len().unwrap() as usize;
        (m, support::reference::pattern(len as u64, len))
    };
    let md: Metadata = [("format".to_string(), "pt".to_string())].into();
    let (_, one) = build_file(
        &[t("a", Dtype::F32, &[2, 2]), t("b", Dtype::I64, &[])],
        Some(md.clone()),
        Order::Canonical,
    );
    let (_, two) = build_file(&[t("c", Dtype::U8, &[3])], Some(md), Order::Canonical);
    write(dir, SHARD1, &one);
    write(dir, SHARD2, &two);
    write(
        dir,
        INDEX,
        serde_json::to_string_pretty(index).unwrap().as_bytes(),
    )
}

fn good_index() -> Value {
    json!({
        "metadata": {"total_size": 27, "format": "pt"},
        "weight_map": {"a": SHARD1, "b": SHARD1, "c": SHARD2},
    })
}

#[test]
fn a_two_shard_index_validates_and_inspects() {
    let dir = tempfile::tempdir().unwrap();
    let index = write_checkpoint(dir.path(), &good_index());
    for mode in [None, Some("--reference")] {
        let mut args = vec!["validate"];
        args.extend(mode);
        args.push(s(&index));
        let out = convert(&args);
        assert_eq!(code(&out), 0, "{:?}", stderr_lines(&out));
        assert!(
            stdout(&out).starts_with(&format!(
                "{}: valid (3 tensors, 27 data bytes",
                index.display()
            )),
            "{}",
            stdout(&out)
        );
    }

    let out = convert(&["inspect", s(&index)]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert!(text.contains(SHARD1) && text.contains(SHARD2), "{text}");
    assert!(
        text.contains("index: 2 shards, 3 tensors, total_size 27"),
        "{text}"
    );

    let out = convert(&["inspect", "--json", s(&index)]);
    assert_eq!(code(&out), 0);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["tensors"], 3);
    assert_eq!(v["data_bytes"], 27);
    assert_eq!(v["index"], good_index());
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert!(files[0]["path"].as_str().unwrap().ends_with(SHARD1));
    assert!(files[1]["path"].as_str().unwrap().ends_with(SHARD2));
    assert_eq!(files[0]["data_bytes"], 24);
    assert_eq!(files[1]["data_bytes"], 3);
}

#[test]
fn a_broken_index_fails_with_the_right_message() {
    let cases: Vec<(&str, Value, String)> = vec![
        (
            "wrong total_size",
            json!({"metadata": {"total_size": 28}, "weight_map": {"a": SHARD1, "b": SHARD1, "c": SHARD2}}),
            "index metadata.total_size is 28 but the shards hold 27 tensor bytes".into(),
        ),
        (
            "a tensor missing from the weight_map",
            json!({"metadata": {"total_size": 27}, "weight_map": {"a": SHARD1, "c": SHARD2}}),
            format!(r#"shard {SHARD1} holds tensor "b", which the weight_map does not list"#),
        ),
        (
            "a tensor in the wrong shard",
            json!({"metadata": {"total_size": 27}, "weight_map": {"a": SHARD1, "b": SHARD2, "c": SHARD2}}),
            format!(r#"shard {SHARD1} holds tensor "b", which the weight_map assigns to {SHARD2}"#),
        ),
        (
            "a tensor no shard holds",
            json!({"metadata": {"total_size": 27}, "weight_map": {"a": SHARD1, "b": SHARD1, "c": SHARD2, "d": SHARD2}}),
            format!(r#"weight_map puts tensor "d" in {SHARD2}, which does not hold it"#),
        ),
        (
            "a shard named by a path",
            json!({"metadata": {"total_size": 27}, "weight_map": {"a": SHARD1, "b": SHARD1, "c": "../x.safetensors"}}),
            r#"index names shard "../x.safetensors", which is not a plain file name in the index's folder"#.into(),
        ),
        (
            "no total_size",
            json!({"metadata": {}, "weight_map": {"a": SHARD1, "b": SHARD1, "c": SHARD2}}),
            "index JSON: missing field `total_size`".into(),
        ),
    ];
    for (what, index, message) in cases {
        let root = tempfile::tempdir().unwrap();
        // A valid file at ../x.safetensors: refused by name, never opened.
        std::fs::copy(
            reference_dir().join("spec_a.safetensors"),
            root.path().join("x.safetensors"),
        )
        .unwrap();
        let dir = root.path().join("ckpt");
        std::fs::create_dir(&dir).unwrap();
        let path = write_checkpoint(&dir, &index);
        let out = convert(&["validate", s(&path)]);
        let err = stderr_lines(&out);
        assert_eq!(code(&out), 1, "{what}: {err:?}");
        // One line: the index, then the rule (serde may add a position).
        assert_eq!(err.len(), 1, "{what}: {err:?}");
        let want = format!("safetensors-convert: {}: {message}", path.display());
        assert!(
            err[0].starts_with(&want),
            "{what}: {:?}\n want {want:?}",
            err[0]
        );
    }
}

#[test]
fn a_bad_or_missing_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let index = write_checkpoint(dir.path(), &good_index());
    let shard2 = dir.path().join(SHARD2);
    std::fs::write(&shard2, overlap_file()).unwrap();
    // (The overlap is found before the index is compared with the shard.)
    assert_validate_fails(&["validate", s(&index)], 1, &shard2, "overlap");

    std::fs::remove_file(&shard2).unwrap();
    assert_validate_fails(&["validate", s(&index)], 3, &shard2, "");
}
