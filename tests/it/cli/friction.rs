//! The CLI frictions of issue 16, through the built binary: empty runs,
//! JSON for usage errors, pattern renames, dry runs without `-o`, folders
//! as inputs, ml_dtypes npy members, overflow warnings, progress.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::support;
use support::numpy::{build_zip, npy, ZipMember};
use support::{stderr, BIN};

fn bin() -> Command {
    Command::new(BIN)
}

fn fixture(name: &str) -> PathBuf {
    support::fixtures().join(name)
}

fn run<S: AsRef<OsStr>>(args: &[S]) -> Output {
    bin().args(args).stdin(Stdio::null()).output().unwrap()
}

fn json_line(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line and nothing else: {text}");
    serde_json::from_str(lines[0]).unwrap()
}

/// Tensor names of a safetensors file, from its header.
fn names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut v: Vec<String> = header
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    v.sort();
    v
}

const NPZ: &str = "example/model.npz";

#[test]
fn filters_that_select_nothing_fail_with_exit_2_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let o = run(&[
        fixture(NPZ).as_os_str(),
        OsStr::new("--include"),
        OsStr::new("model.layer.*"),
        OsStr::new("-o"),
        out.as_os_str(),
        OsStr::new("--report"),
        OsStr::new("json"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let r = json_line(&o.stderr);
    assert_eq!(r["ok"], false);
    assert_eq!(r["error"]["kind"], "nothing_selected");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains(r#"--include "model.layer.*""#));
    assert!(!out.exists(), "nothing written");
    // The same run with --allow-empty writes a file with no tensors.
    let o = run(&[
        fixture(NPZ).as_os_str(),
        OsStr::new("--include"),
        OsStr::new("model.layer.*"),
        OsStr::new("--allow-empty"),
        OsStr::new("-o"),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(names(&out).is_empty());
}

#[test]
fn an_input_with_no_tensors_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.safetensors");
    let mut bytes = 8u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}      ");
    std::fs::write(&empty, bytes).unwrap();
    let out = dir.path().join("out.safetensors");
    let o = run(&[empty.as_os_str(), OsStr::new("-o"), out.as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds no tensors"), "{}", stderr(&o));
    assert!(!out.exists());
    let o = run(&[
        empty.as_os_str(),
        OsStr::new("--allow-empty"),
        OsStr::new("-o"),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&empty).unwrap());
}

#[test]
fn report_json_covers_argument_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    for report in [&["--report", "json"][..], &["--report=json"][..]] {
        let mut args: Vec<&OsStr> = vec![
            fixture(NPZ).into_os_string().leak(),
            OsStr::new("--max-shard-size"),
            OsStr::new("5XB"),
            OsStr::new("-o"),
            out.as_os_str(),
        ];
        args.extend(report.iter().map(OsStr::new));
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2));
        let r = json_line(&o.stderr);
        assert_eq!(r["ok"], false);
        assert_eq!(r["exit_code"], 2);
        assert_eq!(r["error"]["kind"], "usage");
        assert!(r["error"]["message"].as_str().unwrap().contains("5XB"));
    }
    // An unknown flag too.
    let o = run(&["x.npz", "--bogus", "--report", "json", "-o", "y"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(json_line(&o.stderr)["error"]["category"], "Usage");
    // Without --report json, clap's text as before.
    let o = run(&["x.npz", "--max-shard-size", "5XB", "-o", "y"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
}

#[test]
fn strip_prefix_and_rename_regex_apply_in_the_documented_order() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let common = [
        fixture(NPZ).into_os_string(),
        "--rename".into(),
        "step=global_step".into(),
        "--strip-prefix".into(),
        "layer.".into(),
        "--rename-regex".into(),
        r"^(\d+)\.=h.$1.".into(),
        "--prefix".into(),
        "m.".into(),
        "-o".into(),
        out.clone().into_os_string(),
    ];
    let want = [
        "m.global_step",
        "m.h.0.bias",
        "m.h.0.weight",
        "m.h.1.bias",
        "m.h.1.weight",
    ];
    // The dry run shows each rename exactly...
    let mut dry = common.to_vec();
    dry.extend(["--dry-run".into(), "--json".into()]);
    let o = run(&dry);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut renames: Vec<(String, String)> = plan["renames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["from"].as_str().unwrap().into(),
                r["to"].as_str().unwrap().into(),
            )
        })
        .collect();
    renames.sort();
    let mut expected: Vec<(String, String)> = [
        ("layer.0.bias", "m.h.0.bias"),
        ("layer.0.weight", "m.h.0.weight"),
        ("layer.1.bias", "m.h.1.bias"),
        ("layer.1.weight", "m.h.1.weight"),
        ("step", "m.global_step"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    expected.sort();
    assert_eq!(renames, expected);
    assert!(!out.exists());
    // The text plan lists them too.
    let o = run(&[&common[..], &["--dry-run".into()]].concat());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(r#"model.npz: "layer.0.bias" -> "m.h.0.bias""#),
        "{text}"
    );
    assert_eq!(text.matches("\nrename ").count(), 5, "{text}");
    // ...and the real run writes those names.
    let o = run(&common);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(names(&out), want);
}

#[test]
fn a_regex_that_matches_nothing_or_does_not_compile_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    for rule in ["^nope=x", "(=x"] {
        let o = run(&[
            fixture(NPZ).as_os_str(),
            OsStr::new("--rename-regex"),
            OsStr::new(rule),
            OsStr::new("-o"),
            out.as_os_str(),
            OsStr::new("--report"),
            OsStr::new("json"),
        ]);
        assert_eq!(o.status.code(), Some(2), "{rule}: {}", stderr(&o));
        assert_eq!(json_line(&o.stderr)["error"]["kind"], "usage");
        assert!(!out.exists());
    }
}

#[test]
fn dry_run_without_output_plans_against_a_default_name() {
    let dir = tempfile::tempdir().unwrap();
    let o = bin()
        .args([
            fixture(NPZ).as_os_str(),
            OsStr::new("--dry-run"),
            OsStr::new("--json"),
        ])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["outputs"][0]["path"], "model.safetensors");
    assert_eq!(plan["tensors"], 5);
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing written"
    );
    // Beside an input of that name, the plan does not name the input.
    std::fs::copy(
        fixture("example/model-input.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    let o = bin()
        .args(["model.safetensors", "--dry-run", "--json"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["outputs"][0]["path"], "model.converted.safetensors");
    // A real run still needs -o.
    let o = run(&[fixture(NPZ).as_os_str()]);
    assert_eq!(o.status.code(), Some(2));
}

/// A tensor's dtype and data bytes in a safetensors file.
fn tensor(path: &Path, name: &str) -> (String, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let t = &header[name];
    let [b, e] = [0, 1].map(|i| t["data_offsets"][i].as_u64().unwrap() as usize);
    (
        t["dtype"].as_str().unwrap().to_string(),
        bytes[8 + n + b..8 + n + e].to_vec(),
    )
}

#[test]
fn npy_void_as_reads_ml_dtypes_members_explicitly() {
    let dir = tempfile::tempdir().unwrap();
    // bfloat16 [1.0, -2.5, 3.0] and float8 bytes, as np.save writes ml_dtypes arrays.
    let bf16 = [0x80u8, 0x3f, 0x20, 0xc0, 0x40, 0x40];
    let npz = build_zip(&[
        ZipMember::stored("w.npy", npy("<V2", false, &[3], &bf16)),
        ZipMember::deflated("b.npy", npy("<f4", false, &[1], &1f32.to_le_bytes())),
    ])
    .0;
    let input = dir.path().join("bf16.npz");
    std::fs::write(&input, npz).unwrap();
    let out = dir.path().join("m.safetensors");
    let convert = |extra: &[&str]| {
        let mut args = vec![input.as_os_str(), OsStr::new("-o"), out.as_os_str()];
        args.extend(extra.iter().map(OsStr::new));
        run(&args)
    };
    // Never guessed: refused, and the message says the way out.
    let o = convert(&["--report", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = json_line(&o.stderr);
    assert_eq!(r["error"]["kind"], "unsupported_dtype");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--npy-void-as"));
    assert!(!out.exists());
    // A dtype of another width is refused.
    let o = convert(&["--npy-void-as", "F8_E4M3", "--report", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(json_line(&o.stderr)["error"]["kind"], "unsupported_dtype");
    assert!(!out.exists());
    // The right one: the bytes pass unchanged, typed BF16; other members untouched.
    let o = convert(&["--npy-void-as", "bf16"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(tensor(&out, "w"), ("BF16".to_string(), bf16.to_vec()));
    assert_eq!(tensor(&out, "b").0, "F32");
}

#[test]
fn npy_void_as_float8_on_a_single_npy_and_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let data = [0x38u8, 0x40, 0xb8, 0x00];
    let input = dir.path().join("f8.npy");
    std::fs::write(&input, npy("|V1", false, &[2, 2], &data)).unwrap();
    let out = dir.path().join("m.safetensors");
    let o = run(&[
        input.as_os_str(),
        OsStr::new("--npy-void-as"),
        OsStr::new("F8_E4M3"),
        OsStr::new("-o"),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(tensor(&out, "f8"), ("F8_E4M3".to_string(), data.to_vec()));
    // The same through a stream.
    let o = bin()
        .args(["-", "--name", "x", "--npy-void-as", "F8_E5M2", "-o"])
        .arg(&out)
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(tensor(&out, "x"), ("F8_E5M2".to_string(), data.to_vec()));
}

#[test]
fn a_folder_input_stands_for_its_one_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    let out = dir.path().join("out.safetensors");
    let to_out = |input: &Path| {
        run(&[
            input.as_os_str(),
            OsStr::new("-o"),
            out.as_os_str(),
            OsStr::new("--report"),
            OsStr::new("json"),
        ])
    };
    // No model file: refused, saying what to pass.
    let o = to_out(&model);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let r = json_line(&o.stderr);
    assert_eq!(r["error"]["kind"], "folder_input");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("pass a file"));
    // One model file: that file.
    std::fs::copy(fixture(NPZ), model.join("weights.npz")).unwrap();
    let o = to_out(&model);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(json_line(&o.stderr)["tensors"], 5);
    // Two: which one? Refused, naming them.
    std::fs::copy(
        fixture("example/model-input.safetensors"),
        model.join("other.safetensors"),
    )
    .unwrap();
    let o = to_out(&model);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let msg = json_line(&o.stderr)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("weights.npz") && msg.contains("other.safetensors"),
        "{msg}"
    );
    // A sharded checkpoint: its index wins over the shards.
    std::fs::remove_file(model.join("weights.npz")).unwrap();
    std::fs::remove_file(model.join("other.safetensors")).unwrap();
    let o = run(&[
        fixture(NPZ).as_os_str(),
        OsStr::new("--max-shard-size"),
        OsStr::new("100B"),
        OsStr::new("-o"),
        model.join("model.safetensors").as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = to_out(&model);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = json_line(&o.stderr);
    assert_eq!(r["tensors"], 5);
    assert!(
        r["inputs"][0].as_str().unwrap().ends_with(".index.json"),
        "{r}"
    );
}

#[test]
fn casts_that_overflow_to_infinity_are_counted_and_warned() {
    let dir = tempfile::tempdir().unwrap();
    let values = [1.0f32, 1e10, -7e4, 65504.0, f32::INFINITY, 3.0];
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let input = dir.path().join("w.npy");
    std::fs::write(&input, npy("<f4", false, &[6], &data)).unwrap();
    let out = dir.path().join("m.safetensors");
    let want = r#"tensor "w": 2 finite values overflowed to infinity casting F32 to F16"#;
    // File to file (the fast path), with the JSON report: one warning.
    let o = run(&[
        input.as_os_str(),
        OsStr::new("--cast"),
        OsStr::new("F32=F16"),
        OsStr::new("-o"),
        out.as_os_str(),
        OsStr::new("--report"),
        OsStr::new("json"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = json_line(&o.stderr);
    assert_eq!(r["warnings"], serde_json::json!([want]));
    // Through a stream (the async sink) and to standard output: a notice line.
    let o = bin()
        .args(["-", "--name", "w", "--cast", "F32=F16", "-o", "-"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("safetensors-convert: warning: {want}")),
        "{}",
        stderr(&o)
    );
    // A cast that fits warns of nothing.
    let o = run(&[
        input.as_os_str(),
        OsStr::new("--cast"),
        OsStr::new("F32=BF16"),
        OsStr::new("-o"),
        out.as_os_str(),
        OsStr::new("--report"),
        OsStr::new("json"),
    ]);
    assert_eq!(json_line(&o.stderr)["warnings"], serde_json::json!([]));
}

/// The text of the screen line where `needle` starts, as a terminal shows
/// it: after the last `\n` or `\r` before it, without escape sequences.
fn screen_line_before(screen: &str, needle: &str) -> String {
    let at = screen
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} in {screen:?}"));
    let before = &screen[..at];
    let line = before.rsplit(['\n', '\r']).next().unwrap_or("");
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // CSI: ESC [ parameters, then a final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn an_interruption_on_a_terminal_is_told_on_a_fresh_line() {
    // `script` runs the command on a pty; skip where it or mkfifo is missing.
    let have = |c: &str| Command::new(c).arg("--version").output().is_ok();
    if !have("script") || !have("mkfifo") {
        eprintln!("skipped: no `script` or `mkfifo`");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("w.npy");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let pidfile = dir.path().join("pid");
    let out = dir.path().join("out.safetensors");
    let cmd = format!(
        "echo $$ > {}; exec {} {} -o {} --buffer-size 64KiB --no-sync",
        pidfile.display(),
        env!("CARGO_BIN_EXE_safetensors-convert"),
        fifo.display(),
        out.display()
    );
    let script = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // 64 MiB declared, 4 MiB sent, then the producer stalls: the bar draws and waits.
    let mut producer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    use std::io::Write;
    let header = npy("|u1", false, &[64 << 20], &[]);
    producer.write_all(&header).unwrap();
    for _ in 0..64 {
        producer.write_all(&[7u8; 64 << 10]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    assert!(Command::new("kill")
        .args(["-INT", pid.trim()])
        .status()
        .unwrap()
        .success());
    let o = script.wait_with_output().unwrap();
    drop(producer);
    let screen = String::from_utf8_lossy(&o.stdout);
    assert!(screen.contains("MiB"), "the bar was drawn: {screen:?}");
    let line = screen_line_before(&screen, "safetensors-convert: interrupted by SIGINT");
    assert_eq!(
        line, "",
        "the message shares a line with the bar: {screen:?}"
    );
    assert!(!out.exists());
}

#[test]
fn inspect_and_validate_take_a_checkpoint_folder_as_convert_does() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("my-model");
    std::fs::create_dir(&model).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    let inspect = |extra: &[&str]| {
        let mut args: Vec<&OsStr> = vec![OsStr::new("inspect"), model.as_os_str()];
        args.extend(extra.iter().map(OsStr::new));
        run(&args)
    };
    let validate = || run(&[OsStr::new("validate"), model.as_os_str()]);
    // No checkpoint in it: the folder refusal, exit 2, for both.
    for o in [inspect(&[]), validate()] {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("pass a file"), "{}", stderr(&o));
        assert!(!stderr(&o).contains("Is a directory"), "{}", stderr(&o));
    }
    // One safetensors file: inspect lists it, validate checks it.
    let file = model.join("model.safetensors");
    std::fs::copy(fixture("example/model-input.safetensors"), &file).unwrap();
    let o = inspect(&["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files"][0]["tensors"].as_array().unwrap().len(), 5, "{v}");
    let o = validate();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.starts_with(&format!("{}: valid (5 tensors", file.display())),
        "{shown}"
    );
    // A sharded checkpoint: its index stands for the folder.
    std::fs::remove_file(&file).unwrap();
    let o = run(&[
        fixture(NPZ).as_os_str(),
        OsStr::new("--max-shard-size"),
        OsStr::new("100B"),
        OsStr::new("-o"),
        file.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = validate();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("model.safetensors.index.json: valid"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // An npz folder: inspect lists its members; validate says what it is.
    let npz_folder = dir.path().join("npz-model");
    std::fs::create_dir(&npz_folder).unwrap();
    std::fs::copy(fixture(NPZ), npz_folder.join("weights.npz")).unwrap();
    let o = run(&[OsStr::new("inspect"), npz_folder.as_os_str()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("weights.npz"));
    let o = run(&[OsStr::new("validate"), npz_folder.as_os_str()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("npz"), "{}", stderr(&o));
}

/// A PyTorch checkpoint is checked as convert reads it, as its index and
/// the folder holding it are (issue 42.7: it was refused as "not a
/// safetensors file" while its folder passed).
#[test]
fn validate_checks_a_pytorch_checkpoint_as_convert_reads_it() {
    for name in ["pytorch/ok/dtypes.pt", "pytorch/ok/dtypes-legacy.pt"] {
        let o = run(&[OsStr::new("validate"), fixture(name).as_os_str()]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(": valid ("), "{name}: {out}");
    }
}

#[test]
fn an_output_onto_the_file_a_folder_input_stands_for_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("my-model");
    std::fs::create_dir(&model).unwrap();
    let file = model.join("model.safetensors");
    std::fs::copy(fixture("example/model-input.safetensors"), &file).unwrap();
    let before = std::fs::read(&file).unwrap();
    let o = run(&[
        model.as_os_str(),
        OsStr::new("--include"),
        OsStr::new("step"),
        OsStr::new("-o"),
        file.as_os_str(),
        OsStr::new("--report"),
        OsStr::new("json"),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(json_line(&o.stderr)["error"]["kind"], "output_is_input");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the input is untouched"
    );
}

#[test]
fn a_dry_run_with_report_json_puts_every_warning_in_the_json_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    // An output with another hard link: the real run warns, so the plan does.
    let out = dir.path().join("out.safetensors");
    std::fs::write(&out, b"old").unwrap();
    std::fs::hard_link(&out, dir.path().join("other-name.safetensors")).unwrap();
    let dry_run = |extra: &[&OsStr]| {
        let mut args = vec![
            fixture(NPZ).into_os_string(),
            "--dry-run".into(),
            "--report".into(),
            "json".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_os_string()));
        bin()
            .args(&args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for extra in [&[][..], &[OsStr::new("--json")][..]] {
        let mut args = extra.to_vec();
        args.extend([OsStr::new("-o"), out.as_os_str()]);
        let o = dry_run(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stderr(&o), "", "no loose lines on stderr");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let warnings = v["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 1, "{v}");
        assert!(
            warnings[0].as_str().unwrap().contains("other hard links"),
            "{v}"
        );
        assert_eq!(v["outputs"][0]["tensors"].as_array().unwrap().len(), 5);
    }
    // Without -o, the default name chosen is said in the object too.
    let o = dry_run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["warnings"][0]
            .as_str()
            .unwrap()
            .contains("planning for model.safetensors"),
        "{v}"
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        b"old",
        "a dry run writes nothing"
    );
}

#[test]
fn progress_lines_show_no_eta_until_a_rate_is_known() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let o = run(&[
        fixture(NPZ).as_os_str(),
        OsStr::new("-o"),
        out.as_os_str(),
        OsStr::new("--progress"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("progress:")).collect();
    // The first line comes before any byte: no rate, so no ETA (not "0s").
    assert!(
        lines[0].contains("(0%), --/s, ETA --,"),
        "first line: {}",
        lines[0]
    );
    assert!(lines.last().unwrap().contains("(100%)"), "{err}");
}
