//! `convert` as a product: the JSON report, --dry-run, --checksum, progress
//! on a terminal and not elsewhere, completions, help. Through the built binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn run(args: &[&std::ffi::OsStr]) -> Output {
    bin().args(args).stdin(Stdio::null()).output().unwrap()
}

fn os<S: AsRef<std::ffi::OsStr> + ?Sized>(s: &S) -> &std::ffi::OsStr {
    s.as_ref()
}

fn json_line(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "the report is one line and nothing else: {text}"
    );
    serde_json::from_str(lines[0]).unwrap()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn report_json_on_success_describes_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let input = fixture("example/model.npz");
    let o = run(&[
        os(&input),
        os("-o"),
        os(&out),
        os("--report"),
        os("json"),
        os("--checksum"),
        os("sha256"),
        os("--cast"),
        os("F32=BF16"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(o.stdout.is_empty());
    let r = json_line(&o.stderr);
    assert_eq!(r["ok"], true);
    assert_eq!(r["inputs"][0], input.display().to_string());
    assert_eq!(r["tensors"], 5);
    let file = std::fs::read(&out).unwrap();
    assert_eq!(r["outputs"][0]["bytes"], file.len() as u64);
    assert_eq!(r["outputs"][0]["path"], out.display().to_string());
    // The digest computed while streaming is the file's.
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(&file)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(r["outputs"][0]["sha256"], digest);
    let casts = r["casts"].as_array().unwrap();
    assert_eq!(casts.len(), 2, "the two F32 tensors");
    assert!(casts
        .iter()
        .all(|c| c["from"] == "F32" && c["to"] == "BF16"));
    assert!(r["seconds"].as_f64().unwrap() >= 0.0);
    assert!(r["warnings"].as_array().unwrap().is_empty());
}

#[test]
fn report_json_on_failure_is_a_typed_error_object() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.safetensors");
    let input = fixture("npy/bad/object.npy");
    let o = run(&[os(&input), os("-o"), os(&out), os("--report"), os("json")]);
    assert_eq!(o.status.code(), Some(1));
    let r = json_line(&o.stderr);
    assert_eq!(r["ok"], false);
    assert_eq!(r["exit_code"], 1);
    assert_eq!(r["error"]["kind"], "unsupported_dtype");
    assert_eq!(r["error"]["category"], "BadInput");
    assert_eq!(r["error"]["input"], input.display().to_string());
    assert_eq!(r["error"]["offset"], 10);
    assert!(r["error"]["message"].as_str().unwrap().contains("|O"));
    assert!(!out.exists());
}

#[test]
fn report_json_carries_spooling_notices_as_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.safetensors");
    let npz = std::fs::read(fixture("npz/mixed.npz")).unwrap();
    let mut child = bin()
        .args([os("-"), os("-o"), os(&out), os("--report"), os("json")])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&npz).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let r = json_line(&o.stderr);
    let warnings = r["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("spooling")),
        "{r}"
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(fixture("npz/expected/mixed.safetensors")).unwrap()
    );
}

#[test]
fn dry_run_writes_nothing_and_shows_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let input = fixture("example/model.npz");
    let o = run(&[
        os(&input),
        os("-o"),
        os(&out),
        os("--dry-run"),
        os("--cast-all"),
        os("BF16"),
        os("--max-shard-size"),
        os("100"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(files_in(dir.path()).is_empty(), "--dry-run wrote something");
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("m-00001-of-"), "{text}");
    assert!(text.contains("cast F32 -> BF16"), "{text}");
    assert!(text.contains("\"layer.0.weight\""), "{text}");
}

#[test]
fn dry_run_json_matches_what_a_real_run_writes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let input = fixture("example/model.npz");
    let o = run(&[
        os(&input),
        os("-o"),
        os(&out),
        os("--dry-run"),
        os("--json"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(files_in(dir.path()).is_empty());
    let plan: Value = serde_json::from_slice(&o.stdout).unwrap();
    let real = run(&[os(&input), os("-o"), os(&out), os("-q")]);
    assert_eq!(real.status.code(), Some(0));
    let header = safetensors_stream::source::read_file_header(
        &out,
        safetensors_stream::header::Rules::STRICT,
    )
    .unwrap();
    let planned = &plan["outputs"][0];
    assert_eq!(planned["header_len"], header.header_len);
    assert_eq!(planned["file_len"], header.file_len());
    let names: Vec<&str> = planned["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let written: Vec<&str> = header
        .tensors
        .iter()
        .map(|t| t.meta.name.as_str())
        .collect();
    assert_eq!(names, written);
    for (p, t) in planned["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&header.tensors)
    {
        assert_eq!(p["data_offsets"][0], t.begin);
        assert_eq!(p["data_offsets"][1], t.end);
        assert_eq!(p["source"]["input"], input.display().to_string());
    }
}

#[test]
fn no_progress_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let o = run(&[os(&fixture("example/model.npz")), os("-o"), os(&out)]);
    assert_eq!(o.status.code(), Some(0));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(!err.contains("progress"), "{err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    assert!(err.contains("wrote "), "{err}");
    // --quiet: nothing at all.
    let q = run(&[
        os(&fixture("example/model.npz")),
        os("-o"),
        os(&out),
        os("-q"),
    ]);
    assert!(q.stderr.is_empty());
}

#[test]
fn progress_can_be_forced_off_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let o = run(&[
        os(&fixture("example/model.npz")),
        os("-o"),
        os(&out),
        os("--progress"),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(err.contains("progress:") && err.contains("(100%)"), "{err}");
}

#[test]
fn progress_shows_on_a_pseudo_terminal() {
    // `script` runs the command on a pty; skip where it is missing.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to provide a pseudo-terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.safetensors");
    // Large enough that the bar draws before the run ends.
    let mut src = safetensors_stream::source::MemorySource::new("m");
    src.push(
        "w",
        safetensors_stream::Dtype::U8,
        [64 << 20],
        vec![1u8; 64 << 20],
    )
    .unwrap();
    let mut sources: Vec<Box<dyn safetensors_stream::source::Source>> = vec![Box::new(src)];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(safetensors_stream::convert::convert_sources(
        &mut sources,
        &safetensors_stream::convert::Output::File(input.clone()),
        &safetensors_stream::convert::ConvertOptions::default(),
    ))
    .unwrap();
    let out = dir.path().join("out.safetensors");
    let cmd = format!(
        "{} {} -o {} --buffer-size 64KiB --no-sync",
        env!("CARGO_BIN_EXE_safetensors-convert"),
        input.display(),
        out.display()
    );
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let screen = String::from_utf8_lossy(&o.stdout);
    // indicatif draws with escape sequences and shows the byte counts.
    assert!(
        screen.contains("MiB") && screen.contains('\x1b'),
        "{screen:?}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&input).unwrap());
}

#[test]
fn completions_are_generated_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&[os("completions"), os(shell)]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let text = String::from_utf8(o.stdout).unwrap();
        assert!(text.contains("--max-shard-size"), "{shell}");
        assert!(text.contains("validate"), "{shell}");
    }
    assert_eq!(
        run(&[os("completions"), os("cmd.exe")]).status.code(),
        Some(2)
    );
}

#[test]
fn help_documents_exit_codes_and_examples() {
    let o = run(&[os("--help")]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).unwrap();
    for needle in [
        "Exit codes: 0 success, 1 bad input",
        "3 I/O or environment error",
        "  safetensors-convert weights.npz -o model.safetensors",
        "--report",
        "--dry-run",
        "--raw-dtype",
        "--cast-all",
    ] {
        assert!(text.contains(needle), "--help lacks {needle:?}");
    }
}

#[test]
fn version_prints() {
    let o = run(&[os("--version")]);
    assert_eq!(o.status.code(), Some(0));
    // The installed name, which is not ImageMagick's `convert` (issue 42.1).
    assert!(String::from_utf8(o.stdout)
        .unwrap()
        .starts_with("safetensors-convert "));
}
