//! The `convert` binary's default command: files, standard output, shards,
//! exit codes, one-line errors, atomic replacement and new files' modes.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use safetensors_stream::header::Rules;
use safetensors_stream::index::Checkpoint;
use safetensors_stream::Dtype;
use support::pipeline::*;
use support::{code, stderr};

fn convert(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(BIN);
    for a in args {
        c.arg(a);
    }
    c.stdin(Stdio::null()).output().unwrap()
}

/// Runs the binary under `sh` with a shell `prelude` (umask, ulimit, trap).
fn convert_sh(prelude: &str, args: &[&Path]) -> Output {
    let mut script = format!("{prelude}; exec \"$0\"");
    for i in 0..args.len() {
        script.push_str(&format!(" \"${}\"", i + 1));
    }
    let mut c = Command::new("sh");
    c.arg("-c").arg(script).arg(BIN);
    for a in args {
        c.arg(a);
    }
    c.stdin(Stdio::null()).output().unwrap()
}

/// Asserts the run failed with `expected` and said so in exactly one line
/// beginning `convert: `; returns that line.
fn one_line_failure(o: &Output, expected: i32) -> String {
    let err = stderr(o);
    assert_eq!(code(o), expected, "stderr: {err}");
    assert!(
        o.stdout.is_empty(),
        "stdout: {:?}",
        String::from_utf8_lossy(&o.stdout)
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {err:?}");
    assert!(lines[0].starts_with("safetensors-convert: "), "{err:?}");
    lines[0].to_string()
}

fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// A bigger valid input: 64 KiB of data.
fn big_input(dir: &Path) -> PathBuf {
    let ts = vec![
        T::new("w", Dtype::F32, &[128, 96]),
        T::new("b", Dtype::U8, &[16384]),
    ];
    write(dir, "big.safetensors", &ref_serialize(&ts, None))
}

#[test]
fn a_fixture_converts_to_identical_bytes() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "reference/spec_four.safetensors",
        "reference/all_dtypes.safetensors",
        "example/model-input.safetensors",
    ] {
        let input = fixture(name);
        let out = dir.path().join("out.safetensors");
        let o = convert(&[&input, &"-o", &out]);
        assert_eq!(code(&o), 0, "{name}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "the summary goes to stderr");
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&input).unwrap(),
            "{name}"
        );
        assert!(stderr(&o).contains("wrote "), "{}", stderr(&o));
    }
    assert_eq!(listing(dir.path()), ["out.safetensors"]);
    // --quiet: nothing at all on stderr.
    let out = dir.path().join("q.safetensors");
    let o = convert(&[
        &fixture("reference/mixed.safetensors"),
        &"-q",
        &"-o",
        &out,
        &"--no-sync",
    ]);
    assert_eq!(code(&o), 0);
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    assert!(
        std::fs::read(&out).unwrap()
            == std::fs::read(fixture("reference/mixed.safetensors")).unwrap()
    );
}

#[test]
fn standard_output_gets_the_file_and_nothing_else() {
    for name in [
        "reference/metadata_unicode.safetensors",
        "example/model-input.safetensors",
        "reference/spec_empty.safetensors",
    ] {
        let input = fixture(name);
        // spec_empty.safetensors holds no tensor.
        let o = convert(&[&input, &"-o", &"-", &"--allow-empty"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert!(
            o.stdout == std::fs::read(&input).unwrap(),
            "{name}: stdout differs"
        );
    }
    // Two inputs merged to stdout.
    let a = fixture("reference/spec_four.safetensors");
    let b = fixture("reference/all_dtypes.safetensors");
    let o = convert(&[&a, &b, &"-o", &"-"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut union = ref_read(&std::fs::read(&a).unwrap(), "a");
    union.extend(ref_read(&std::fs::read(&b).unwrap(), "b"));
    assert_eq!(ref_read(&o.stdout, "stdout"), union);
}

#[test]
fn sharded_output_appears_with_a_valid_index_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("reference/all_dtypes.safetensors");
    let out = dir.path().join("model.safetensors");
    let o = convert(&[
        &input,
        &"--max-shard-size",
        &"100",
        &"-o",
        &out,
        &"--no-sync",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let files = listing(dir.path());
    let n = files.len() - 1;
    assert!(n >= 2, "{files:?}");
    for (k, f) in files[..n].iter().enumerate() {
        assert_eq!(f, &format!("model-{:05}-of-{n:05}.safetensors", k + 1));
        ref_read(&std::fs::read(dir.path().join(f)).unwrap(), f);
    }
    assert_eq!(files[n], "model.safetensors.index.json");
    let index = dir.path().join(&files[n]);
    let cp = Checkpoint::open(&index, Rules::STRICT).unwrap();
    let original = Checkpoint::open(&input, Rules::STRICT).unwrap();
    assert_eq!(
        (cp.tensor_count(), cp.data_len()),
        (original.tensor_count(), original.data_len())
    );
    let wrote = stderr(&o).matches("wrote ").count();
    assert_eq!(wrote, n + 1, "{}", stderr(&o));

    // Units: 0.1KB is 100 bytes, the same split.
    let dir2 = tempfile::tempdir().unwrap();
    let o = convert(&[
        &input,
        &"--max-shard-size",
        &"0.1KB",
        &"-o",
        &dir2.path().join("model.safetensors"),
        &"--no-sync",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(listing(dir2.path()), files);
    for f in &files {
        assert_eq!(
            std::fs::read(dir.path().join(f)).unwrap(),
            std::fs::read(dir2.path().join(f)).unwrap(),
            "{f}"
        );
    }

    // Back to one file through the index: the original bytes.
    let back = dir.path().join("back.safetensors");
    let o = convert(&[&index, &"-o", &back]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&input).unwrap());
}

#[test]
fn planner_flags_reach_the_library() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("example/model-input.safetensors"); // metadata {"source": "example"}
    let out = dir.path().join("out.safetensors");
    let o = convert(&[
        &input,
        &"--include",
        &"layer.*",
        &"--exclude",
        &"*.1.*",
        &"--rename",
        &"layer.0.bias=bias",
        &"--prefix",
        &"m.",
        &"--metadata",
        &"source=cli",
        &"-o",
        &out,
        &"--no-sync",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let bytes = std::fs::read(&out).unwrap();
    let got = ref_read(&bytes, "out");
    let src = ref_read(&std::fs::read(&input).unwrap(), "in");
    let expected: RefTensors = [
        ("m.layer.0.weight", "layer.0.weight"),
        ("m.bias", "layer.0.bias"),
    ]
    .iter()
    .map(|(to, from)| (to.to_string(), src[*from].clone()))
    .collect();
    assert_eq!(got, expected);
    assert_eq!(ref_metadata(&bytes).unwrap()["source"], "cli");

    // --order input keeps the input's order (a valid file all the same).
    let o = convert(&[&input, &"--order", &"input", &"-o", &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(ref_read(&bytes, "ordered"), src);
    Checkpoint::open(&out, Rules::STRICT).unwrap();
}

// ---- failures -------------------------------------------------------------------

#[test]
fn a_bad_input_exits_1_with_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = write(
        dir.path(),
        "garbage.safetensors",
        b"this is not a tensor file at all",
    );
    let mut cut = std::fs::read(fixture("reference/mixed.safetensors")).unwrap();
    cut.truncate(cut.len() - 3);
    let truncated = write(dir.path(), "truncated.safetensors", &cut);
    let out = dir.path().join("out.safetensors");
    for input in [&garbage, &truncated] {
        let o = convert(&[input, &"-o", &out]);
        let line = one_line_failure(&o, 1);
        assert!(
            line.starts_with(&format!("safetensors-convert: {}: ", input.display())),
            "{line}"
        );
        assert!(!out.exists());
    }
    // A bad input after a good one: still 1, still named.
    let o = convert(&[
        &fixture("reference/mixed.safetensors"),
        &truncated,
        &"-o",
        &out,
    ]);
    let line = one_line_failure(&o, 1);
    assert!(
        line.starts_with(&format!("safetensors-convert: {}: ", truncated.display())),
        "{line}"
    );
    assert_eq!(
        listing(dir.path()),
        ["garbage.safetensors", "truncated.safetensors"]
    );
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("reference/mixed.safetensors");
    let out = dir.path().join("out.safetensors");
    let clap_errors: [Vec<&dyn AsRef<std::ffi::OsStr>>; 6] = [
        vec![&input],                                                 // no -o
        vec![&"-o", &out],                                            // no input
        vec![&input, &"-o", &out, &"--frobnicate"],                   // unknown flag
        vec![&input, &"-o", &out, &"--max-shard-size", &"5 parsecs"], // bad size
        vec![&input, &"-o", &out, &"--rename", &"no-equals-sign"],    // bad pair
        vec![&input, &"-o", &out, &"--order", &"sideways"],           // bad enum
    ];
    for args in &clap_errors {
        let o = convert(args);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
    // Our own usage errors: one line each.
    let ours: [Vec<&dyn AsRef<std::ffi::OsStr>>; 4] = [
        vec![&input, &input, &"-o", &out], // a name twice
        vec![&input, &"-o", &"-", &"--max-shard-size", &"10"], // shards to stdout
        vec![&input, &"-o", &out, &"--rename", &"nope=x"], // renames nothing
        vec![&input, &"-o", &out, &"--include", &"["], // bad glob
    ];
    for args in &ours {
        let o = convert(args);
        one_line_failure(&o, 2);
    }
    assert!(listing(dir.path()).is_empty());
}

#[test]
fn a_duplicate_name_error_names_both_inputs() {
    let a = fixture("reference/spec_four.safetensors");
    let b = fixture("reference/metadata_one.safetensors"); // also holds "b" and "w"
    let dir = tempfile::tempdir().unwrap();
    let o = convert(&[&a, &b, &"-o", &dir.path().join("o.safetensors")]);
    let line = one_line_failure(&o, 2);
    assert!(
        line.contains(&a.display().to_string()) && line.contains(&b.display().to_string()),
        "{line}"
    );
}

/// True if this process can create files in a folder with mode 0555 (root can).
fn permission_bits_stop_writes(dir: &Path) -> bool {
    let probe = dir.join("probe");
    match std::fs::File::create(&probe) {
        Ok(_) => {
            std::fs::remove_file(&probe).unwrap();
            false
        }
        Err(_) => true,
    }
}

#[test]
fn an_unwritable_output_folder_exits_3_with_one_line() {
    let input = fixture("reference/mixed.safetensors");
    let dir = tempfile::tempdir().unwrap();

    // A parent that is a regular file fails for everyone, root included.
    let file = write(dir.path(), "plain-file", b"x");
    let out = file.join("out.safetensors");
    let o = convert(&[&input, &"-o", &out]);
    let line = one_line_failure(&o, 3);
    assert!(line.contains(&out.display().to_string()), "{line}");
    // A parent that does not exist is made (issue 16.4; tests/it/output_safety.rs).
    let out = dir.path().join("missing/dir/out.safetensors");
    assert_eq!(code(&convert(&[&input, &"-q", &"-o", &out])), 0);
    assert!(out.is_file());

    // Mode 0555, where permission bits apply.
    let ro = dir.path().join("read-only");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if permission_bits_stop_writes(&ro) {
        let o = convert(&[&input, &"-o", &ro.join("out.safetensors")]);
        one_line_failure(&o, 3);
        assert!(listing(&ro).is_empty());
    } else {
        println!("skipped the mode 0555 case: this process writes through permission bits (root); the parent-is-a-file case stood in");
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_write_that_fails_midway_exits_3_and_leaves_the_old_file() {
    // RLIMIT_FSIZE makes writes past a few KiB fail with EFBIG; SIGXFSZ is
    // ignored (inherited through exec) so the process sees the error.
    let dir = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = write(&out_dir, "model.safetensors", b"the old bytes");
    let prelude = "trap '' XFSZ; ulimit -f 16";
    let o = convert_sh(prelude, &[&input, Path::new("-o"), &out]);
    let line = one_line_failure(&o, 3);
    assert!(line.contains(&out.display().to_string()), "{line}");
    assert_eq!(std::fs::read(&out).unwrap(), b"the old bytes");
    assert_eq!(
        listing(&out_dir),
        ["model.safetensors"],
        "no temp file left"
    );

    // The same run without the limit succeeds: the failure was the limit's.
    let o = convert_sh("trap '' XFSZ", &[&input, Path::new("-o"), &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&input).unwrap());

    // Sharded: a failure in any shard leaves no shard and no index.
    let shard_dir = dir.path().join("shards");
    std::fs::create_dir(&shard_dir).unwrap();
    let o = convert_sh(
        prelude,
        &[
            &input,
            Path::new("--max-shard-size"),
            Path::new("20000"),
            Path::new("-o"),
            &shard_dir.join("m.safetensors"),
        ],
    );
    one_line_failure(&o, 3);
    assert!(listing(&shard_dir).is_empty(), "{:?}", listing(&shard_dir));
}

#[test]
fn an_existing_output_keeps_its_bytes_when_the_run_fails() {
    let dir = tempfile::tempdir().unwrap();
    let out = write(dir.path(), "out.safetensors", b"old");
    let garbage = write(dir.path(), "bad.safetensors", b"not safetensors");
    let good = fixture("reference/mixed.safetensors");
    // Bad input (1), duplicate name (2), unused rename (2).
    let runs: [(Vec<&dyn AsRef<std::ffi::OsStr>>, i32); 3] = [
        (vec![&good, &garbage, &"-o", &out], 1),
        (vec![&good, &good, &"-o", &out], 2),
        (vec![&good, &"--rename", &"nope=x", &"-o", &out], 2),
    ];
    for (args, expected) in &runs {
        let o = convert(args);
        one_line_failure(&o, *expected);
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
    }
    assert_eq!(listing(dir.path()), ["bad.safetensors", "out.safetensors"]);
}

#[test]
fn new_files_get_0666_less_the_umask() {
    let input = fixture("reference/mixed.safetensors");
    let dir = tempfile::tempdir().unwrap();
    for (umask, mode) in [("022", 0o644), ("077", 0o600), ("002", 0o664)] {
        let out = dir.path().join(format!("u{umask}.safetensors"));
        let o = convert_sh(
            &format!("umask {umask}"),
            &[&input, Path::new("-o"), &out, Path::new("--no-sync")],
        );
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let got = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(got, mode, "umask {umask}: mode {got:o}");
    }
    // Shards and the index too.
    let shard_dir = dir.path().join("shards");
    std::fs::create_dir(&shard_dir).unwrap();
    let o = convert_sh(
        "umask 022",
        &[
            &input,
            Path::new("--max-shard-size"),
            Path::new("40"),
            Path::new("-o"),
            &shard_dir.join("m.safetensors"),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let files = listing(&shard_dir);
    assert!(files.len() >= 3, "{files:?}");
    for f in files {
        let got = std::fs::metadata(shard_dir.join(&f))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(got, 0o644, "{f}: mode {got:o}");
    }
}

#[test]
fn an_output_that_is_a_folder_is_refused_unless_named_with_a_slash() {
    let input = fixture("reference/mixed.safetensors");
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("d");
    std::fs::create_dir(&folder).unwrap();
    let o = convert(&[&input, &"-o", &folder]);
    let line = one_line_failure(&o, 2);
    assert!(line.contains("is a folder"), "{line}");
    assert!(listing(&folder).is_empty());
    let slash = format!("{}/", folder.display());
    let o = convert(&[&input, &"-o", &slash]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(listing(&folder), ["model.safetensors"]);
}
