//! Arguments shaped like URLs are never local paths: a scheme we do not
//! reach, a missing slash or a prefix is a usage error (exit 2) at `-o` and
//! as an input, and nothing is written (issue 27).

use std::process::Command;

use crate::support::{fixtures, stderr, BIN};

#[test]
fn url_shaped_outputs_and_inputs_are_usage_errors_writing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures().join("example/model.npz");
    let cases = [
        ("s4://bucket/x.safetensors", "unsupported URL scheme"),
        ("S4://bucket/x.safetensors", "unsupported URL scheme"),
        ("s3:/bucket/x.safetensors", "two slashes"),
        ("s3://bucket/prefix/", "prefix, not an object"),
    ];
    for (url, says) in cases {
        let out = Command::new(BIN)
            .current_dir(dir.path())
            .arg(&input)
            .args(["-o", url])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "-o {url}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "-o {url}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
        let as_input = Command::new(BIN)
            .current_dir(dir.path())
            .args([url, "-o", "out.safetensors"])
            .output()
            .unwrap();
        assert_eq!(
            as_input.status.code(),
            Some(2),
            "{url}: {}",
            stderr(&as_input)
        );
        assert!(
            stderr(&as_input).contains(says),
            "{url}: {}",
            stderr(&as_input)
        );
    }
    let left: Vec<_> = walk(dir.path());
    assert!(left.is_empty(), "written: {left:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.push(path.clone());
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}
