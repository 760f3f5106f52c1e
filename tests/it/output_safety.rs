//! Where the output goes, through the binary: an output that is an input,
//! missing folders, special files, links, modes and owners, long names,
//! index-like names, terminals, and inputs rewritten in place. Each test
//! failed before the change it covers (issues 16 and 17).

use crate::support;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use safetensors_stream::header::Rules;
use safetensors_stream::source::read_file_header;
use support::faults::*;
use support::{code, stderr};

fn run(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args.iter().map(|a| a.as_ref()));
    c.stdin(Stdio::null()).output().unwrap()
}

/// The error kind of a failed run with `--report json` (one JSON object on stderr).
fn error_kind(o: &Output) -> String {
    error_json(o)["kind"].as_str().unwrap().to_string()
}

/// The `error` object of a failed run's JSON report.
fn error_json(o: &Output) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&o.stderr)
        .unwrap_or_else(|e| panic!("{e}: not one JSON object: {}", stderr(o)));
    assert_eq!(v["ok"], false, "{v}");
    v["error"].clone()
}

/// A small safetensors input (two U8 tensors), and what it converts to.
fn small_input(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let bytes = safetensors_bytes(&[("a", pattern(1, 3000)), ("b", pattern(2, 5000))]);
    (write(dir, name, &bytes), bytes)
}

fn example_npz() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/example/model.npz")
}

// ---- 16.1: the output is an input ---------------------------------------------------

#[test]
fn an_output_that_is_an_input_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let npz = dir.path().join("m.npz");
    std::fs::copy(example_npz(), &npz).unwrap();
    let npz_bytes = std::fs::read(&npz).unwrap();
    std::os::unix::fs::symlink("m.npz", dir.path().join("link.npz")).unwrap();
    std::fs::hard_link(&npz, dir.path().join("hard.npz")).unwrap();
    // Directly, through a symbolic link, through a hard link, with a filter.
    for (out, extra) in [
        ("m.npz", None),
        ("link.npz", None),
        ("hard.npz", None),
        ("m.npz", Some("--include=layer.0.*")),
    ] {
        let out = dir.path().join(out);
        let mut a: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&npz, &"--report", &"json", &"-o", &out];
        if let Some(x) = &extra {
            a.push(x);
        }
        let o = run(&a);
        assert_eq!(code(&o), 2, "{}: {}", out.display(), stderr(&o));
        assert_eq!(error_kind(&o), "output_is_input");
        // Both sides named: the output refused and the input it is.
        let e = error_json(&o);
        let named = (e["input"].as_str(), e["output"].as_str());
        let out_shown = out.display().to_string();
        let input_shown = npz.display().to_string();
        assert_eq!(named, (Some(&*input_shown), Some(&*out_shown)), "{e}");
        assert_eq!(std::fs::read(&npz).unwrap(), npz_bytes);
        assert!(std::fs::symlink_metadata(dir.path().join("link.npz"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
    assert!(any_temps(dir.path()).is_empty());
    // The dry run says the same.
    let o = run(&[&npz, &"--dry-run", &"-o", &npz]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
}

#[test]
fn a_sharded_output_that_would_replace_an_input_index_or_shard_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = small_input(dir.path(), "in.safetensors");
    let sharded = |out: &Path| run(&[&input, &"--max-shard-size", &"4000", &"-o", &out]);
    let o = sharded(&dir.path().join("m.safetensors"));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let index = dir.path().join("m.safetensors.index.json");
    let before = tree(dir.path());
    let shard1 = std::fs::read(dir.path().join("m-00001-of-00002.safetensors")).unwrap();
    // The index as input, its own set as output: its shards would be replaced.
    let o = run(&[
        &index,
        &"--report",
        &"json",
        &"--max-shard-size",
        &"4000",
        &"-o",
        &dir.path().join("m.safetensors"),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(error_kind(&o), "output_is_input");
    assert_eq!(tree(dir.path()), before);
    // One file onto a shard of the input index.
    let shard_path = dir.path().join("m-00001-of-00002.safetensors");
    let o = run(&[&index, &"-o", &shard_path]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    // A set whose second shard would be the input (a hard link to it).
    std::fs::hard_link(&input, dir.path().join("s-00002-of-00002.safetensors")).unwrap();
    let before = tree(dir.path());
    let o = run(&[
        &input,
        &"--max-shard-size",
        &"4000",
        &"-o",
        &dir.path().join("s.safetensors"),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(tree(dir.path()), before);
    assert_eq!(std::fs::read(&shard_path).unwrap(), shard1);
}

/// `input -o out` is refused as an output onto a file read, by the real
/// run and by `--dry-run`, and `dir` keeps its files as they were.
fn assert_refused_onto_an_input(input: &Path, out: &Path, dir: &Path) {
    assert_refused_onto_an_input_with(input, out, dir, &[]);
}

/// As [`assert_refused_onto_an_input`], with `flags` (`--dequantize`).
fn assert_refused_onto_an_input_with(input: &Path, out: &Path, dir: &Path, flags: &[&str]) {
    let before = tree(dir);
    for dry in [None, Some("--dry-run")] {
        let mut a: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&input, &"--report", &"json", &"-o", &out];
        a.extend(flags.iter().map(|f| f as &dyn AsRef<std::ffi::OsStr>));
        if let Some(x) = &dry {
            a.push(x);
        }
        let o = run(&a);
        assert_eq!(code(&o), 2, "{} {dry:?}: {}", out.display(), stderr(&o));
        assert_eq!(error_kind(&o), "output_is_input");
        assert_eq!(tree(dir), before);
    }
}

#[test]
fn an_output_onto_a_shard_of_a_checkpoint_folder_is_refused() {
    // The folder stands for its index; the shards are what the source
    // reports it read, so each of them is an input.
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = small_input(dir.path(), "in.safetensors");
    let set = dir.path().join("set");
    let o = run(&[
        &input,
        &"--max-shard-size",
        &"4000",
        &"-o",
        &set.join("m.safetensors"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for shard in [
        "m-00001-of-00002.safetensors",
        "m-00002-of-00002.safetensors",
    ] {
        assert_refused_onto_an_input(&set, &set.join(shard), &set);
    }
    // Asked for, a shard is replaced by the whole checkpoint.
    let out = set.join("m-00002-of-00002.safetensors");
    let o = run(&[&set, &"--overwrite-input", &"-o", &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn an_output_onto_an_onnx_models_external_data_is_refused() {
    // The external file is read as much as the model: replacing it would
    // lose the weights the model names.
    let dir = copied("fixtures/onnx/external", &["model.onnx", "weights.bin"]);
    let (model, weights) = (
        dir.path().join("model.onnx"),
        dir.path().join("weights.bin"),
    );
    assert_refused_onto_an_input(&model, &weights, dir.path());
}

#[test]
fn an_output_onto_the_config_a_dequantization_reads_is_refused() {
    // Dequantizing reads the model's config.json (its quantization_config):
    // replacing it with the conversion would lose the model's config.
    let dir = copied(
        "fixtures/quantized/gptq",
        &["model.safetensors", "config.json"],
    );
    let (model, config) = (
        dir.path().join("model.safetensors"),
        dir.path().join("config.json"),
    );
    assert_refused_onto_an_input_with(&model, &config, dir.path(), &["--dequantize"]);
}

/// A temporary folder holding `files` of the fixture folder `fixture`.
fn copied(fixture: &str, files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join(fixture);
    for f in files {
        std::fs::copy(from.join(f), dir.path().join(f)).unwrap();
    }
    dir
}

/// A raw manifest's text: one F32 tensor of 16, the whole dump.
const MANIFEST: &[u8] = br#"[{"name": "a", "dtype": "F32", "shape": [16], "offset": 0}]"#;

/// A 64-byte dump, its manifest and a link to the manifest, in `dir`.
fn dump_and_manifest(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let dump = write(dir, "dump.bin", &pattern(3, 64));
    let manifest = write(dir, "m.json", MANIFEST);
    let link = dir.join("link.json");
    std::os::unix::fs::symlink(&manifest, &link).unwrap();
    (dump, manifest, link)
}

#[test]
fn an_output_onto_the_raw_manifest_is_refused() {
    // The manifest is read as much as the dump; `-o` onto it (by a link
    // too) would replace the description of the dump with its conversion.
    let dir = tempfile::tempdir().unwrap();
    let (dump, manifest, link) = dump_and_manifest(dir.path());
    let before = tree(dir.path());
    for out in [&manifest, &link] {
        let o = run(&[
            &dump,
            &"--raw-manifest",
            &manifest,
            &"--report",
            &"json",
            &"-o",
            out,
        ]);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert_eq!(error_kind(&o), "output_is_input");
        assert_eq!(tree(dir.path()), before);
    }
    let o = run(&[
        &dump,
        &"--raw-manifest",
        &manifest,
        &"--overwrite-input",
        &"-o",
        &manifest,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

/// The library refuses an output onto the manifest a spec was read from,
/// as it does one onto the dump: the raw source reports both as read.
#[test]
fn the_library_refuses_an_output_onto_the_raw_manifest() {
    use safetensors_stream::convert::{convert_sources, open_inputs, ConvertOptions};
    use safetensors_stream::source::{RawSpec, SourceOptions};
    use safetensors_stream::ErrorKind;
    let dir = tempfile::tempdir().unwrap();
    let (dump, manifest, link) = dump_and_manifest(dir.path());
    let spec = RawSpec::from_manifest_file(&manifest).unwrap();
    assert_eq!(spec.manifest.as_deref(), Some(manifest.as_path()));
    let opts = ConvertOptions::default()
        .sync(false)
        .source(SourceOptions::default().raw(Some(spec)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let convert = |out: &Path, opts: &ConvertOptions| {
        rt.block_on(async {
            let mut sources = open_inputs(std::slice::from_ref(&dump), opts).await?;
            let out = safetensors_stream::convert::Output::File(out.to_path_buf());
            convert_sources(&mut sources, &out, opts).await
        })
    };
    let shown = manifest.display().to_string();
    for out in [&manifest, &link] {
        let e = convert(out, &opts).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::OutputIsInput(i) if i == &shown),
            "{e}"
        );
        assert_eq!(std::fs::read(&manifest).unwrap(), MANIFEST);
    }
    // Asked for, it is replaced by the conversion.
    convert(&manifest, &opts.clone().overwrite_input(true)).unwrap();
    let header = read_file_header(&manifest, Rules::STRICT).unwrap();
    assert_eq!(header.tensors.len(), 1);
}

#[test]
fn an_in_place_cast_with_overwrite_input_replaces_the_file_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/example/model.safetensors"),
        &path,
    )
    .unwrap();
    let old = std::fs::read(&path).unwrap();
    // Another name for the old inode: it must keep the old bytes whole.
    let keep = dir.path().join("old.safetensors");
    std::fs::hard_link(&path, &keep).unwrap();
    let old_ino = std::fs::metadata(&path).unwrap().ino();
    let o = run(&[
        &path,
        &"--cast-all",
        &"BF16",
        &"--overwrite-input",
        &"-q",
        &"-o",
        &path,
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let header = read_file_header(&path, Rules::STRICT).unwrap();
    assert!(header
        .tensors
        .iter()
        .all(|t| t.meta.dtype != safetensors_stream::Dtype::F32));
    assert_ne!(
        std::fs::metadata(&path).unwrap().ino(),
        old_ino,
        "a new inode"
    );
    assert_eq!(std::fs::read(&keep).unwrap(), old);
    assert!(any_temps(dir.path()).is_empty());
}

// ---- 16.4: missing folders, and what --dry-run checks ---------------------------------

#[test]
fn missing_output_folders_are_made_and_removed_again_when_the_run_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (input, bytes) = small_input(dir.path(), "in.safetensors");
    let out = dir.path().join("out/deeper/model.safetensors");
    let o = run(&[&input, &"-q", &"-o", &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), bytes);
    // The README's reshard recipe, into a folder that does not exist.
    let o = run(&[
        &input,
        &"--max-shard-size",
        &"4000",
        &"-q",
        &"-o",
        &dir.path().join("reshard/m.safetensors"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(listing(&dir.path().join("reshard")).len(), 3);

    // A truncated input fails after the folders were made: they go again.
    let short = write(dir.path(), "short.safetensors", &bytes[..bytes.len() - 10]);
    let before = tree(dir.path());
    for out in ["new/a/b/m.safetensors", "out/new/m.safetensors"] {
        let o = run(&[&short, &"-o", &dir.path().join(out)]);
        assert_eq!(code(&o), 1, "{}", stderr(&o));
        assert_eq!(tree(dir.path()), before, "{out}");
    }
}

#[test]
fn dry_run_checks_what_the_real_run_checks_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = small_input(dir.path(), "in.safetensors");
    let before = tree(dir.path());
    // Fine: a folder still to be made is not made by a dry run.
    let o = run(&[
        &input,
        &"--dry-run",
        &"-o",
        &dir.path().join("new/m.safetensors"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // A file where a folder should be: the real run could not write.
    let o = run(&[
        &input,
        &"--dry-run",
        &"-o",
        &dir.path().join("in.safetensors/m.safetensors"),
    ]);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    // A single file named like an index.
    let o = run(&[
        &input,
        &"--dry-run",
        &"--report",
        &"json",
        &"-o",
        &dir.path().join("x.safetensors.index.json"),
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(error_kind(&o), "output_name");
    // Shard names over NAME_MAX.
    let long = dir.path().join(format!("{}.safetensors", "n".repeat(240)));
    let o = run(&[
        &input,
        &"--dry-run",
        &"--max-shard-size",
        &"4000",
        &"--report",
        &"json",
        &"-o",
        &long,
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(error_kind(&o), "output_name");
    // A read-only filesystem (where the machine lets us make one).
    if let Some(fs) = Tmpfs::mount(&dir.path().join("ro"), "1m", "dry-run on a read-only fs") {
        let ok = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&fs.dir)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let o = run(&[&input, &"--dry-run", &"-o", &fs.dir.join("m.safetensors")]);
        assert_eq!(code(&o), 3, "{}", stderr(&o));
        drop(fs);
    }
    assert_eq!(
        tree(dir.path())
            .into_iter()
            .filter(|p| p != "ro/")
            .collect::<Vec<_>>(),
        before
    );
}

// ---- 16.6: binary output to a terminal ------------------------------------------------

#[test]
fn binary_output_to_a_terminal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = small_input(dir.path(), "in.safetensors");
    for out in ["-", "/dev/stdout", "/dev/tty"] {
        let cmd = format!("{BIN} {} -o {out}", input.display());
        // `script` gives the run a terminal for stdin, stdout and stderr.
        let o = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let screen = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(2), "{out}: {screen}");
        assert!(screen.contains("terminal"), "{out}: {screen}");
        assert!(
            !screen.contains("__metadata__") && !screen.contains("\"dtype\""),
            "{screen}"
        );
    }
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(
        readme.contains("standard output is not atomic"),
        "the pipeline recipe says so"
    );
}

// ---- 17.1: special files, links ---------------------------------------------------------

#[test]
fn a_fifo_at_the_output_is_written_through_and_stays_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let (input, bytes) = small_input(dir.path(), "in.safetensors");
    let fifo = dir.path().join("out.safetensors");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = run(&[&input, &"-q", &"-o", &fifo]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Checked first: a FIFO replaced by a file leaves its reader waiting.
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(reader.join().unwrap(), bytes);
    // A set cannot go into one FIFO.
    let o = run(&[
        &input,
        &"--max-shard-size",
        &"4000",
        &"--report",
        &"json",
        &"-o",
        &fifo,
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(error_kind(&o), "output_name");
    assert_eq!(listing(dir.path()), ["in.safetensors", "out.safetensors"]);
}

#[test]
fn a_character_device_at_the_output_is_written_through_and_stays_one() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = small_input(dir.path(), "in.safetensors");
    // Our own /dev/null (1:3), so that a failure cannot harm the real one.
    let null = dir.path().join("null");
    let made = rustix::fs::mknodat(
        rustix::fs::CWD,
        &null,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    );
    if let Err(e) = made {
        println!("skipped: cannot make a device node here ({e})");
        return;
    }
    let o = run(&[&input, &"-q", &"-o", &null]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let meta = std::fs::symlink_metadata(&null).unwrap();
    assert!(meta.file_type().is_char_device(), "{meta:?}");
    assert_eq!(listing(dir.path()), ["in.safetensors", "null"]);
}

#[test]
fn standard_output_by_name_is_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let (input, bytes) = small_input(dir.path(), "in.safetensors");
    let link = dir.path().join("to-stdout");
    std::os::unix::fs::symlink("/dev/stdout", &link).unwrap();
    for out in [Path::new("/proc/self/fd/1"), &link] {
        let o = run(&[&input, &"-q", &"-o", &out]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert!(
            o.stdout == bytes,
            "{}: {} bytes on stdout",
            out.display(),
            o.stdout.len()
        );
    }
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(listing(dir.path()), ["in.safetensors", "to-stdout"]);
}

#[test]
fn a_socket_at_the_output_is_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let (input, bytes) = small_input(dir.path(), "in.safetensors");
    let sock = dir.path().join("out.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut got).unwrap();
        got
    });
    let o = run(&[&input, &"-q", &"-o", &sock]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Checked first: a socket replaced by a file leaves its listener waiting.
    assert!(std::fs::symlink_metadata(&sock)
        .unwrap()
        .file_type()
        .is_socket());
    assert_eq!(reader.join().unwrap(), bytes);
}

#[test]
fn a_symbolic_link_at_the_output_is_followed_and_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (input, bytes) = small_input(dir.path(), "in.safetensors");
    let real_dir = dir.path().join("real");
    std::fs::create_dir(&real_dir).unwrap();
    let real = write(&real_dir, "model.safetensors", b"old bytes");
    let link = dir.path().join("model.safetensors");
    std::os::unix::fs::symlink("real/model.safetensors", &link).unwrap();
    let o = run(&[&input, &"-q", &"-o", &link]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&real).unwrap(), bytes);
    assert_eq!(listing(&real_dir), ["model.safetensors"]);
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(
        readme.contains("symbolic link at `-o` is followed"),
        "the README says so"
    );
}

// ---- 17.4: mode and owner ----------------------------------------------------------------

/// Runs the binary under `sh` with `umask` set first.
fn run_with_umask(umask: &str, args: &[&Path]) -> Output {
    let mut script = format!("umask {umask}; exec \"$0\"");
    for i in 0..args.len() {
        script.push_str(&format!(" \"${}\"", i + 1));
    }
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn an_existing_output_keeps_its_mode_under_any_umask() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = small_input(dir.path(), "in.safetensors");
    for (mode, umask) in [
        (0o666, "022"),
        (0o660, "077"),
        (0o604, "002"),
        (0o640, "000"),
    ] {
        let out = write(dir.path(), "out.safetensors", b"old");
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(mode)).unwrap();
        let o = run_with_umask(umask, &[&input, Path::new("-q"), Path::new("-o"), &out]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let got = std::fs::metadata(&out).unwrap().mode() & 0o7777;
        assert_eq!(got, mode, "mode {mode:o} under umask {umask}: got {got:o}");
    }
    // A new file: 0666 less the umask, as before.
    let new = dir.path().join("new.safetensors");
    let o = run_with_umask("077", &[&input, Path::new("-q"), Path::new("-o"), &new]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o777, 0o600);
}

#[test]
fn an_existing_output_keeps_its_owner_when_run_as_root() {
    // Root can give a file away: only root can own a file of its own making that way.
    let probe = tempfile::NamedTempFile::new().unwrap();
    if std::os::unix::fs::chown(probe.path(), Some(1234), None).is_err() {
        println!("skipped: giving a file to another user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = small_input(dir.path(), "in.safetensors");
    let out = write(dir.path(), "out.safetensors", b"old");
    std::os::unix::fs::chown(&out, Some(1234), Some(2345)).unwrap();
    let o = run(&[&input, &"-q", &"-o", &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let m = std::fs::metadata(&out).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 2345));
    // Sharded sets too.
    let shard = write(dir.path(), "m-00001-of-00002.safetensors", b"old");
    std::os::unix::fs::chown(&shard, Some(1234), Some(2345)).unwrap();
    let o = run(&[
        &input,
        &"--max-shard-size",
        &"4000",
        &"-q",
        &"-o",
        &dir.path().join("m.safetensors"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let m = std::fs::metadata(&shard).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 2345));
}

#[test]
fn an_output_with_hard_links_is_replaced_and_the_run_warns() {
    let dir = tempfile::tempdir().unwrap();
    let (input, bytes) = small_input(dir.path(), "in.safetensors");
    let out = write(dir.path(), "out.safetensors", b"old");
    let other = dir.path().join("other-name");
    std::fs::hard_link(&out, &other).unwrap();
    let o = run(&[&input, &"-o", &out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read(&out).unwrap(), bytes);
    assert_eq!(
        std::fs::read(&other).unwrap(),
        b"old",
        "documented: the link is split"
    );
    assert!(stderr(&o).contains("hard link"), "{}", stderr(&o));
}

// ---- 17.12 and 17.13: names ----------------------------------------------------------------

#[test]
fn an_output_name_of_250_bytes_works() {
    let dir = tempfile::tempdir().unwrap();
    let (input, bytes) = small_input(dir.path(), "in.safetensors");
    for len in [235, 243, 255] {
        let name = format!(
            "{}.safetensors",
            "é".repeat((len - 12) / 2) + &"x".repeat((len - 12) % 2)
        );
        assert_eq!(name.len(), len);
        let out = dir.path().join(&name);
        let o = run(&[&input, &"-q", &"-o", &out]);
        assert_eq!(code(&o), 0, "{len} bytes: {}", stderr(&o));
        assert_eq!(std::fs::read(&out).unwrap(), bytes);
        std::fs::remove_file(&out).unwrap();
    }
    assert_eq!(listing(dir.path()), ["in.safetensors"]);
}

#[test]
fn one_file_named_like_an_index_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = small_input(dir.path(), "in.safetensors");
    for extra in [None, Some(["--max-shard-size", "1GB"])] {
        let out = dir.path().join("x.safetensors.index.json");
        let mut a: Vec<&dyn AsRef<std::ffi::OsStr>> =
            vec![&input, &"--report", &"json", &"-o", &out];
        if let Some(x) = &extra {
            a.extend(x.iter().map(|s| s as &dyn AsRef<std::ffi::OsStr>));
        }
        let o = run(&a);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert_eq!(error_kind(&o), "output_name");
        assert_eq!(listing(dir.path()), ["in.safetensors"]);
    }
    // With real shards the index name is the set's base: accepted, as before.
    let o = run(&[
        &input,
        &"--max-shard-size",
        &"4000",
        &"-q",
        &"-o",
        &dir.path().join("x.safetensors.index.json"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

// ---- 17.14: an input rewritten in place at the same length ----------------------------------

#[test]
fn an_input_rewritten_at_the_same_length_during_the_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (input, bytes) = small_input(dir.path(), "in.safetensors");
    let out = write(dir.path(), "out.safetensors", b"the old bytes");
    // A second input on stdin holds the run until the test has rewritten
    // the first; `b` is the last tensor written, so the file input's
    // tensor `a` is copied (old bytes) before the rewrite.
    let data = pattern(9, 64 << 10);
    let npy = npy_u8(&data);
    let header_len = npy.len() - data.len();
    let mut held = Run::start(
        &[
            input.as_os_str(),
            "-".as_ref(),
            "--name".as_ref(),
            "z".as_ref(),
            "--buffer-size".as_ref(),
            "4KiB".as_ref(),
            "--report".as_ref(),
            "json".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ],
        "held by stdin",
    );
    let feeder = held.stdin_feeder();
    feeder.send(&npy[..header_len + 4096]);
    held.wait_until("the temp file holds the file input's tensors", || {
        temps_of(dir.path(), "out.safetensors")
            .iter()
            .any(|t| file_len(&dir.path().join(t)) >= bytes.len() as u64 + 4096)
    });
    // The kernel's file clock ticks every few milliseconds: let one pass
    // since the input was opened, or the rewrite would carry the same time.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let mut rewritten = bytes.clone();
    let n = rewritten.len();
    rewritten[n - 100..].fill(0xAA);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&input)
        .and_then(|mut f| std::io::Write::write_all(&mut f, &rewritten))
        .unwrap();
    assert_eq!(file_len(&input), n as u64, "same length");
    feeder.send(&npy[header_len + 4096..]);
    drop(feeder);
    let ended = held.end();
    assert_eq!(ended.code(), Some(1), "{ended:?}");
    let v: serde_json::Value = serde_json::from_str(&ended.stderr).unwrap();
    assert_eq!(v["error"]["kind"], "input_modified", "{v}");
    assert_eq!(std::fs::read(&out).unwrap(), b"the old bytes");
    assert!(any_temps(dir.path()).is_empty());
}
