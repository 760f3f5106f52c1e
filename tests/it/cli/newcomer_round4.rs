//! Issue 42, a new user's fourth try, through the built binary: mistyped
//! subcommands, messages that say what to do next, the help's first lines.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::{self, code, stderr, BIN};

fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_mistyped_subcommand_gets_did_you_mean_not_a_request_for_output() {
    let dir = tempfile::tempdir().unwrap();
    let model = support::fixtures().join("example/model.safetensors");
    let model = model.to_str().unwrap();
    for (typed, meant) in [
        ("valdate", "validate"),
        ("inspcet", "inspect"),
        ("upload", "uploads"),
    ] {
        let o = run_in(dir.path(), &[typed, model]);
        let err = stderr(&o);
        assert_eq!(code(&o), 2, "{typed}: {err}");
        assert!(
            err.contains(&format!("did you mean '{meant}'")),
            "{typed}: {err}"
        );
        assert!(!err.contains("--output"), "{typed}: {err}");
    }
    // With --report json the failure is one JSON object, as for any usage error.
    let o = run_in(dir.path(), &["valdate", model, "--report", "json"]);
    let v: serde_json::Value = serde_json::from_str(stderr(&o).trim()).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did you mean 'validate'"),
        "{v}"
    );
    // A file of that name is an input, as before.
    std::fs::copy(model, dir.path().join("valdate")).unwrap();
    let o = run_in(dir.path(), &["valdate", "-o", "out.safetensors", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `s` without its ANSI escape sequences (ESC [ ... final byte).
fn visible(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        }
    }
    out
}

#[test]
fn the_progress_bar_fits_80_columns_whatever_the_tensor_name() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to provide a pseudo-terminal");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.safetensors");
    let name = format!(
        "model.layers.0.{}.weight",
        "very_long_module_name_".repeat(8)
    );
    let mut src = safetensors_stream::source::MemorySource::new("m");
    src.push(
        &name,
        safetensors_stream::Dtype::U8,
        [96 << 20],
        vec![1u8; 96 << 20],
    )
    .unwrap();
    let mut sources: Vec<Box<dyn safetensors_stream::source::Source>> = vec![Box::new(src)];
    support::block_on(safetensors_stream::convert::convert_sources(
        &mut sources,
        &safetensors_stream::convert::Output::File(input.clone()),
        &safetensors_stream::convert::ConvertOptions::default().sync(false),
    ))
    .unwrap();
    let out = dir.path().join("out.safetensors");
    let cmd = format!(
        "stty cols 80 rows 24; exec {BIN} {} -o {} --buffer-size 16KiB --no-sync",
        input.display(),
        out.display()
    );
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{screen}");
    let shown = visible(&screen);
    // The bar drew, with the start of the tensor's name.
    assert!(
        shown.contains("MiB") && shown.contains(" model."),
        "{shown:?}"
    );
    for line in shown.split(['\r', '\n']) {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line:?}",
            line.chars().count()
        );
    }
}

/// The line of `file` (in the repository) that starts with `key`.
fn line_of(file: &str, key: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let line = text.lines().find(|l| l.starts_with(key));
    line.unwrap_or_else(|| panic!("no {key} in {file}"))
        .to_string()
}

#[test]
fn every_first_description_names_gguf_and_quantized_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let mut said = vec![];
    for flag in ["-h", "--help"] {
        let o = run_in(dir.path(), &[flag]);
        let help = String::from_utf8_lossy(&o.stdout).into_owned();
        // The about line, then the INPUT's help.
        said.push((
            flag.to_string(),
            help.lines().next().unwrap_or_default().to_string(),
        ));
        let after = help.rsplit("<INPUT>...").next().unwrap_or_default();
        let input = after
            .split("\nOptions:")
            .next()
            .unwrap_or_default()
            .to_string();
        said.push((format!("{flag} INPUT"), input));
    }
    said.push(("Cargo.toml".into(), line_of("Cargo.toml", "description")));
    said.push((
        "pyproject.toml".into(),
        line_of("python/pyproject.toml", "description"),
    ));
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"));
    let readme = readme.unwrap();
    let first_paragraph = readme.split("\n\n").nth(1).unwrap().to_string();
    said.push(("README".into(), first_paragraph));
    for (where_, text) in said {
        assert!(
            text.contains("GGUF") && text.contains("quantized"),
            "{where_}: {text}"
        );
    }
}
