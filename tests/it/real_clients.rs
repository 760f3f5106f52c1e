//! Checkpoints written by transformers itself (fixtures/real-clients, made by
//! scripts/gen_real_clients.py with transformers 4.57.6 and torch 2.15.0):
//! every form each client hands us converts to the reference tensors that
//! `safetensors.torch.save_file` wrote from the same state_dict, read back
//! with the `safetensors` crate as the oracle. `--dedupe-tied` keeps the
//! names transformers' own `save_pretrained` keeps. No torch needed.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use safetensors::SafeTensors;
use serde_json::Value;

const ARCHS: [&str; 5] = ["gpt2", "llama", "bert", "t5", "opt"];

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/real-clients")
}

fn convert<I: Into<OsString>>(args: impl IntoIterator<Item = I>) -> Output {
    Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .args(args.into_iter().map(Into::into))
        .output()
        .expect("run convert")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// name -> (dtype, shape, bytes), and the metadata, of one or more files.
type Tensors = BTreeMap<String, (String, Vec<usize>, Vec<u8>)>;

fn read(files: &[PathBuf]) -> (Tensors, BTreeMap<String, String>) {
    let mut tensors = Tensors::new();
    let mut metadata = BTreeMap::new();
    for f in files {
        let bytes = std::fs::read(f).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        for (name, v) in st.tensors() {
            let t = (
                format!("{:?}", v.dtype()),
                v.shape().to_vec(),
                v.data().to_vec(),
            );
            assert!(tensors.insert(name.clone(), t).is_none(), "{name} twice");
        }
        let (_, m) = SafeTensors::read_metadata(&bytes).unwrap();
        metadata.extend(m.metadata().clone().unwrap_or_default());
    }
    (tensors, metadata)
}

/// The output files of a conversion to `out` (one file, or an index's shards).
fn outputs(out: &Path) -> Vec<PathBuf> {
    if out.exists() {
        return vec![out.to_path_buf()];
    }
    let index = out.with_extension("safetensors.index.json");
    let doc: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    let shards: BTreeSet<&str> = doc["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_str().unwrap())
        .collect();
    shards.iter().map(|s| out.with_file_name(s)).collect()
}

/// Converts `input` with `args` and returns what was written.
fn run(input: &Path, args: &[&str], tmp: &Path, tag: &str) -> (Tensors, BTreeMap<String, String>) {
    let out = tmp.join(format!("{tag}.safetensors"));
    let mut all: Vec<OsString> = vec![input.into(), "-o".into(), out.clone().into()];
    all.extend(["--no-sync", "-q"].map(OsString::from));
    all.extend(args.iter().map(OsString::from));
    ok(&convert(all), &format!("{} {args:?}", input.display()));
    read(&outputs(&out))
}

fn reference(arch: &str, tag: &str) -> Tensors {
    read(&[corpus().join(arch).join(format!("ref-{tag}.safetensors"))]).0
}

fn kept(arch: &str) -> (BTreeSet<String>, Vec<Vec<String>>) {
    let doc: Value =
        serde_json::from_slice(&std::fs::read(corpus().join(arch).join("kept.json")).unwrap())
            .unwrap();
    let kept = serde_json::from_value(doc["kept"].clone()).unwrap();
    let groups = serde_json::from_value(doc["tied_groups"].clone()).unwrap();
    (kept, groups)
}

#[test]
fn every_form_converts_to_the_reference_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in ARCHS {
        let d = corpus().join(arch);
        let f32 = reference(arch, "f32");
        let forms: Vec<(PathBuf, Vec<&str>, &str)> = vec![
            (d.join("single/pytorch_model.bin"), vec![], "f32"),
            (d.join("single"), vec![], "f32"),
            (
                d.join("sharded/pytorch_model.bin.index.json"),
                vec![],
                "f32",
            ),
            (d.join("sharded"), vec![], "f32"),
            (d.join("single"), vec!["--max-shard-size", "10KB"], "f32"),
            (d.join("legacy.bin"), vec![], "f32"),
            (d.join("f16"), vec![], "f16"),
            (d.join("bf16"), vec![], "bf16"),
        ];
        for (k, (input, args, tag)) in forms.iter().enumerate() {
            let what = format!("{} {args:?}", input.display());
            let (got, md) = run(input, args, tmp.path(), &format!("{arch}-{k}"));
            let want = if *tag == "f32" {
                f32.clone()
            } else {
                reference(arch, tag)
            };
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>(),
                "{what}"
            );
            assert!(got == want, "{what}: tensors differ from the reference");
            assert_eq!(md.get("format").map(String::as_str), Some("pt"), "{what}");
        }
    }
}

#[test]
fn training_checkpoints_convert_under_pt_root() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in ["gpt2", "opt"] {
        let input = corpus().join(arch).join("training.pt");
        let want = read(&[corpus().join(arch).join("ref-training.safetensors")]).0;
        let (got, _) = run(&input, &["--pt-root", "model"], tmp.path(), arch);
        assert!(got == want, "{arch}: training.pt --pt-root model");
        // A key holding a number says so, instead of "no tensors".
        let o = tmp.path().join("epoch.safetensors");
        let out = convert([
            input.as_os_str(),
            "--pt-root".as_ref(),
            "epoch".as_ref(),
            "-o".as_ref(),
            o.as_os_str(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("--pt-root \"epoch\" holds an int (3), not tensors"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// `--dedupe-tied` keeps what transformers' `save_pretrained` keeps (the
/// first name of each group in module order), whatever sorts first, in
/// every form; each dropped name is recorded, pointing at the kept one.
#[test]
fn dedupe_tied_keeps_the_names_transformers_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in ARCHS {
        let d = corpus().join(arch);
        let f32 = reference(arch, "f32");
        let (kept, groups) = kept(arch);
        let mut inputs = vec![
            (d.join("single"), vec!["--dedupe-tied"], f32.clone()),
            (d.join("sharded"), vec!["--dedupe-tied"], f32.clone()),
            (d.join("legacy.bin"), vec!["--dedupe-tied"], f32.clone()),
        ];
        if d.join("training.pt").exists() {
            let training = read(&[d.join("ref-training.safetensors")]).0;
            inputs.push((
                d.join("training.pt"),
                vec!["--dedupe-tied", "--pt-root", "model"],
                training,
            ));
        }
        for (k, (input, args, want)) in inputs.into_iter().enumerate() {
            let what = format!("{} {args:?}", input.display());
            let (got, md) = run(&input, &args, tmp.path(), &format!("{arch}-dd{k}"));
            let names: BTreeSet<String> = got.keys().cloned().collect();
            assert_eq!(names, kept, "{what}");
            for (name, t) in &got {
                assert!(want[name] == *t, "{what}: {name}");
            }
            for g in &groups {
                for dropped in &g[1..] {
                    assert_eq!(md.get(dropped), Some(&g[0]), "{what}: record of {dropped}");
                }
            }
        }
    }
}

/// Ties are grouped after selection: excluding the kept name writes the
/// other, including one name selects it, records name output tensors.
#[test]
fn dedupe_tied_after_filters_and_renames() {
    let tmp = tempfile::tempdir().unwrap();
    let input = corpus().join("gpt2/single/pytorch_model.bin");
    let args = ["--dedupe-tied", "--exclude", "transformer.wte.weight"];
    let (got, md) = run(&input, &args, tmp.path(), "excl");
    assert!(
        got.contains_key("lm_head.weight"),
        "excluding one of a pair writes the other"
    );
    assert!(!md.contains_key("lm_head.weight"), "{md:?}");
    let args = ["--dedupe-tied", "--include", "lm_head.weight"];
    let (got, md) = run(&input, &args, tmp.path(), "incl");
    assert_eq!(got.keys().collect::<Vec<_>>(), ["lm_head.weight"]);
    assert_eq!(md.len(), 1, "{md:?}");
    let args = [
        "--dedupe-tied",
        "--strip-prefix",
        "transformer.",
        "--prefix",
        "m.",
    ];
    let (got, md) = run(&input, &args, tmp.path(), "renamed");
    assert!(got.contains_key("m.wte.weight") && !got.contains_key("m.lm_head.weight"));
    assert_eq!(
        md.get("m.lm_head.weight").map(String::as_str),
        Some("m.wte.weight")
    );
    assert!(!md.contains_key("lm_head.weight"), "{md:?}");
}

/// `inspect` and `validate` read a PyTorch index and the folder holding it.
#[test]
fn inspect_and_validate_read_a_pytorch_index_and_its_folder() {
    for arch in ARCHS {
        let sharded = corpus().join(arch).join("sharded");
        let n = reference(arch, "f32").len();
        for input in [
            sharded.join("pytorch_model.bin.index.json"),
            sharded.clone(),
        ] {
            let out = ok(
                &convert([OsString::from("validate"), input.clone().into()]),
                "validate",
            );
            assert!(out.contains(&format!(": valid ({n} tensors, ")), "{out}");
            let text = ok(
                &convert([OsString::from("inspect"), input.clone().into()]),
                "inspect",
            );
            assert!(text.contains(&format!("{n} tensors")), "{text}");
            let json = ok(
                &convert([OsString::from("inspect"), input.into(), "--json".into()]),
                "inspect --json",
            );
            assert!(serde_json::from_str::<Value>(&json).is_ok(), "{json}");
        }
    }
}

#[test]
fn an_output_folder_that_does_not_exist_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let input = corpus().join("gpt2/single/pytorch_model.bin");
    let mut missing = tmp.path().join("nodir").into_os_string();
    missing.push("/");
    let out = convert([input.into_os_string(), "-o".into(), missing, "-q".into()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(tmp.path().join("nodir/model.safetensors").is_file());
}
