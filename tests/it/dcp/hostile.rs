//! Hostile metadata and items: refused with exit 1, nothing run, nothing
//! left behind.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::{checkpoint_with, convert_in, fixtures};
use crate::support::faults::tree;

#[test]
fn hostile_metadata_is_refused_with_exit_1_and_nothing_left() {
    let cases: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(fixtures().join("hostile/cases.json")).unwrap())
            .unwrap();
    assert!(cases.len() >= 12, "{cases:?}");
    for (name, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let metadata = std::fs::read(fixtures().join(format!("hostile/{name}.metadata"))).unwrap();
        checkpoint_with(tmp.path(), "shard0", &metadata);
        std::fs::write(tmp.path().join("out.safetensors"), b"old bytes").unwrap();
        let before = tree(tmp.path());
        let (code, report, stderr) = convert_in(tmp.path(), &["ckpt", "-o", "out.safetensors"]);
        assert_eq!(code, Some(1), "{name}: {stderr}");
        let error = &report["error"];
        assert_eq!(error["kind"], want["kind"], "{name}: {stderr}");
        let message = error["message"].as_str().unwrap_or_default();
        let words = want["message"].as_str().unwrap();
        assert!(
            message.contains(words),
            "{name}: {message:?} lacks {words:?}"
        );
        assert_eq!(
            std::fs::read(tmp.path().join("out.safetensors")).unwrap(),
            b"old bytes",
            "{name}: output touched"
        );
        // Nothing new: no temporary, no marker of a command run.
        assert_eq!(tree(tmp.path()), before, "{name}");
    }
}

#[test]
fn an_evil_global_is_refused_by_inspect_and_dry_run_and_runs_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let metadata = std::fs::read(fixtures().join("hostile/evil_global.metadata")).unwrap();
    checkpoint_with(tmp.path(), "shard0", &metadata);
    let before = tree(tmp.path());
    for args in [
        &["ckpt", "--dry-run", "-o", "x.safetensors"][..],
        &["inspect", "ckpt"],
        &["validate", "ckpt"],
    ] {
        let (code, _, stderr) = convert_in(tmp.path(), args);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("posix.system"), "{args:?}: {stderr}");
    }
    assert_eq!(tree(tmp.path()), before);
}

/// A storage's bytes changed after torch wrote them: its CRC-32 (which
/// torch's reader does not check) refuses it, naming the tensor.
#[test]
fn a_corrupt_chunk_is_refused_by_its_crc() {
    let tmp = tempfile::tempdir().unwrap();
    let metadata = std::fs::read(fixtures().join("shard1/.metadata")).unwrap();
    let ckpt = checkpoint_with(tmp.path(), "shard1", &metadata);
    // The column-cut "w" is the first item of rank 1's file; its storage
    // member `archive/data/0` holds its 48 bytes.
    let path = ckpt.join("__1_0.distcp");
    let mut bytes = std::fs::read(&path).unwrap();
    let name = find(&bytes, b"archive/data/0").expect("the storage's local header");
    // The local header's 30 bytes end with the name's and the extra field's lengths.
    let extra = u16::from_le_bytes([bytes[name - 2], bytes[name - 1]]) as usize;
    bytes[name + 14 + extra + 4] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let (code, report, stderr) = convert_in(tmp.path(), &["ckpt", "-o", "out.safetensors"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(report["error"]["kind"], "crc_mismatch", "{stderr}");
    assert_eq!(report["error"]["tensor"], "w", "{stderr}");
    assert!(!tmp.path().join("out.safetensors").exists());
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A rank's safetensors file of an HF-writer checkpoint rewritten with
/// `info` as its DCP_SHARDING_INFO (the tensors' bytes as they were).
fn hf_with(dir: &Path, info: &str) -> PathBuf {
    let ckpt = dir.join("hf");
    std::fs::create_dir_all(&ckpt).unwrap();
    for e in std::fs::read_dir(fixtures().join("hf")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, ckpt.join(p.file_name().unwrap())).unwrap();
    }
    let path = ckpt.join("shard-00002-model-00001-of-00001.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let meta = HashMap::from([("DCP_SHARDING_INFO".to_string(), info.to_string())]);
    let out = safetensors::serialize(st.tensors(), Some(meta)).unwrap();
    std::fs::write(&path, out).unwrap();
    ckpt
}

#[test]
fn an_hf_checkpoint_with_bad_offsets_is_refused() {
    let cases = [
        // Rank 2's rows claim rank 1's place.
        (
            r#"{"model.embed.weight": {"saved_offsets": [0, 0]}, "model.layers.0.attn.wq.weight": {"saved_offsets": [0, 3]}, "model.layers.0.norm.weight": {"saved_offsets": [4]}, "model.head.weight": {"saved_offsets": [3, 0]}}"#,
            "overlap",
            "model.embed.weight",
        ),
        // A tensor left out.
        (
            r#"{"model.embed.weight": {"saved_offsets": [5, 0]}, "model.layers.0.attn.wq.weight": {"saved_offsets": [0, 3]}, "model.layers.0.norm.weight": {"saved_offsets": [4]}}"#,
            "DCP_SHARDING_INFO does not place it",
            "model.head.weight",
        ),
        // Offsets of the wrong rank, and no JSON at all.
        (
            r#"{"model.embed.weight": {"saved_offsets": [5]}, "model.layers.0.attn.wq.weight": {"saved_offsets": [0, 3]}, "model.layers.0.norm.weight": {"saved_offsets": [4]}, "model.head.weight": {"saved_offsets": [3, 0]}}"#,
            "2 dimensions, but its chunk at [5] has 1",
            "model.embed.weight",
        ),
        ("not json", "DCP_SHARDING_INFO is not JSON", ""),
    ];
    for (info, words, tensor) in cases {
        let tmp = tempfile::tempdir().unwrap();
        hf_with(tmp.path(), info);
        let before = tree(tmp.path());
        let (code, report, stderr) = convert_in(tmp.path(), &["hf", "-o", "out.safetensors"]);
        assert_eq!(code, Some(1), "{words}: {stderr}");
        assert_eq!(report["error"]["kind"], "dcp", "{stderr}");
        let message = report["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{message:?} lacks {words:?}");
        if !tensor.is_empty() {
            assert_eq!(report["error"]["tensor"], tensor, "{stderr}");
        }
        assert_eq!(tree(tmp.path()), before, "{words}");
    }
}
