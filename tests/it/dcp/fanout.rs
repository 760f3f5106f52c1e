//! A fan-out over a distributed checkpoint: `--shard K` reads only the
//! chunks of its output shard's tensors (shown by a copy whose every other
//! byte is garbage), and the plan id covers `.metadata` and every
//! `.distcp` file, read by the shard or not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{fixtures, read};
use crate::support::BIN;

/// Runs convert; its exit code, standard output and standard error.
fn run(args: &[&str]) -> (Option<i32>, Vec<u8>, String) {
    let o = Command::new(BIN).args(args).output().expect("run convert");
    (
        o.status.code(),
        o.stdout,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn json_of(args: &[&str]) -> Value {
    let (code, stdout, stderr) = run(args);
    assert_eq!(code, Some(0), "{args:?}: {stderr}");
    serde_json::from_slice(&stdout).unwrap()
}

/// A copy of fixture `case` in `dir`.
fn copy_of(case: &str, dir: &Path) -> PathBuf {
    let ckpt = dir.join(case);
    std::fs::create_dir_all(&ckpt).unwrap();
    for e in std::fs::read_dir(fixtures().join(case)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, ckpt.join(p.file_name().unwrap())).unwrap();
    }
    ckpt
}

/// A piece's record: its file, offset and length.
type Place = (String, u64, u64);

/// Each tensor's pieces as `inspect --json` lists them.
fn pieces(ckpt: &Path) -> Vec<(String, Vec<Place>)> {
    let v = json_of(&["inspect", "--json", ckpt.to_str().unwrap()]);
    let tensors = v["tensors"].as_array().unwrap();
    tensors
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_string();
            let places = t["pieces"].as_array().map_or(Vec::new(), |ps| {
                ps.iter()
                    .map(|p| {
                        let file = p["file"].as_str().unwrap().to_string();
                        (
                            file,
                            p["offset"].as_u64().unwrap(),
                            p["length"].as_u64().unwrap(),
                        )
                    })
                    .collect()
            });
            (name, places)
        })
        .collect()
}

const SHARD_SIZE: &str = "200";

/// The names of each output shard's tensors, as `--dry-run --json` plans them.
fn planned(ckpt: &Path, out: &Path) -> Vec<BTreeSet<String>> {
    let args = [ckpt.to_str().unwrap(), "--max-shard-size", SHARD_SIZE];
    let out = out.to_str().unwrap();
    let v = json_of(&[&args[..], &["--dry-run", "--json", "-o", out]].concat());
    let outputs = v["outputs"].as_array().unwrap();
    outputs
        .iter()
        .map(|o| {
            let tensors = o["tensors"].as_array().unwrap();
            tensors
                .iter()
                .map(|t| t["source"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

fn plan_id(ckpt: &Path, out: &Path) -> String {
    let args = [ckpt.to_str().unwrap(), "--max-shard-size", SHARD_SIZE];
    let out = out.to_str().unwrap();
    let v = json_of(&[&args[..], &["--dry-run", "--json", "-o", out]].concat());
    v["plan_id"].as_str().unwrap().to_string()
}

/// Converts shard `k` (1-based) of `ckpt` into `out_dir`; the tensors of
/// the shard file it wrote, or its standard error.
fn shard(ckpt: &Path, out_dir: &Path, k: usize, n: usize) -> Result<super::Tensors, String> {
    std::fs::create_dir_all(out_dir).unwrap();
    let out = out_dir.join("model.safetensors");
    let (code, _, stderr) = run(&[
        ckpt.to_str().unwrap(),
        "--max-shard-size",
        SHARD_SIZE,
        "--shard",
        &k.to_string(),
        "-o",
        out.to_str().unwrap(),
    ]);
    if code != Some(0) {
        return Err(stderr);
    }
    let name = format!("model-{k:05}-of-{n:05}.safetensors");
    Ok(read(&std::fs::read(out_dir.join(name)).unwrap()).0)
}

/// Overwrites every byte of `ckpt`'s `.distcp` files with 0xEE except
/// those of `keep`'s items (the file lengths stay).
fn garble_all_but(ckpt: &Path, keep: &[Place]) {
    for e in std::fs::read_dir(ckpt).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if !name.ends_with(".distcp") {
            continue;
        }
        let clean = std::fs::read(&path).unwrap();
        let mut bytes = vec![0xEE; clean.len()];
        for (_, offset, length) in keep.iter().filter(|(f, _, _)| *f == name) {
            let (a, b) = (*offset as usize, (*offset + *length) as usize);
            bytes[a..b].copy_from_slice(&clean[a..b]);
        }
        std::fs::write(&path, bytes).unwrap();
    }
}

#[test]
fn each_shard_reads_only_its_own_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    for case in ["mesh2d", "fsdp2"] {
        let clean = fixtures().join(case);
        let shards = planned(&clean, &tmp.path().join("plan/model.safetensors"));
        let n = shards.len();
        assert!(n >= 3, "{case}: {n} shards");
        let places = pieces(&clean);
        let mut refused_elsewhere = 0;
        for (k, names) in shards.iter().enumerate() {
            let k = k + 1;
            let want = shard(&clean, &tmp.path().join(format!("{case}/clean{k}")), k, n).unwrap();
            assert_eq!(&want.keys().cloned().collect::<BTreeSet<_>>(), names);
            // A copy holding only this shard's items; all else garbage.
            let garbled = copy_of(case, &tmp.path().join(format!("{case}/garbled{k}")));
            let keep: Vec<Place> = places
                .iter()
                .filter(|(name, _)| names.contains(name))
                .flat_map(|(_, p)| p.clone())
                .collect();
            assert!(!keep.is_empty(), "{case}: shard {k} has chunks");
            garble_all_but(&garbled, &keep);
            let out = tmp.path().join(format!("{case}/out{k}"));
            let got = shard(&garbled, &out, k, n).unwrap_or_else(|e| panic!("{case} {k}: {e}"));
            assert_eq!(got, want, "{case}: shard {k}");
            // Any other shard of the garbled copy does read garbage.
            let other = k % n + 1;
            let out = tmp.path().join(format!("{case}/other{k}"));
            if shard(&garbled, &out, other, n).is_err() {
                refused_elsewhere += 1;
            }
        }
        assert_eq!(refused_elsewhere, n, "{case}: the garbage is read");
    }
}

/// Sets `path`'s modification time to `secs` after the epoch (its bytes
/// and length unchanged).
fn set_mtime(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    f.set_modified(t).unwrap();
}

#[test]
fn the_plan_id_covers_the_metadata_and_every_distcp_file() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = copy_of("mesh2d", tmp.path());
    let out = tmp.path().join("out/model.safetensors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&ckpt)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    for f in &files {
        set_mtime(f, 1_700_000_000);
    }
    let mut seen = BTreeSet::from([plan_id(&ckpt, &out)]);
    assert_eq!(plan_id(&ckpt, &out), *seen.first().unwrap(), "stable");
    for (i, f) in files.iter().enumerate() {
        set_mtime(f, 1_700_000_001 + i as u64);
        let id = plan_id(&ckpt, &out);
        assert!(
            seen.insert(id),
            "{}: the plan id did not change",
            f.display()
        );
    }
}
