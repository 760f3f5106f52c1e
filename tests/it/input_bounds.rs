//! What an input claims is held to what it is (issue 17, input side, and
//! 16.3), through the binary: zip records that disagree, files read whole
//! that never end, compression bombs, shapes numpy refuses, checkpoints
//! that hold a tensor twice, `validate` on a pipe, and `inspect` of any
//! input convert reads.

use crate::support;

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use safetensors_stream::header::{Order, TensorMeta};
use safetensors_stream::{Dtype, Limits};
use serde_json::Value;
use support::numpy::{build_zip, eocd, npy, put16, put32, write_file, zip64_eocd, ZipMember};

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn convert(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running convert")
}

/// Converts `input` with a JSON report; returns the exit code and the
/// error's kind (`None` on success).
fn convert_kind(input: &Path, out: &Path, extra: &[&str]) -> (i32, Option<String>) {
    let mut args: Vec<&OsStr> = vec![input.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    args.extend([os("--report"), os("json"), os("-o")]);
    args.push(out.as_os_str());
    let o = convert(&args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let report: Value = serde_json::from_str(stderr.lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {stderr}"));
    let kind = report["error"]["kind"].as_str().map(str::to_string);
    (o.status.code().expect("an exit code"), kind)
}

fn refused(input: &Path, extra: &[&str], kind: &str) {
    let out = input.with_extension("out.safetensors");
    let (code, got) = convert_kind(input, &out, extra);
    assert_eq!(
        (code, got.as_deref()),
        (1, Some(kind)),
        "{}",
        input.display()
    );
    assert!(!out.exists(), "no output after a refusal");
}

fn accepted(input: &Path, extra: &[&str]) {
    let out = input.with_extension("out.safetensors");
    let (code, got) = convert_kind(input, &out, extra);
    assert_eq!((code, got), (0, None), "{}", input.display());
}

fn two_members() -> Vec<ZipMember> {
    vec![
        ZipMember::stored("a.npy", npy("<f4", false, &[2], &[0; 8])),
        ZipMember::deflated("b.npy", npy("<i2", false, &[3], &[1; 6])),
    ]
}

// ---- 17.2: the zip's records must agree ------------------------------------

#[test]
fn zip_end_record_counting_fewer_entries_than_the_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (good, layout) = build_zip(&two_members());
    accepted(&write_file(dir.path(), "good.npz", &good), &[]);
    // Both counts say 1: numpy (zipfile) reads both members by size.
    let mut short = good.clone();
    put16(&mut short, layout.eocd + 8, 1);
    put16(&mut short, layout.eocd + 10, 1);
    refused(&write_file(dir.path(), "short.npz", &short), &[], "zip");
    // The count on this disk and the total disagree.
    let mut split = good.clone();
    put16(&mut split, layout.eocd + 8, 1);
    refused(&write_file(dir.path(), "split.npz", &split), &[], "zip");
    // The directory's size leaves an entry out.
    let mut small = good.clone();
    let second = layout.centrals[1] - layout.dir_offset;
    put32(&mut small, layout.eocd + 12, second as u32);
    refused(&write_file(dir.path(), "small.npz", &small), &[], "zip");
}

#[test]
fn zip64_end_record_disagreeing_with_the_classic_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (good, layout) = build_zip(&two_members());
    let body = &good[..layout.eocd as usize];
    let with_zip64 = |classic_entries: u64, zip64_entries: u64| {
        let mut z = body.to_vec();
        let at = z.len() as u64;
        zip64_eocd(
            &mut z,
            at,
            zip64_entries,
            layout.dir_size,
            layout.dir_offset,
        );
        eocd(&mut z, classic_entries, layout.dir_size, layout.dir_offset);
        z
    };
    // Consistent: the classic record defers to the zip64 one, or agrees.
    accepted(
        &write_file(dir.path(), "marker.npz", &with_zip64(0xFFFF, 2)),
        &[],
    );
    accepted(&write_file(dir.path(), "same.npz", &with_zip64(2, 2)), &[]);
    refused(
        &write_file(dir.path(), "classic1.npz", &with_zip64(1, 2)),
        &[],
        "zip",
    );
    refused(
        &write_file(dir.path(), "zip64-1.npz", &with_zip64(2, 1)),
        &[],
        "zip",
    );
}

#[test]
fn local_header_naming_another_file_or_length_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (good, layout) = build_zip(&two_members());
    let local = layout.locals[0];
    let mut renamed = good.clone();
    renamed[(local + 30) as usize] = b'z'; // "z.npy" locally, "a.npy" in the directory
    refused(&write_file(dir.path(), "renamed.npz", &renamed), &[], "zip");
    let mut longer = good.clone();
    let size = u32::from_le_bytes(good[(local + 22) as usize..][..4].try_into().unwrap());
    put32(&mut longer, local + 22, size + 1); // uncompressed size
    put32(&mut longer, local + 18, size + 1); // compressed size
    refused(&write_file(dir.path(), "longer.npz", &longer), &[], "zip");
    let mut method = good.clone();
    put16(&mut method, layout.locals[1] + 8, 0); // stored locally, deflated in the directory
    refused(&write_file(dir.path(), "method.npz", &method), &[], "zip");
    // numpy's own forms still pass: zip64 local sizes, data descriptors.
    let mut members = two_members();
    members[0].zip64_local = true;
    members[1].descriptor = true;
    let (numpy_like, _) = build_zip(&members);
    accepted(&write_file(dir.path(), "numpy-like.npz", &numpy_like), &[]);
}

// ---- 17.6: files read whole are capped ---------------------------------------

#[test]
fn index_or_manifest_that_never_ends_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("zero.safetensors.index.json");
    std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
    let start = Instant::now();
    // Read as a stream, it fails at its first byte, which is not JSON.
    refused(&index, &[], "index_json");
    let o = convert(&[os("validate"), index.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    let dump = write_file(dir.path(), "dump.bin", &[0; 16]);
    // A manifest is the caller's argument: a bad one is a usage error.
    let out = dir.path().join("dump.out.safetensors");
    let (code, kind) = convert_kind(&dump, &out, &["--raw-manifest", "/dev/zero"]);
    assert_eq!((code, kind.as_deref()), (2, Some("usage")));
    assert!(!out.exists());
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    // JSON that goes on past the cap (white space, never a bad byte) is
    // refused one byte past it.
    let big = dir.path().join("big.safetensors.index.json");
    let mut file = std::fs::File::create(&big).unwrap();
    let spaces = vec![b' '; 1 << 20];
    for _ in 0..96 {
        file.write_all(&spaces).unwrap();
    }
    file.write_all(b"{}").unwrap();
    drop(file);
    refused(&big, &[], "index_bytes");
}

#[test]
fn the_index_and_manifest_cap_is_the_callers_limit() {
    let dir = tempfile::tempdir().unwrap();
    // A 2 KiB index (white space, then an object naming no shard).
    let mut text = vec![b' '; 2048];
    text.extend_from_slice(br#"{"metadata": {"total_size": 0}, "weight_map": {}}"#);
    let index = write_file(dir.path(), "model.safetensors.index.json", &text);
    refused(&index, &["--limit", "index-bytes=1KiB"], "index_bytes");
    use safetensors_stream::index::ShardIndex;
    let lowered = safetensors_stream::Limits::default()
        .with(safetensors_stream::Limit::IndexBytes, 1024)
        .unwrap();
    let e = ShardIndex::from_json_file_within(&index, &lowered).unwrap_err();
    let safetensors_stream::ErrorKind::Limit(refusal) = e.kind() else {
        panic!("not a limit: {e}");
    };
    assert_eq!((refusal.limit, refusal.value), ("index-bytes", 1024));
    assert_eq!(refusal.raise.as_deref(), Some("--limit index-bytes=2KiB"));
    assert!(
        e.to_string().contains("index file is over 1024 bytes"),
        "{e}"
    );
    let parsed = ShardIndex::from_json_file_within(&index, &Limits::default()).unwrap();
    assert!(parsed.weight_map.is_empty());
    // A raw manifest is held to the same limit.
    let dump = write_file(dir.path(), "dump.bin", &[0; 16]);
    let manifest = br#"[{"name": "w", "dtype": "F32", "shape": [4], "offset": 0}]"#;
    let manifest = write_file(dir.path(), "manifest.json", manifest);
    let out = dir.path().join("dump.out.safetensors");
    let m = manifest.to_str().unwrap();
    let (code, kind) = convert_kind(
        &dump,
        &out,
        &["--raw-manifest", m, "--limit", "index-bytes=16"],
    );
    assert_eq!((code, kind.as_deref()), (1, Some("index_bytes")));
    accepted(&dump, &["--raw-manifest", m, "--limit", "index-bytes=64"]);
}

// ---- 17.8: a bomb stops at the planned length ---------------------------------

/// `copies` gzip members of `len` zeros each: a small file, a huge stream.
fn gzip_zeros(len: usize, copies: usize) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(&vec![0; len]).unwrap();
    let member = e.finish().unwrap();
    member.repeat(copies)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn compressed_safetensors_bomb_is_refused_without_spooling_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = support::reference::build_file(
        &[(TensorMeta::new("a", Dtype::F32, [3]), vec![0; 12])],
        None,
        Order::Canonical,
    );
    accepted(
        &write_file(dir.path(), "ok.safetensors.gz", &gzip(&file)),
        &[],
    );
    // 1 GiB of zeros after a file that plans 76 bytes.
    let mut bomb = gzip(&file);
    bomb.extend(gzip_zeros(1 << 20, 1024));
    let input = write_file(dir.path(), "bomb.safetensors.gz", &bomb);
    let start = Instant::now();
    refused(&input, &[], "stream_too_long");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn compressed_fortran_npy_and_raw_dump_bombs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A Fortran-order array from a stream is spooled: only its own bytes.
    let mut f = gzip(&npy("<f4", true, &[2, 2], &[0; 16]));
    f.extend(gzip_zeros(1 << 20, 64));
    refused(
        &write_file(dir.path(), "f.npy.gz", &f),
        &[],
        "stream_too_long",
    );
    // A multi-tensor raw dump from a stream is spooled: only the planned bytes.
    let manifest = write_file(
        dir.path(),
        "m.json",
        br#"[{"name":"a","dtype":"U8","shape":[4]},{"name":"b","dtype":"U8","shape":[4],"offset":4}]"#,
    );
    let mut dump = gzip(&[7; 8]);
    dump.extend(gzip_zeros(1 << 20, 64));
    let m = manifest.to_str().unwrap();
    refused(
        &write_file(dir.path(), "d.bin.gz", &dump),
        &["--raw-manifest", m],
        "stream_too_long",
    );
    accepted(
        &write_file(dir.path(), "d2.bin.gz", &gzip(&[7; 8])),
        &["--raw-manifest", m],
    );
}

// ---- a decoder's window is bounded ------------------------------------------------

/// `data` zstd- or xz-compressed by the library's encoders.
fn encoded(codec: &str, data: &[u8]) -> Vec<u8> {
    use async_compression::tokio::write::{XzEncoder, ZstdEncoder};
    use tokio::io::{AsyncWrite, AsyncWriteExt};
    async fn run<W: AsyncWrite + Unpin>(mut w: W, data: &[u8]) -> W {
        w.write_all(data).await.unwrap();
        w.shutdown().await.unwrap();
        w
    }
    futures::executor::block_on(async {
        match codec {
            "zst" => run(ZstdEncoder::new(Vec::new()), data).await.into_inner(),
            _ => run(XzEncoder::new(Vec::new()), data).await.into_inner(),
        }
    })
}

/// The stream with the window its header declares set to `2^log` bytes:
/// zstd's window descriptor, or the LZMA2 dictionary size in xz's block
/// header (whose CRC is then made right). The data decode the same.
fn with_window(codec: &str, mut stream: Vec<u8>, log: u32) -> Vec<u8> {
    if codec == "zst" {
        // Frame header: magic, descriptor (no single segment: a window follows).
        assert_eq!(stream[4] & 0x20, 0, "a window descriptor is there");
        stream[5] = ((log - 10) << 3) as u8;
    } else {
        // Stream header (12 bytes), then a 12-byte block header: size,
        // flags (one filter, no sizes), LZMA2's id, 1 byte of properties.
        assert_eq!(stream[12..16], [0x02, 0x00, 0x21, 0x01], "one LZMA2 filter");
        stream[16] = ((log - 12) * 2) as u8; // 2 << (n / 2 + 11) bytes
        let crc = crc32fast::hash(&stream[12..20]);
        stream[20..24].copy_from_slice(&crc.to_le_bytes());
    }
    stream
}

#[test]
fn a_window_over_128_mib_is_refused_before_it_is_filled() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..4096u32).flat_map(|i| i.to_le_bytes()).collect();
    let array = npy("<u4", false, &[4096], &data);
    for codec in ["zst", "xz"] {
        let plain = encoded(codec, &array);
        // 128 MiB is what `zstd --long` and `zstd --ultra -22` use: read.
        let at_limit = write_file(
            dir.path(),
            &format!("limit.npy.{codec}"),
            &with_window(codec, plain.clone(), 27),
        );
        accepted(&at_limit, &[]);
        let out = std::fs::read(at_limit.with_extension("out.safetensors")).unwrap();
        assert!(out.ends_with(&data), "{codec}: the data decode the same");
        std::fs::remove_file(at_limit.with_extension("out.safetensors")).unwrap();
        // The limit is the caller's: lowered, the same file is refused.
        let lowered = ["--limit", "decoder-window=64MiB"];
        refused(&at_limit, &lowered, "decoder_window");
        // Through the library too, naming the limit and how to raise it.
        let limits = safetensors_stream::Limits::default()
            .with(safetensors_stream::Limit::DecoderWindow, 64 << 20)
            .unwrap();
        let options = safetensors_stream::ConvertOptions::default()
            .source(safetensors_stream::SourceOptions::default().limits(limits));
        let out = at_limit.with_extension("lib.safetensors");
        let output = safetensors_stream::Output::File(out.clone());
        let e = safetensors_stream::convert_blocking(
            std::slice::from_ref(&at_limit),
            &output,
            &options,
        )
        .expect_err("over the lowered window");
        let safetensors_stream::ErrorKind::Limit(refusal) = e.kind() else {
            panic!("{codec}: not a limit: {e}");
        };
        assert_eq!(refusal.limit, "decoder-window", "{codec}");
        assert_eq!(
            refusal.raise.as_deref(),
            Some("--limit decoder-window=128MiB")
        );
        assert!(!out.exists());
        // Twice that: refused, naming the limit, whatever the data.
        let over = write_file(
            dir.path(),
            &format!("over.npy.{codec}"),
            &with_window(codec, plain, 28),
        );
        let out = over.with_extension("out.safetensors");
        let args = [
            over.as_os_str(),
            os("--report"),
            os("json"),
            os("-o"),
            out.as_os_str(),
        ];
        let o = convert(&args);
        assert_eq!(o.status.code(), Some(1), "{codec}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        let report: Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
        assert_eq!(
            report["error"]["kind"], "decoder_window",
            "{codec}: {stderr}"
        );
        let message = report["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("window is over the most a decoder may hold")
                && message.contains("over the limit decoder-window=134217728")
                && message.contains("--limit decoder-window=256MiB"),
            "{codec}: the decoder's words are ours: {message}"
        );
        assert!(!out.exists());
    }
}

// ---- an index or a manifest is held to the header budget ---------------------------

/// Runs convert with a JSON report; returns the exit code, the error's
/// kind and its message.
fn report(args: &[&OsStr]) -> (i32, String, String) {
    let mut all = args.to_vec();
    all.extend([os("--report"), os("json")]);
    let o = convert(&all);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let v: Value = serde_json::from_str(stderr.lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {stderr}"));
    let field = |k: &str| v["error"][k].as_str().unwrap_or_default().to_string();
    (o.status.code().unwrap(), field("kind"), field("message"))
}

#[test]
fn an_index_of_tiny_entries_is_refused_by_the_header_budget_and_a_valid_giant_manifest_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let over = "header would take more than";
    // 500,000 weight_map entries of 12 bytes: 17 times that held.
    let entries: Vec<String> = (0..500_000).map(|i| format!("\"{i}\":\"s\"")).collect();
    let index = format!(
        "{{\"metadata\":{{\"total_size\":0}},\"weight_map\":{{{}}}}}",
        entries.join(",")
    );
    let path = write_file(dir.path(), "model.safetensors.index.json", index.as_bytes());
    let out = dir.path().join("out.safetensors");
    let (code, kind, message) = report(&[path.as_os_str(), os("-o"), out.as_os_str()]);
    assert_eq!((code, kind.as_str()), (1, "index_json"), "{message}");
    assert!(message.contains(over), "{message}");
    assert!(!out.exists());
    // One byte shaped [1, 1, ...] with 4 million dimensions: a valid tensor,
    // whose parse is charged what it holds (its dimensions once, not 16
    // times its text), well within the header budget: admitted (issue 41,
    // valid giants), its shape written whole.
    let dims = vec!["1"; 4_000_000].join(",");
    let manifest = format!("[{{\"name\":\"w\",\"dtype\":\"U8\",\"shape\":[{dims}]}}]");
    let m = write_file(dir.path(), "m.json", manifest.as_bytes());
    let dump = write_file(dir.path(), "d.bin", &[7]);
    let args = [dump.as_os_str(), os("--raw-manifest"), m.as_os_str()];
    let (code, _, message) = report(&[&args[..], &[os("-o"), out.as_os_str()]].concat());
    assert_eq!(code, 0, "{message}");
    let written = std::fs::read(&out).unwrap();
    let n = u64::from_le_bytes(written[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&written[8..8 + n]).unwrap();
    assert_eq!(
        header["w"]["shape"].as_array().map(Vec::len),
        Some(4_000_000)
    );
    assert_eq!(written.last(), Some(&7));
}

// ---- 17.9: shapes numpy refuses ------------------------------------------------

#[test]
fn npy_shape_numpy_cannot_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = npy("|u1", false, &[0, u64::MAX], &[]);
    refused(&write_file(dir.path(), "huge.npy", &f), &[], "npy_header");
    let (zip, _) = build_zip(&[ZipMember::stored("huge.npy", f)]);
    refused(&write_file(dir.path(), "huge.npz", &zip), &[], "npy_header");
    // Empty arrays numpy can hold still convert.
    let ok = npy("<f4", false, &[0, 1 << 40], &[]);
    accepted(&write_file(dir.path(), "empty.npy", &ok), &[]);
}

// ---- 17.10: a tensor twice in a sharded checkpoint -----------------------------

fn shard(dir: &Path, name: &str, tensors: &[&str]) {
    let list: Vec<(TensorMeta, Vec<u8>)> = tensors
        .iter()
        .map(|t| (TensorMeta::new(*t, Dtype::U8, [2]), vec![1, 2]))
        .collect();
    let (_, bytes) = support::reference::build_file(&list, None, Order::Canonical);
    write_file(dir, name, &bytes);
}

fn validate(path: &Path) -> Output {
    convert(&[os("validate"), path.as_os_str()])
}

#[test]
fn index_naming_or_holding_a_tensor_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    shard(dir.path(), "m-1.safetensors", &["a"]);
    shard(dir.path(), "m-2.safetensors", &["a", "b"]);
    shard(dir.path(), "m-3.safetensors", &["b"]);
    let index =
        |name: &str, json: &str| -> PathBuf { write_file(dir.path(), name, json.as_bytes()) };
    let good = index(
        "good.safetensors.index.json",
        r#"{"metadata":{"total_size":4},"weight_map":{"a":"m-1.safetensors","b":"m-3.safetensors"}}"#,
    );
    accepted(&good, &[]);
    assert_eq!(validate(&good).status.code(), Some(0));
    let listed_twice = index(
        "twice.safetensors.index.json",
        r#"{"metadata":{"total_size":4},"weight_map":{"a":"m-1.safetensors","b":"m-3.safetensors","a":"m-1.safetensors"}}"#,
    );
    refused(&listed_twice, &[], "index_duplicate");
    let o = validate(&listed_twice);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"a\""));
    let held_twice = index(
        "held.safetensors.index.json",
        r#"{"metadata":{"total_size":6},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}}"#,
    );
    refused(&held_twice, &[], "index_duplicate");
    assert_eq!(validate(&held_twice).status.code(), Some(1));
}

// ---- 17.11: validate on a pipe ---------------------------------------------------

fn validate_piped(path: &str, bytes: Vec<u8>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .args(["validate", path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        // The reader may stop early (a file that is too long): not an error.
        let _ = stdin.write_all(&bytes);
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    o
}

#[test]
fn validate_reads_a_pipe_as_a_stream() {
    let (_, file) = support::reference::build_file(
        &[(TensorMeta::new("a", Dtype::F32, [3]), vec![0; 12])],
        None,
        Order::Canonical,
    );
    for path in ["/dev/stdin", "-"] {
        let o = validate_piped(path, file.clone());
        assert_eq!(
            o.status.code(),
            Some(0),
            "{path}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains("valid (1 tensor, 12 data bytes"));
    }
    let mut long = file.clone();
    long.extend(vec![0; 1 << 20]);
    assert_eq!(validate_piped("/dev/stdin", long).status.code(), Some(1));
    let short = file[..file.len() - 1].to_vec();
    assert_eq!(validate_piped("/dev/stdin", short).status.code(), Some(1));
}

// ---- 16.3: inspect any input; validate says what a file is ----------------------

fn inspect_json(input: &Path, extra: &[&str]) -> Value {
    let mut args: Vec<&OsStr> = vec![os("inspect"), os("--json")];
    args.push(input.as_os_str());
    args.extend(extra.iter().map(OsStr::new));
    let o = convert(&args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}: {}",
        input.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn names(listing: &Value) -> Vec<String> {
    listing["tensors"]
        .as_array()
        .expect("a tensor list")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn inspect_lists_every_input_kind() {
    let dir = tempfile::tempdir().unwrap();
    let (npz, _) = build_zip(&two_members());
    let npz = write_file(dir.path(), "two.npz", &npz);
    assert_eq!(names(&inspect_json(&npz, &[])), ["a", "b"]);
    let v = inspect_json(&npz, &[]);
    assert_eq!(v["tensors"][1]["dtype"], "I16");
    assert_eq!(v["tensors"][1]["shape"], serde_json::json!([3]));
    assert_eq!(v["data_bytes"], 14);
    let arr = write_file(dir.path(), "w.npy", &npy("<f8", false, &[2, 2], &[0; 32]));
    assert_eq!(names(&inspect_json(&arr, &[])), ["w"]);
    assert_eq!(names(&inspect_json(&arr, &["--name", "x"])), ["x"]);
    let (_, st) = support::reference::build_file(
        &[(TensorMeta::new("t", Dtype::F32, [3]), vec![0; 12])],
        None,
        Order::Canonical,
    );
    let gz = write_file(dir.path(), "m.safetensors.gz", &gzip(&st));
    assert_eq!(names(&inspect_json(&gz, &[])), ["t"]);
    let npy_gz = write_file(
        dir.path(),
        "v.npy.gz",
        &gzip(&npy("<f4", false, &[3], &[0; 12])),
    );
    assert_eq!(names(&inspect_json(&npy_gz, &[])), ["v"]);
    let dump = write_file(dir.path(), "dump.bin", &[0; 24]);
    let v = inspect_json(
        &dump,
        &["--raw-dtype", "F32", "--raw-shape", "2,3", "--name", "r"],
    );
    assert_eq!(names(&v), ["r"]);
    assert_eq!(v["data_bytes"], 24);
    // safetensors and an index keep their offsets view.
    let plain = write_file(dir.path(), "m.safetensors", &st);
    let v = inspect_json(&plain, &[]);
    assert_eq!(v["files"][0]["tensors"][0]["name"], "t");
}

#[test]
fn validate_says_what_a_file_that_is_not_safetensors_is() {
    let dir = tempfile::tempdir().unwrap();
    let (npz, _) = build_zip(&two_members());
    let cases = [
        ("two.npz", npz, "npz"),
        ("w.npy", npy("<f4", false, &[1], &[0; 4]), ".npy"),
        ("x.safetensors.gz", gzip(b"anything"), "gzip"),
    ];
    for (name, bytes, what) in cases {
        let path = write_file(dir.path(), name, &bytes);
        let o = validate(&path);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("not a safetensors file") && stderr.contains(what),
            "{name}: {stderr}"
        );
        let e = safetensors_stream::source::read_file_header(
            &path,
            safetensors_stream::header::Rules::STRICT,
        )
        .unwrap_err();
        assert!(
            matches!(
                e.kind(),
                safetensors_stream::ErrorKind::NotSafetensors { .. }
            ),
            "{e:?}"
        );
    }
}

// ---- the tensor count and the decompression ratio are the caller's -------------------

/// Converts `input` through the library under `limits`; the limit that
/// refused it, with how to raise it (`None`: converted).
fn library_refusal(input: &Path, limits: Limits) -> Option<(String, Option<String>)> {
    let options = safetensors_stream::ConvertOptions::default()
        .source(safetensors_stream::SourceOptions::default().limits(limits));
    let out = input.with_extension("lib.safetensors");
    let output = safetensors_stream::Output::File(out.clone());
    let done = safetensors_stream::convert_blocking(
        std::slice::from_ref(&input.to_path_buf()),
        &output,
        &options,
    );
    match done {
        Ok(_) => {
            std::fs::remove_file(&out).unwrap();
            None
        }
        Err(e) => {
            assert!(!out.exists(), "no output after a refusal");
            let safetensors_stream::ErrorKind::Limit(refusal) = e.kind() else {
                panic!("not a limit: {e}");
            };
            Some((refusal.limit.to_string(), refusal.raise.clone()))
        }
    }
}

#[test]
fn tensor_count_is_the_callers_limit_in_every_listing() {
    use safetensors_stream::Limit;
    let dir = tempfile::tempdir().unwrap();
    let three = |t: &str| (TensorMeta::new(t, Dtype::F32, [1]), vec![0; 4]);
    let (_, st) = support::reference::build_file(
        &[three("a"), three("b"), three("c")],
        None,
        Order::Canonical,
    );
    let st = write_file(dir.path(), "three.safetensors", &st);
    let members: Vec<ZipMember> = ["a", "b", "c"]
        .iter()
        .map(|t| ZipMember::stored(&format!("{t}.npy"), npy("<f4", false, &[1], &[0; 4])))
        .collect();
    let npz = write_file(dir.path(), "three.npz", &build_zip(&members).0);
    for input in [&st, &npz] {
        // Three tensors: the default admits them, and so does a limit of 3.
        accepted(input, &[]);
        std::fs::remove_file(input.with_extension("out.safetensors")).unwrap();
        accepted(input, &["--limit", "tensor-count=3"]);
        std::fs::remove_file(input.with_extension("out.safetensors")).unwrap();
        refused(input, &["--limit", "tensor-count=2"], "tensor_count");
        let two = Limits::default().with(Limit::TensorCount, 2).unwrap();
        assert_eq!(
            library_refusal(input, two),
            Some((
                "tensor-count".to_string(),
                Some("--limit tensor-count=4".to_string())
            )),
            "{}",
            input.display()
        );
        assert_eq!(library_refusal(input, Limits::default()), None);
    }
}

#[test]
fn decompression_ratio_is_the_callers_limit_for_streams_and_zip_members() {
    use safetensors_stream::Limit;
    let dir = tempfile::tempdir().unwrap();
    // 72 MiB of zeros (past the 64 MiB any stream may inflate to):
    // deflate makes them about 1000 times smaller.
    let zeros = npy("|u1", false, &[72 << 20], &vec![0; 72 << 20]);
    let npz = build_zip(&[ZipMember::deflated("z.npy", zeros.clone())]).0;
    let npz = write_file(dir.path(), "zeros.npz", &npz);
    let gz = write_file(dir.path(), "zeros.npy.gz", &gzip(&zeros));
    for input in [&npz, &gz] {
        accepted(input, &[]);
        std::fs::remove_file(input.with_extension("out.safetensors")).unwrap();
        refused(
            input,
            &["--limit", "decompression-ratio=100"],
            "decompression_ratio",
        );
        let low = Limits::default()
            .with(Limit::DecompressionRatio, 100)
            .unwrap();
        assert_eq!(
            library_refusal(input, low),
            Some((
                "decompression-ratio".to_string(),
                Some("--limit decompression-ratio=200".to_string())
            )),
            "{}",
            input.display()
        );
    }
    // A small stream inflates as much as it likes: 4 MiB of zeros pass
    // the lowest ratio.
    let small = npy("|u1", false, &[4 << 20], &vec![0; 4 << 20]);
    let small = write_file(dir.path(), "small.npy.gz", &gzip(&small));
    accepted(&small, &["--limit", "decompression-ratio=1"]);
}
