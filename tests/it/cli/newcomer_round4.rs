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

fn fixture(name: &str) -> String {
    support::fixtures().join(name).display().to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

// ---- 7: validate and inspect agree; validate --json; inspect of several files ----------------

#[test]
fn validate_takes_a_pytorch_file_as_it_takes_the_folder_holding_it() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fixture("pytorch/ok/tied.pt");
    let o = run_in(dir.path(), &["validate", &bin]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(": valid (3 tensors"), "{}", stdout(&o));
    // inspect lists the same tensors.
    let o = run_in(dir.path(), &["inspect", "--json", &bin]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tensor_count"], 3, "{v}");
    // An .npz is still no safetensors file: validate checks the format, convert reads it.
    let o = run_in(dir.path(), &["validate", &fixture("example/model.npz")]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not a safetensors file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn validate_json_names_each_file_and_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let good = fixture("example/model.safetensors");
    let bad = dir.path().join("bad.safetensors");
    std::fs::write(&bad, b"not a safetensors file at all").unwrap();
    let o = run_in(
        dir.path(),
        &["validate", "--json", &good, bad.to_str().unwrap()],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "the outcome is in the JSON");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["exit_code"], 1);
    let files = v["files"].as_array().unwrap();
    assert_eq!(files[0]["path"], good.as_str());
    assert_eq!(files[0]["valid"], true);
    assert!(files[0]["tensors"].as_u64().unwrap() > 0);
    assert_eq!(files[1]["valid"], false);
    assert_eq!(files[1]["error"]["category"], "BadInput");
    assert!(files[1]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("bad.safetensors"));
    let o = run_in(dir.path(), &["validate", "--json", &good]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], true);
}

#[test]
fn inspect_shows_several_files_and_goes_on_past_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let a = fixture("example/model.safetensors");
    let b = fixture("example/model.npz");
    let o = run_in(dir.path(), &["inspect", &a, &b]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains(&a) && text.contains(&b), "{text}");
    let o = run_in(dir.path(), &["inspect", "--json", &a, &b]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(2), "{v}");
    let o = run_in(dir.path(), &["inspect", &a, "missing.safetensors", &b]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("missing.safetensors"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&b),
        "the file after the bad one is shown"
    );
}

// ---- 9: messages that say what to do --------------------------------------------------------

#[test]
fn a_single_dtype_to_cast_points_at_cast_all() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            &fixture("example/model.npz"),
            "--cast",
            "BF16",
            "-o",
            "x.safetensors",
        ],
    );
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("use --cast-all BF16"), "{}", stderr(&o));
}

#[test]
fn an_include_that_selects_nothing_says_globs_match_whole_names() {
    let dir = tempfile::tempdir().unwrap();
    let o = run_in(
        dir.path(),
        &[
            &fixture("example/model.npz"),
            "--include",
            "layer",
            "-o",
            "x.safetensors",
        ],
    );
    assert_eq!(code(&o), 2);
    let e = stderr(&o);
    assert!(
        e.contains(r#"--include "*layer*" selects the names containing it"#),
        "{e}"
    );
    assert!(e.contains(r#"their names are "layer.0."#), "{e}");
    assert!(!dir.path().join("x.safetensors").exists());
}

#[test]
fn one_tensor_is_one_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.safetensors");
    let o = run_in(
        dir.path(),
        &[
            &fixture("example/model.npz"),
            "--include",
            "layer.0.weight",
            "-q",
            "-o",
            one.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run_in(dir.path(), &["validate", one.to_str().unwrap()]);
    assert!(stdout(&o).contains("valid (1 tensor,"), "{}", stdout(&o));
    let o = run_in(dir.path(), &["inspect", one.to_str().unwrap()]);
    assert!(stdout(&o).contains("  1 tensor, data"), "{}", stdout(&o));
}

// ---- 5: GGUF inspect shows the stored type, the written dtype, every key ---------------------

#[test]
fn gguf_inspect_shows_stored_types_and_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = fixture("gguf/types_le.gguf");
    let o = run_in(dir.path(), &["inspect", &gguf]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("q4_k "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(" Q4_K ") && row.contains(" BF16 "), "{row}");
    let o = run_in(
        dir.path(),
        &["inspect", "--json", "--dequantize-to", "F32", &gguf],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let q8 = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "q8_0")
        .unwrap();
    assert_eq!(q8["stored"], "Q8_0");
    assert_eq!(q8["dtype"], "F32");
    // Every key of the file, arrays among them, summarised.
    let md = v["metadata"].as_object().unwrap();
    assert!(md.contains_key("general.architecture"), "{v}");
    assert_eq!(
        md["test.strings"],
        serde_json::json!({"type": "string", "len": 3, "first": [r#""a""#, r#""bc""#, r#""""#]})
    );
    assert_eq!(md["test.nested"]["len"], 3);
    assert!(
        text.contains(r#"test.strings: [3 x string: "a", "bc", ""]"#),
        "{text}"
    );
    assert!(text.contains("test.floats: [2 x f32: 1.5, 2.5]"), "{text}");
}

// ---- 4: a folder with the same checkpoint in two forms --------------------------------------

#[test]
fn a_folder_with_safetensors_and_a_bin_reads_the_safetensors_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::copy(
        fixture("example/model.safetensors"),
        repo.join("model.safetensors"),
    )
    .unwrap();
    std::fs::copy(
        fixture("pytorch/ok/tied.pt"),
        repo.join("pytorch_model.bin"),
    )
    .unwrap();
    std::fs::write(repo.join("config.json"), "{}").unwrap();
    let out = dir.path().join("out.safetensors");
    let o = run_in(dir.path(), &["repo", "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(repo.join("model.safetensors")).unwrap()
    );
    let e = stderr(&o);
    assert!(
        e.contains("reading model.safetensors, the safetensors form"),
        "{e}"
    );
    assert!(e.contains("passing over pytorch_model.bin"), "{e}");
    for sub in ["validate", "inspect"] {
        let o = run_in(dir.path(), &[sub, "repo"]);
        assert!(o.status.success(), "{sub}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("passing over pytorch_model.bin"),
            "{sub}: {}",
            stderr(&o)
        );
    }
    // Two forms of a sharded checkpoint: the safetensors index.
    let sharded = dir.path().join("sharded");
    std::fs::create_dir(&sharded).unwrap();
    let o = run_in(
        dir.path(),
        &[
            &fixture("example/model.safetensors"),
            "--max-shard-size",
            "100B",
            "-q",
            "-o",
            sharded.join("model.safetensors").to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for f in std::fs::read_dir(support::fixtures().join("pytorch/ok/sharded")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), sharded.join(f.file_name())).unwrap();
    }
    let o = run_in(dir.path(), &["inspect", "sharded"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("reading model.safetensors.index.json"),
        "{}",
        stderr(&o)
    );
    // Two model files of one form are still a choice to make.
    std::fs::copy(
        fixture("example/model.safetensors"),
        repo.join("other.safetensors"),
    )
    .unwrap();
    let o = run_in(dir.path(), &["repo", "-o", out.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

// ---- 6: broken downloads said for what they are --------------------------------------------

#[test]
fn broken_downloads_are_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let pointer = "version https://git-lfs.github.com/spec/v1\n\
                   oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
                   size 548\n";
    let page = "<!DOCTYPE html>\n<html><head><title>Sign in</title></head></html>\n";
    let cases: [(&str, &[u8], &str); 4] = [
        ("pytorch_model.bin", pointer.as_bytes(), "git lfs pull"),
        ("model.safetensors", page.as_bytes(), "an HTML page"),
        ("empty.bin", b"", "the input is empty (0 bytes)"),
        (
            "weights.npz",
            pointer.as_bytes(),
            "a Git LFS pointer of a 548-byte file",
        ),
    ];
    for (name, bytes, said) in cases {
        std::fs::write(dir.path().join(name), bytes).unwrap();
        for args in [
            vec![name, "-o", "out.safetensors"],
            vec!["inspect", name],
            vec!["validate", name],
        ] {
            let o = run_in(dir.path(), &args);
            let e = stderr(&o);
            assert_eq!(code(&o), 1, "{args:?}: {e}");
            assert!(e.contains(said), "{args:?}: {e}");
            assert!(!e.contains("raw dump"), "{args:?}: {e}");
            assert!(!e.contains("at byte"), "{args:?}: {e}");
        }
        // Through a pipe too (16 bytes sniffed).
        let o = Command::new(BIN)
            .args(["-", "-o", "out.safetensors"])
            .current_dir(dir.path())
            .stdin(std::fs::File::open(dir.path().join(name)).unwrap())
            .output()
            .unwrap();
        let piped = said.split(" of a ").next().unwrap(); // the size line is past 16 bytes
        assert!(stderr(&o).contains(piped), "{name} piped: {}", stderr(&o));
    }
    // Anything else keeps the raw-dump hint, its printable bytes shown as text.
    std::fs::write(dir.path().join("dump.bin"), b"vers\x00\x01\x02\x03").unwrap();
    let o = run_in(dir.path(), &["dump.bin", "-o", "out.safetensors"]);
    let e = stderr(&o);
    assert!(e.contains("first bytes 76 65 72 73 (\"vers\")"), "{e}");
    assert!(e.contains("--raw-dtype"), "{e}");
}

// ---- 9: a training checkpoint without --pt-root, tied weights without --dedupe-tied ----------

/// A training checkpoint as `torch.save({"model": ..., "optimizer": ..., "epoch": 3})` writes
/// one: no tensor at the top level.
fn training_checkpoint(dir: &Path) -> String {
    use support::torch::{checkpoint, Item};
    let model = Item::Dict(vec![(
        "fc",
        Item::Dict(vec![
            ("weight", Item::Tensor(vec![1.0, 2.0, 3.0, 4.0])),
            ("bias", Item::Tensor(vec![0.5, -0.5])),
        ]),
    )]);
    let state = Item::Dict(vec![(
        "0",
        Item::Dict(vec![("exp_avg", Item::Tensor(vec![0.25; 4]))]),
    )]);
    let pt = checkpoint(&[
        ("epoch", Item::Int(3)),
        ("model", model),
        ("optimizer", Item::Dict(vec![("state", state)])),
    ]);
    support::write(dir, "ckpt.pt", &pt).display().to_string()
}

#[test]
fn a_training_checkpoint_without_pt_root_names_the_keys_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = training_checkpoint(dir.path());
    let o = run_in(dir.path(), &[&ckpt, "-o", "all.safetensors"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            r#"no tensor at the top level, only under "model" (2 tensors), "optimizer" (1 tensor)"#
        ),
        "{err}"
    );
    assert!(err.contains(r#"pass --pt-root "model""#), "{err}");
    // Said in the JSON report too, and the run is what it was: every key's tensors, named with it.
    let o = run_in(
        dir.path(),
        &[&ckpt, "-o", "all.safetensors", "--report", "json"],
    );
    let v: serde_json::Value = serde_json::from_str(stderr(&o).trim()).unwrap();
    assert!(v["warnings"].to_string().contains("--pt-root"), "{v}");
    assert_eq!(v["tensors"], 3, "{v}");
    // Taken as suggested: the model's tensors named as a model's, and no hint.
    let o = run_in(
        dir.path(),
        &[&ckpt, "--pt-root", "model", "-o", "model.safetensors"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("--pt-root"), "{}", stderr(&o));
    let o = run_in(dir.path(), &["inspect", "--json", "model.safetensors"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v["files"][0]["tensors"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fc.bias", "fc.weight"]);
    // A state dict (tensors at the top level) gets no hint.
    let o = run_in(
        dir.path(),
        &[&fixture("pytorch/ok/dtypes.pt"), "-o", "d.safetensors"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("--pt-root"), "{}", stderr(&o));
}

#[test]
fn tied_weights_written_twice_point_at_dedupe_tied_with_the_bytes_saved() {
    let dir = tempfile::tempdir().unwrap();
    // embed.weight and lm_head.weight: one storage's same view (3x2 F32, 24 bytes).
    let tied = fixture("pytorch/ok/tied.pt");
    let said = r#"tied weights written twice: "lm_head.weight" (the same as "embed.weight"); pass --dedupe-tied"#;
    let o = run_in(dir.path(), &[&tied, "-o", "t.safetensors"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(said), "{err}");
    assert!(err.contains("24 bytes less"), "{err}");
    // The plan says it as well, before anything is written.
    let o = run_in(dir.path(), &[&tied, "--dry-run", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["warnings"].to_string().contains("--dedupe-tied"), "{v}");
    // With the flag, or with one of the two left out, nothing is written twice: no notice.
    for extra in [&["--dedupe-tied"][..], &["--exclude", "lm_head.*"]] {
        let mut args = vec![tied.as_str(), "-o", "t.safetensors"];
        args.extend_from_slice(extra);
        let o = run_in(dir.path(), &args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("tied"), "{extra:?}: {}", stderr(&o));
    }
    // Views of one storage that are not the same bytes are not ties.
    let o = run_in(
        dir.path(),
        &[
            &tied,
            "--include",
            "other",
            "--include",
            "embed.*",
            "-o",
            "t.safetensors",
        ],
    );
    assert!(!stderr(&o).contains("tied"), "{}", stderr(&o));
}

// ---- 5: --dry-run --json shows what becomes of a quantized GGUF tensor -----------------------

#[test]
fn a_gguf_dry_run_shows_each_quantized_tensor_dequantized_to_its_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = fixture("gguf/types_le.gguf");
    let cast_of = |args: &[&str], name: &str| {
        let o = run_in(dir.path(), args);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let tensors = v["outputs"][0]["tensors"].as_array().unwrap().clone();
        let t = tensors.iter().find(|t| t["name"] == name).unwrap();
        t["cast"].clone()
    };
    let dry = ["--dry-run", "--json", gguf.as_str()];
    assert_eq!(
        cast_of(&dry, "q4_k"),
        serde_json::json!({"from": "Q4_K", "to": "BF16"})
    );
    assert_eq!(
        cast_of(&dry, "q8_0"),
        serde_json::json!({"from": "Q8_0", "to": "BF16"})
    );
    assert_eq!(cast_of(&dry, "f32"), serde_json::Value::Null);
    let to_f32 = [
        "--dry-run",
        "--json",
        "--dequantize-to",
        "F32",
        gguf.as_str(),
    ];
    assert_eq!(
        cast_of(&to_f32, "q4_k"),
        serde_json::json!({"from": "Q4_K", "to": "F32"})
    );
    // A cast after the dequantization: from what is stored to what is written.
    let cast = ["--dry-run", "--json", "--cast", "BF16=F16", gguf.as_str()];
    assert_eq!(
        cast_of(&cast, "q4_k"),
        serde_json::json!({"from": "Q4_K", "to": "F16"})
    );
    // The plan for people says it too.
    let o = run_in(dir.path(), &["--dry-run", gguf.as_str()]);
    let text = stdout(&o);
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("\"q4_k\""))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.ends_with("cast Q4_K -> BF16"), "{row}");
}
