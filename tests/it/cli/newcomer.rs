//! The traps of issue 30 through the built binary: dtype spellings, the
//! help a newcomer reads, messages that name options neutrally, inspect on
//! unknown files and on standard input, byte counts said once.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::support;
use support::{stderr, BIN};

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn fixture(name: &str) -> String {
    support::fixtures().join(name).display().to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn header(path: &Path) -> serde_json::Map<String, Value> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    serde_json::from_slice(&bytes[8..8 + n]).unwrap()
}

const NPZ: &str = "example/model.npz";

// ---- 6: dtype spellings ----------------------------------------------------------------------

#[test]
fn numpy_torch_and_short_dtype_spellings_are_accepted_by_every_flag() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value, want) in [
        ("--cast-all", "bfloat16", "BF16"),
        ("--cast-all", "torch.float16", "F16"),
        ("--cast-all", "fp16", "F16"),
        ("--cast", "float32=bf16", "BF16"),
    ] {
        let out = dir.path().join("o.safetensors");
        let o = run(&[&fixture(NPZ), flag, value, "-o", s(&out), "-q"]);
        assert!(o.status.success(), "{flag} {value}: {}", stderr(&o));
        let h = header(&out);
        assert_eq!(h["layer.0.weight"]["dtype"], want, "{flag} {value}");
    }

    let dump = dir.path().join("w.bin");
    std::fs::write(&dump, [0u8; 16]).unwrap();
    for spelling in ["float32", "fp32", "f32", "F32"] {
        let out = dir.path().join("w.safetensors");
        let o = run(&[
            s(&dump),
            "--raw-dtype",
            spelling,
            "--raw-shape",
            "4",
            "--name",
            "w",
            "-o",
            s(&out),
            "-q",
        ]);
        assert!(o.status.success(), "--raw-dtype {spelling}: {}", stderr(&o));
        assert_eq!(header(&out)["w"]["dtype"], "F32");
    }

    let manifest = dir.path().join("m.json");
    std::fs::write(
        &manifest,
        r#"[{"name": "a", "dtype": "bfloat16", "shape": [4]}, {"name": "b", "dtype": "torch.int32", "shape": [2], "offset": 8}]"#,
    )
    .unwrap();
    let out = dir.path().join("m.safetensors");
    let o = run(&[
        s(&dump),
        "--raw-manifest",
        s(&manifest),
        "-o",
        s(&out),
        "-q",
    ]);
    assert!(o.status.success(), "manifest: {}", stderr(&o));
    let h = header(&out);
    assert_eq!(
        (&h["a"]["dtype"], &h["b"]["dtype"]),
        (&"BF16".into(), &"I32".into())
    );
}

#[test]
fn an_unknown_dtype_is_quoted_as_given_with_every_choice() {
    let o = run(&[
        &fixture(NPZ),
        "--cast-all",
        "Float12",
        "-o",
        "x.safetensors",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("\"Float12\""), "the input as typed: {err}");
    for name in [
        "BOOL", "F4", "F6_E2M3", "U8", "F8_E4M3", "F16", "BF16", "F32", "C64", "U64",
    ] {
        assert!(err.contains(name), "{name} missing: {err}");
    }
}

// ---- 3: what -o names ------------------------------------------------------------------------

/// The files under `dir`, as paths from it, sorted.
fn files_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.strip_prefix(dir).unwrap().display().to_string();
        if path.is_dir() {
            found.extend(
                files_under(&path)
                    .into_iter()
                    .map(|f| format!("{name}/{f}")),
            );
        } else {
            found.push(name);
        }
    }
    found.sort();
    found
}

#[test]
fn a_trailing_slash_writes_into_the_folder_and_makes_it() {
    let dir = tempfile::tempdir().unwrap();
    let sharded = format!("{}/", dir.path().join("shards").display());
    let o = run(&[
        &fixture(NPZ),
        "--max-shard-size",
        "100",
        "-o",
        &sharded,
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let files = files_under(dir.path());
    assert!(files.len() > 2, "{files:?}");
    let n = files.len() - 1;
    let index = "shards/model.safetensors.index.json".to_string();
    let mut expected: Vec<String> = (1..=n)
        .map(|k| format!("shards/model-{k:05}-of-{n:05}.safetensors"))
        .collect();
    expected.insert(n, index.clone());
    expected.sort();
    assert_eq!(files, expected);

    // One file: model.safetensors in the folder, which reads back as the
    // folder's checkpoint (a folder input stands for its one model file).
    let one = format!("{}/", dir.path().join("one").display());
    let o = run(&[&fixture(NPZ), "-o", &one, "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(files_under(&dir.path().join("one")), ["model.safetensors"]);
    let back = dir.path().join("back.safetensors");
    let o = run(&[&one, "-o", s(&back), "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let written = std::fs::read(dir.path().join("one/model.safetensors")).unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), written);
}

#[test]
fn an_existing_folder_without_a_slash_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("d");
    std::fs::create_dir(&folder).unwrap();
    for shard_args in [&[][..], &["--max-shard-size", "100"][..]] {
        let mut args = vec![fixture(NPZ), "-o".into(), s(&folder).into()];
        args.extend(shard_args.iter().map(|a| a.to_string()));
        let o = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(support::code(&o), 2, "{shard_args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("is a folder") && err.contains("end the name with /"),
            "{err}"
        );
        assert_eq!(
            files_under(dir.path()),
            Vec::<String>::new(),
            "nothing written"
        );
    }
}

#[test]
fn an_output_named_like_another_format_is_warned_of_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.npz");
    let o = run(&[&fixture(NPZ), "-o", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let warned: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warned.len(), 1, "{err}");
    assert!(
        warned[0].contains(".npz") && warned[0].contains("safetensors"),
        "{err}"
    );
    assert_eq!(header(&out)["layer.0.weight"]["dtype"], "F32");

    // A .safetensors name, or none at all, is not warned of.
    for name in ["out.safetensors", "out"] {
        let o = run(&[&fixture(NPZ), "-o", s(&dir.path().join(name))]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!stderr(&o).contains("warning"), "{name}: {}", stderr(&o));
    }
}

// ---- 10: what the newcomer reads first -------------------------------------------------------

#[test]
fn no_arguments_print_the_help() {
    let o = run(&[]);
    let err = stderr(&o);
    assert!(err.contains("Usage:") && err.contains("Commands:"), "{err}");
    assert!(
        !err.contains("required arguments were not provided"),
        "{err}"
    );
}

#[test]
fn the_help_says_pytorch_and_that_o_is_required() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    let about = help.lines().next().unwrap();
    assert!(about.contains("PyTorch"), "{about}");
    let usage = help.lines().find(|l| l.starts_with("Usage:")).unwrap();
    assert!(usage.contains("-o <OUT>"), "{usage}");
}

#[test]
fn inspect_help_offers_no_conversion_choice() {
    let o = run(&["inspect", "--help"]);
    assert!(o.status.success());
    assert!(!stdout(&o).contains("--dedupe-tied"), "{}", stdout(&o));
}

#[test]
fn dry_run_json_is_one_line_with_ok_like_the_report() {
    let o = run(&[&fixture(NPZ), "--dry-run", "--json", "-o", "x.safetensors"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 1, "{text}");
    let plan: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(plan["ok"], true);
    assert_eq!(plan["tensors"], 5);
}

#[test]
fn inspect_of_an_unknown_file_says_so_as_converting_does() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("hello.txt", &b"hello, world\n"[..]),
        ("empty.npz", &b""[..]),
    ] {
        let f = dir.path().join(name);
        std::fs::write(&f, bytes).unwrap();
        let o = run(&["inspect", s(&f)]);
        assert_eq!(o.status.code(), Some(1), "{name}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        // An empty file is said for what it is (issue 42.6), text shown as text.
        let said = match bytes.is_empty() {
            true => "the input is empty (0 bytes)",
            false => r#"unknown input format (first bytes 68 65 6c 6c ("hello, world"))"#,
        };
        assert!(err.contains(said), "{name}: {err}");
        assert!(err.contains(name), "{err}");
    }
}

#[test]
fn a_truncated_npz_says_it_looks_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let whole = std::fs::read(fixture(NPZ)).unwrap();
    let cut = dir.path().join("cut.npz");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let o = run(&[s(&cut), "-o", s(&dir.path().join("o.safetensors"))]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("looks truncated"), "{}", stderr(&o));
}

/// A 64 MiB tensor behind its header: inspect answers from the header and
/// closes the pipe, so the writer is refused long before the end (spooling
/// took it all).
#[test]
fn inspect_of_standard_input_reads_the_header_only() {
    const DATA: usize = 64 << 20;
    let mut json =
        format!(r#"{{"w":{{"dtype":"U8","shape":[{DATA}],"data_offsets":[0,{DATA}]}}}}"#);
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let mut big = (json.len() as u64).to_le_bytes().to_vec();
    big.extend_from_slice(json.as_bytes());
    big.resize(big.len() + DATA, 0);
    let mut child = Command::new(BIN)
        .args(["inspect", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut sent = 0;
        for piece in big.chunks(64 << 10) {
            if stdin.write_all(piece).is_err() {
                break;
            }
            sent += piece.len();
        }
        sent
    });
    let o = child.wait_with_output().unwrap();
    let sent = writer.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("67108864"), "{}", stdout(&o));
    assert!(!stderr(&o).contains("spooling"), "{}", stderr(&o));
    assert!(sent < DATA / 2, "{sent} bytes taken from the pipe");
}

#[test]
fn byte_counts_are_said_once() {
    let o = run(&["inspect", &fixture("example/model.safetensors")]);
    let text = stdout(&o);
    let summary = text.lines().find(|l| l.contains("tensors,")).unwrap();
    assert!(summary.contains("data 204 bytes"), "{summary}");
    assert!(
        !summary.contains(" B)") && !summary.contains("204 B"),
        "{summary}"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.safetensors");
    let o = run(&[&fixture(NPZ), "-o", s(&out)]);
    let wrote = stderr(&o);
    let line = wrote.lines().find(|l| l.starts_with("wrote ")).unwrap();
    let len = std::fs::metadata(&out).unwrap().len();
    assert!(line.ends_with(&format!(": {len} bytes")), "{line}");
}

// ---- 5: messages name the options in the caller's language ----------------------------------
// The CLI's name flags, never Python keywords (issue 42.2); the Python package
// says `allow_empty=True` instead (python/tests/test_options.py).

#[test]
fn refusals_name_the_flag_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join("o.safetensors");
    let o = run(&[&fixture(NPZ), "--include", "nothing.*", "-o", s(&out)]);
    let e = stderr(&o);
    assert!(e.contains("pass --allow-empty"), "{e}");
    assert!(!e.contains("allow_empty"), "{e}");

    let model = dir.path().join("m.safetensors");
    std::fs::copy(fixture("example/model.safetensors"), &model).unwrap();
    let o = run(&[s(&model), "-o", s(&model)]);
    let e = stderr(&o);
    assert!(e.contains("pass --overwrite-input"), "{e}");
    assert!(!e.contains("overwrite_input"), "{e}");
}
