//! `--shard K` and `--index-only` on local files, through the binary: N
//! independent runs write exactly the files one run writes, and the index
//! is refused while a shard is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::{fixtures, listing, stderr, BIN};

fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

fn convert(out: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg(fixture("reference/all_dtypes.safetensors"))
        .args(["--max-shard-size", "100", "--no-sync", "-o"])
        .arg(out)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The files of one full run, in `dir`.
fn full_run(dir: &Path) -> Vec<String> {
    let o = convert(&dir.join("model.safetensors"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    listing(dir)
}

/// A fan-out against one run: `workers` write the plan into a fresh folder
/// (given the output path and the shards one full run writes, in order),
/// then `--index-only` writes the index; the folder must then hold exactly
/// the full run's files, byte for byte. Returns the fan-out's folder.
fn fan_out_equals_one_run(workers: impl FnOnce(&Path, &[String])) -> tempfile::TempDir {
    let whole = tempfile::tempdir().unwrap();
    let files = full_run(whole.path());
    let shards = &files[..files.len() - 1];
    assert!(
        shards.len() >= 3,
        "the fixture must make several shards: {files:?}"
    );
    let parts = tempfile::tempdir().unwrap();
    let out = parts.path().join("model.safetensors");
    workers(&out, shards);
    let o = convert(&out, &["--index-only"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(listing(parts.path()), files);
    for f in &files {
        assert!(
            std::fs::read(whole.path().join(f)).unwrap()
                == std::fs::read(parts.path().join(f)).unwrap(),
            "{f} differs"
        );
    }
    parts
}

/// One worker's run writing to `out` with `args`: it succeeds and writes
/// no index. The files in `out`'s folder after it.
fn worker(out: &Path, args: &[&str]) -> Vec<String> {
    let o = convert(out, args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    let have = listing(out.parent().unwrap());
    assert!(
        have.iter().all(|f| !f.ends_with(".index.json")),
        "no index from a worker's run ({args:?}): {have:?}"
    );
    have
}

#[test]
fn shards_written_one_by_one_plus_the_index_equal_one_run() {
    fan_out_equals_one_run(|out, shards| {
        let n = shards.len();
        // Out of order, and one twice: each run is independent and repeatable.
        let mut order: Vec<usize> = (1..=n).rev().collect();
        order.push(1);
        for (i, k) in order.into_iter().enumerate() {
            let have = worker(out, &["--shard", &k.to_string()]);
            assert_eq!(have.len(), (i + 1).min(n), "{have:?}");
        }
    });
}

#[test]
fn two_strided_workers_plus_the_index_equal_one_run() {
    let parts = fan_out_equals_one_run(|out, shards| {
        // Worker 2 of 2 first: shards 2, 4, ...
        let have = worker(out, &["--shard", "2", "--shard-stride", "2"]);
        let even: Vec<&String> = shards.iter().skip(1).step_by(2).collect();
        assert_eq!(
            have.iter().collect::<Vec<_>>(),
            even,
            "worker 2 of 2 writes shards 2, 4, ..."
        );
        let have = worker(out, &["--shard", "1", "--shard-stride", "2"]);
        assert_eq!(have, shards, "worker 1 of 2 writes the others");
    });
    // A stride without --shard is a usage error.
    let o = convert(
        &parts.path().join("model.safetensors"),
        &["--shard-stride", "2"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn the_index_is_refused_naming_a_missing_or_short_shard() {
    let dir = tempfile::tempdir().unwrap();
    let files = full_run(dir.path());
    let index = dir.path().join(files.last().unwrap());
    std::fs::remove_file(&index).unwrap();
    let out = dir.path().join("model.safetensors");

    let second = dir.path().join(&files[1]);
    let bytes = std::fs::read(&second).unwrap();
    std::fs::remove_file(&second).unwrap();
    let o = convert(&out, &["--index-only", "--report", "json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_str(stderr(&o).trim()).unwrap();
    assert_eq!(report["error"]["kind"], "shard_not_written");
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&files[1]),
        "{report}"
    );
    assert!(!index.exists());

    // A worker that died mid-write cannot leave a short shard (writes are
    // atomic), but a copy by other means can: the length is checked.
    std::fs::write(&second, &bytes[..bytes.len() - 1]).unwrap();
    let o = convert(&out, &["--index-only"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = stderr(&o);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("safetensors-convert: ") && text.contains(&files[1]),
        "{text}"
    );
    assert!(!index.exists());

    std::fs::write(&second, &bytes).unwrap();
    let o = convert(&out, &["--index-only"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(index.exists());
}

#[test]
fn shard_numbers_outside_the_plan_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let files = full_run(dir.path());
    let n = files.len() - 1;
    let fresh = tempfile::tempdir().unwrap();
    let out = fresh.path().join("model.safetensors");
    for k in ["0", &(n + 1).to_string()] {
        let o = convert(&out, &["--shard", k]);
        assert_eq!(o.status.code(), Some(2), "--shard {k}: {}", stderr(&o));
    }
    let o = convert(&out, &["--shard", "1", "--index-only"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(listing(fresh.path()).is_empty());

    // One file: --shard 1 is that file; it has no index to write.
    let one = fresh.path().join("one.safetensors");
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .arg(fixture("example/model-input.safetensors"))
            .arg("-o")
            .arg(&one)
            .args(extra)
            .output()
            .unwrap()
    };
    // Its --index-only checks the file (see the test below): not there yet.
    let o = run(&["--index-only"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let o = run(&["--shard", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        std::fs::read(&one).unwrap()
            == std::fs::read(fixture("example/model-input.safetensors")).unwrap()
    );
}

/// Runs `convert` on `input` into `out` with `extra`.
fn convert_from(input: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(BIN)
        .arg(input)
        .args(["--max-shard-size", "100", "--no-sync", "-o"])
        .arg(out)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The plan id `--dry-run --json` reports.
fn plan_id(input: &Path, out: &Path) -> String {
    let o = convert_from(input, out, &["--dry-run", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["plan_id"]
        .as_str()
        .expect("plan_id in --dry-run --json")
        .to_string()
}

#[test]
fn a_fan_out_cannot_commit_shards_of_two_input_versions() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    let original = std::fs::read(fixture("reference/all_dtypes.safetensors")).unwrap();
    std::fs::write(&input, &original).unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("model.safetensors");

    let id = plan_id(&input, &out);
    assert_eq!(
        id,
        plan_id(&input, &out),
        "the same inputs plan the same id"
    );
    let o = convert_from(&input, &out, &["--shard", "1", "--expect-plan", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // The input is replaced by another version of the same length (a new
    // modification time), between two workers' runs.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let replaced = dir.path().join("replaced");
    std::fs::write(&replaced, &original).unwrap();
    std::fs::rename(&replaced, &input).unwrap();
    assert_ne!(
        plan_id(&input, &out),
        id,
        "a replaced input changes the plan id"
    );

    let before = listing(&out_dir);
    for extra in [&["--shard", "2"][..], &["--index-only"][..]] {
        let mut args = extra.to_vec();
        args.extend(["--expect-plan", &id]);
        let o = convert_from(&input, &out, &args);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {}", stderr(&o));
        let msg = stderr(&o);
        assert!(
            msg.contains("the plan changed") && msg.contains(&id),
            "{msg}"
        );
        assert_eq!(listing(&out_dir), before, "{extra:?} wrote nothing");
    }
    assert!(
        before.iter().all(|f| !f.ends_with(".index.json")),
        "{before:?}"
    );
}

#[test]
fn the_index_refuses_shards_recording_another_plan() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    let mut bytes = std::fs::read(fixture("reference/all_dtypes.safetensors")).unwrap();
    std::fs::write(&input, &bytes).unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("model.safetensors");
    let run = |extra: &[&str]| {
        let o = convert_from(&input, &out, extra);
        assert_eq!(o.status.code(), Some(0), "{extra:?}: {}", stderr(&o));
    };

    // Shard 1 under plan A.
    let a = plan_id(&input, &out);
    run(&["--shard", "1", "--expect-plan", &a]);
    let first = listing(&out_dir);
    assert_eq!(first.len(), 1, "{first:?}");
    let recorded = xattr(&out_dir.join(&first[0]));
    assert_eq!(
        recorded.as_deref(),
        Some(a.as_str()),
        "the shard records plan A"
    );

    // The input replaced (its last byte changed: same length, same layout),
    // then shards 2..N under plan B: each worker's own check passes.
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&input, &bytes).unwrap();
    let b = plan_id(&input, &out);
    assert_ne!(a, b);
    let n = {
        let o = convert_from(&input, &out, &["--dry-run", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let outputs = v["outputs"].as_array().unwrap();
        let shards = outputs
            .iter()
            .filter(|f| !f.to_string().contains(".index.json"));
        shards.count()
    };
    assert!(n >= 3, "several shards: {n}");
    for k in 2..=n {
        run(&["--shard", &k.to_string(), "--expect-plan", &b]);
    }

    // The commit under B is refused, naming shard 1; nothing is written.
    let before = listing(&out_dir);
    let o = convert_from(&input, &out, &["--index-only", "--expect-plan", &b]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let msg = stderr(&o);
    assert!(
        msg.contains(&first[0]) && msg.contains(&a) && msg.contains("the plan changed"),
        "{msg}"
    );
    assert_eq!(listing(&out_dir), before, "no index");

    // Shard 1 rewritten under B: the set commits, byte-identical to one run.
    run(&["--shard", "1", "--expect-plan", &b]);
    run(&["--index-only", "--expect-plan", &b]);
    let whole = tempfile::tempdir().unwrap();
    let one = whole.path().join("model.safetensors");
    let o = convert_from(&input, &one, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let files = listing(&out_dir);
    assert_eq!(files, listing(whole.path()));
    for f in &files {
        assert!(
            std::fs::read(out_dir.join(f)).unwrap() == std::fs::read(whole.path().join(f)).unwrap(),
            "{f} differs"
        );
    }

    // A shard with no record beside shards with one: refused, by name.
    let second = out_dir.join(&files[1]);
    let copy = std::fs::read(&second).unwrap();
    std::fs::remove_file(&second).unwrap();
    std::fs::write(&second, copy).unwrap();
    let o = convert_from(&input, &out, &["--index-only", "--expect-plan", &b]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&files[1]) && stderr(&o).contains("no plan id recorded"),
        "{}",
        stderr(&o)
    );
}

/// The plan id a file records (`user.safetensors_stream.plan_id`).
fn xattr(path: &Path) -> Option<String> {
    let mut buf = [0u8; 256];
    let n = rustix::fs::getxattr(path, "user.safetensors_stream.plan_id", &mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn index_only_on_a_one_file_plan_checks_the_file_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    let one_file = |extra: &[&str]| {
        Command::new(BIN)
            .arg(fixture("reference/all_dtypes.safetensors"))
            .args(["--no-sync", "-o"])
            .arg(&out)
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // Before the file is there, the commit step says so.
    let o = one_file(&["--index-only"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    let o = one_file(&["--shard", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let written = std::fs::read(&out).unwrap();
    let o = one_file(&["--index-only"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(listing(dir.path()), ["model.safetensors"]);
    assert_eq!(std::fs::read(&out).unwrap(), written);
}
