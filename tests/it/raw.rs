//! Raw dumps through `convert`: every dtype (sub-byte F4/F6 by byte count),
//! offsets, big-endian dumps, manifests in any order, overlaps refused, size
//! mismatches both ways, trailing bytes allowed on request, standard input in
//! one pass, and gzip-compressed dumps. Outputs are read back with the
//! reference reader (the `safetensors` crate).

use crate::support;

use support::{pattern, write, BIN};

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use safetensors_stream::convert::{convert_sources, ConvertOptions, Output as Out};
use safetensors_stream::source::Source;
use safetensors_stream::{
    internals::RawSource,
    source::{RawSpec, RawTensor},
};
use safetensors_stream::{Dtype, ErrorKind};

type Args<'a> = [&'a dyn AsRef<std::ffi::OsStr>];

fn run(args: &Args<'_>) -> Output {
    let mut c = Command::new(BIN);
    for a in args {
        c.arg(a);
    }
    c.stdin(Stdio::null()).output().unwrap()
}

/// Runs with `stdin` piped in from a writer thread (so a large input cannot
/// deadlock against the child's output).
fn run_stdin(args: &Args<'_>, stdin: Vec<u8>) -> Output {
    let mut c = Command::new(BIN);
    for a in args {
        c.arg(a);
    }
    let mut child = c
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        // The child may stop reading early (an error): a broken pipe is fine.
        let _ = pipe.write_all(&stdin);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "convert failed: {}", stderr(o));
}

/// Fails with exit code `code` and one `convert: ` line; returns it.
fn fails(o: &Output, code: i32) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err:?}");
    assert!(lines[0].starts_with("safetensors-convert: "), "{err:?}");
    lines[0].to_string()
}

fn our_dtype(d: safetensors::Dtype) -> Dtype {
    serde_json::to_value(d)
        .unwrap()
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// name -> (dtype, shape, bytes), as the reference reader sees the file.
fn read_back(path: &Path) -> HashMap<String, (Dtype, Vec<u64>, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("the reference reads it");
    st.tensors()
        .into_iter()
        .map(|(n, v)| {
            let shape = v.shape().iter().map(|&d| d as u64).collect();
            (n, (our_dtype(v.dtype()), shape, v.data().to_vec()))
        })
        .collect()
}

fn shape_arg(shape: &[u64]) -> String {
    if shape.is_empty() {
        "scalar".into()
    } else {
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Little-endian bytes of a big-endian dump: each word reversed (C64 is two
/// F32 words; one-byte and sub-byte dtypes are left alone).
fn swapped(dtype: Dtype, bytes: &[u8]) -> Vec<u8> {
    let word = match dtype {
        Dtype::C64 => 4,
        d => d.byte_width().unwrap_or(1) as usize,
    };
    bytes
        .chunks(word)
        .flat_map(|w| w.iter().rev().copied())
        .collect()
}

/// A shape whose bits fill whole bytes for every dtype (F4: 4 bits, F6: 6).
const SHAPE: [u64; 2] = [3, 8];

#[test]
fn every_dtype_little_and_big_endian() {
    let dir = tempfile::tempdir().unwrap();
    for (k, dtype) in Dtype::ALL.into_iter().enumerate() {
        let len = dtype.byte_len(&SHAPE).unwrap() as usize;
        let expected_len = 3 * 8 * dtype.bits() as usize / 8;
        assert_eq!(len, expected_len, "{dtype}: byte count");
        let data = pattern(k as u64, len);
        let dump = write(dir.path(), &format!("{dtype}.bin"), &data);
        for order in ["little", "big"] {
            let out = dir.path().join(format!("{dtype}-{order}.safetensors"));
            ok(&run(&[
                &dump,
                &"--raw-dtype",
                &dtype.as_str(),
                &"--raw-shape",
                &shape_arg(&SHAPE),
                &"--raw-byte-order",
                &order,
                &"--name",
                &"t",
                &"-o",
                &out,
                &"--quiet",
            ]));
            let got = read_back(&out);
            let (d, s, bytes) = &got["t"];
            assert_eq!(*d, dtype);
            assert_eq!(s, &SHAPE);
            let want = if order == "big" {
                swapped(dtype, &data)
            } else {
                data.clone()
            };
            assert_eq!(bytes, &want, "{dtype} {order}-endian");
        }
    }
}

#[test]
fn sub_byte_dtypes_count_bits() {
    let dir = tempfile::tempdir().unwrap();
    // F4: 6 elements are 3 bytes; F6: 4 elements are 3 bytes.
    for (dtype, shape, len) in [
        (Dtype::F4, vec![6u64], 3usize),
        (Dtype::F4, vec![2, 5], 5),
        (Dtype::F6_E2M3, vec![4], 3),
        (Dtype::F6_E3M2, vec![2, 2, 2], 6),
        (Dtype::F4, vec![0], 0),
    ] {
        let data = pattern(len as u64, len);
        let dump = write(dir.path(), "sub.bin", &data);
        let out = dir.path().join("sub.safetensors");
        ok(&run(&[
            &dump,
            &"--raw-dtype",
            &dtype.as_str(),
            &"--raw-shape",
            &shape_arg(&shape),
            &"-o",
            &out,
            &"--quiet",
        ]));
        // Without --name, the dump's file name less its extension.
        assert_eq!(read_back(&out)["sub"], (dtype, shape.clone(), data));
    }
    // Bits that are not whole bytes: refused, saying so.
    let dump = write(dir.path(), "odd.bin", &[0, 0]);
    let out = dir.path().join("odd.safetensors");
    for (dtype, shape) in [("F4", "3"), ("F6_E2M3", "2"), ("F6_E3M2", "1,5")] {
        let o = run(&[
            &dump,
            &"--raw-dtype",
            &dtype,
            &"--raw-shape",
            &shape,
            &"-o",
            &out,
        ]);
        assert!(!o.status.success(), "{dtype} {shape}");
        assert!(
            stderr(&o).contains("whole number of bytes"),
            "{dtype} {shape}: {}",
            stderr(&o)
        );
        assert!(!out.exists());
    }
}

#[test]
fn scalar_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let dump = write(dir.path(), "s.bin", &7.5f64.to_le_bytes());
    for shape in ["scalar", "", "()"] {
        let out = dir.path().join("s.safetensors");
        ok(&run(&[
            &dump,
            &"--raw-dtype",
            &"F64",
            &"--raw-shape",
            &shape,
            &"--name",
            &"x",
            &"-o",
            &out,
            &"--quiet",
        ]));
        assert_eq!(
            read_back(&out)["x"],
            (Dtype::F64, vec![], 7.5f64.to_le_bytes().to_vec()),
            "{shape:?}"
        );
    }
}

#[test]
fn parse_shape_forms() {
    assert_eq!(RawSpec::parse_shape("4,256").unwrap(), [4, 256]);
    assert_eq!(RawSpec::parse_shape(" 4 , 256 ").unwrap(), [4, 256]);
    assert_eq!(RawSpec::parse_shape("(2, 3)").unwrap(), [2, 3]);
    assert_eq!(RawSpec::parse_shape("[5]").unwrap(), [5]);
    assert_eq!(RawSpec::parse_shape("7,").unwrap(), [7]);
    assert_eq!(RawSpec::parse_shape("0,3").unwrap(), [0, 3]);
    assert!(RawSpec::parse_shape("scalar").unwrap().is_empty());
    assert!(RawSpec::parse_shape("").unwrap().is_empty());
    for bad in ["4,x", "-1", "1.5", "4;5"] {
        let e = RawSpec::parse_shape(bad).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Usage(_)), "{bad}: {e}");
    }
}

#[test]
fn offset_skips_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(1, 4 * 12);
    let mut dump = pattern(2, 13); // a 13-byte header of some other tool
    dump.extend_from_slice(&data);
    let dump = write(dir.path(), "d.bin", &dump);
    let out = dir.path().join("d.safetensors");
    ok(&run(&[
        &dump,
        &"--raw-dtype",
        &"I32",
        &"--raw-shape",
        &"3,4",
        &"--raw-offset",
        &"13",
        &"--name",
        &"w",
        &"-o",
        &out,
        &"--quiet",
    ]));
    assert_eq!(read_back(&out)["w"], (Dtype::I32, vec![3, 4], data));
    // The offset counts toward the size the dump must have.
    let o = run(&[
        &dump,
        &"--raw-dtype",
        &"I32",
        &"--raw-shape",
        &"3,4",
        &"--raw-offset",
        &"12",
        &"--name",
        &"w",
        &"-o",
        &out,
    ]);
    let line = fails(&o, 1);
    assert!(line.contains("61 bytes but 60"), "{line}");
}

#[test]
fn size_mismatch_both_ways_names_both_counts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.safetensors");
    // 4,8 F16 needs 64 bytes.
    for (len, fragment, hint) in [
        (63usize, "data is 63 bytes but 64 are expected", false),
        (0, "data is 0 bytes but 64 are expected", false),
        (65, "data is 65 bytes but 64 are expected", true),
        (1000, "data is 1000 bytes but 64 are expected", true),
    ] {
        let dump = write(dir.path(), "m.bin", &pattern(3, len));
        let o = run(&[
            &dump,
            &"--raw-dtype",
            &"F16",
            &"--raw-shape",
            &"4,8",
            &"-o",
            &out,
        ]);
        let line = fails(&o, 1);
        assert!(line.contains(fragment), "{line}");
        assert!(line.contains("m.bin"), "names the input: {line}");
        assert_eq!(line.contains("--raw-allow-trailing"), hint, "{line}");
        assert!(!out.exists());
    }
}

#[test]
fn allow_trailing_accepts_extra_bytes_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.safetensors");
    let data = pattern(4, 100);
    let dump = write(dir.path(), "t.bin", &data);
    ok(&run(&[
        &dump,
        &"--raw-dtype",
        &"U8",
        &"--raw-shape",
        &"90",
        &"--raw-allow-trailing",
        &"--name",
        &"x",
        &"-o",
        &out,
        &"--quiet",
    ]));
    assert_eq!(read_back(&out)["x"].2, &data[..90]);
    // Exactly right is fine too; short is still refused.
    ok(&run(&[
        &dump,
        &"--raw-dtype",
        &"U8",
        &"--raw-shape",
        &"100",
        &"--raw-allow-trailing",
        &"-o",
        &out,
        &"--quiet",
    ]));
    let o = run(&[
        &dump,
        &"--raw-dtype",
        &"U8",
        &"--raw-shape",
        &"101",
        &"--raw-allow-trailing",
        &"-o",
        &out,
    ]);
    assert!(fails(&o, 1).contains("data is 100 bytes but 101 are expected"));
}

/// A manifest row: name, dtype, shape, offset.
type Entry<'a> = (&'a str, &'a str, &'a [u64], u64);

fn manifest_json(entries: &[Entry<'_>]) -> String {
    let items: Vec<String> = entries
        .iter()
        .map(|(name, dtype, shape, offset)| {
            format!(
                r#"{{"name": "{name}", "dtype": "{dtype}", "shape": {shape:?}, "offset": {offset}}}"#
            )
        })
        .collect();
    format!("[{}]", items.join(", "))
}

#[test]
fn manifest_in_any_order_with_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let dump = pattern(5, 200);
    let dump_path = write(dir.path(), "multi.bin", &dump);
    // Listed out of offset order; a gap at [40, 48) and a prefix at [0, 8).
    let entries: [Entry<'_>; 5] = [
        ("c", "F64", &[2, 2], 168),
        ("a", "F32", &[2, 4], 8),
        ("empty", "I64", &[0], 48),
        ("b", "BF16", &[59], 48),
        ("bits", "F4", &[4], 166),
    ];
    let manifest = write(dir.path(), "m.json", manifest_json(&entries).as_bytes());
    for order in ["little", "big"] {
        let out = dir.path().join(format!("multi-{order}.safetensors"));
        ok(&run(&[
            &dump_path,
            &"--raw-manifest",
            &manifest,
            &"--raw-byte-order",
            &order,
            &"-o",
            &out,
            &"--quiet",
        ]));
        let got = read_back(&out);
        assert_eq!(got.len(), entries.len());
        for (name, dtype, shape, offset) in entries {
            let dtype: Dtype = dtype.parse().unwrap();
            let len = dtype.byte_len(shape).unwrap() as usize;
            let bytes = &dump[offset as usize..offset as usize + len];
            let want = if order == "big" {
                swapped(dtype, bytes)
            } else {
                bytes.to_vec()
            };
            assert_eq!(got[name], (dtype, shape.to_vec(), want), "{name} {order}");
        }
    }
    // The dump ends at the last tensor's end: one more byte is refused.
    let longer = write(dir.path(), "multi.bin", &pattern(5, 201));
    let out = dir.path().join("x.safetensors");
    let line = fails(
        &run(&[&longer, &"--raw-manifest", &manifest, &"-o", &out]),
        1,
    );
    assert!(
        line.contains("data is 201 bytes but 200 are expected"),
        "{line}"
    );
}

#[test]
fn overlapping_ranges_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dump = write(dir.path(), "o.bin", &pattern(6, 64));
    let out = dir.path().join("o.safetensors");
    let cases: [&[Entry<'_>]; 3] = [
        &[("a", "F32", &[4], 0), ("b", "F32", &[4], 8)],
        &[("late", "U8", &[4], 30), ("long", "U8", &[40], 0)],
        &[("same", "U8", &[4], 0), ("twin", "U8", &[4], 0)],
    ];
    for entries in cases {
        let manifest = write(dir.path(), "m.json", manifest_json(entries).as_bytes());
        let o = run(&[
            &dump,
            &"--raw-manifest",
            &manifest,
            &"--raw-allow-trailing",
            &"-o",
            &out,
        ]);
        let err = stderr(&o);
        assert!(!o.status.success(), "{entries:?}");
        assert!(err.contains("overlap"), "{err}");
        for (name, ..) in entries {
            assert!(err.contains(&format!("{name:?}")), "names {name}: {err}");
        }
        assert!(!out.exists());
    }
}

#[test]
fn bad_manifests_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let dump = write(dir.path(), "b.bin", &pattern(7, 16));
    let out = dir.path().join("b.safetensors");
    for text in [
        r#"[{"name": "a", "dtype": "F32", "shape": [4], "offset": 0, "extra": 1}]"#,
        r#"[{"name": "a", "dtype": "F99", "shape": [4]}]"#,
        r#"{"name": "a"}"#,
        "not json",
    ] {
        let manifest = write(dir.path(), "m.json", text.as_bytes());
        let o = run(&[&dump, &"--raw-manifest", &manifest, &"-o", &out]);
        let line = fails(&o, 2);
        assert!(line.contains("manifest"), "{line}");
    }
    // The offset may be left out: 0.
    let manifest = write(
        dir.path(),
        "m.json",
        br#"[{"name": "a", "dtype": "F32", "shape": [4]}]"#,
    );
    ok(&run(&[
        &dump,
        &"--raw-manifest",
        &manifest,
        &"-o",
        &out,
        &"--quiet",
    ]));
    assert_eq!(read_back(&out)["a"].2, pattern(7, 16));
}

#[test]
fn stdin_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.safetensors");
    // 8 MiB of F32 with a 5-byte prefix: more than one buffer and more than a pipe holds.
    let data = pattern(8, 8 << 20);
    let mut input = b"HEADR".to_vec();
    input.extend_from_slice(&data);
    let o = run_stdin(
        &[
            &"-",
            &"--raw-dtype",
            &"F32",
            &"--raw-shape",
            &"2048,1024",
            &"--raw-offset",
            &"5",
            &"--name",
            &"w",
            &"--buffer-size",
            &"1MiB",
            &"-o",
            &out,
        ],
        input,
    );
    ok(&o);
    assert!(!stderr(&o).contains("spool"), "no spooling: {}", stderr(&o));
    assert_eq!(read_back(&out)["w"], (Dtype::F32, vec![2048, 1024], data));
    // Big-endian from stdin, and to standard output.
    let small = pattern(9, 64);
    let o = run_stdin(
        &[
            &"-",
            &"--raw-dtype",
            &"U32",
            &"--raw-shape",
            &"16",
            &"--raw-byte-order",
            &"big",
            &"--name",
            &"u",
            &"-o",
            &"-",
        ],
        small.clone(),
    );
    ok(&o);
    let st = safetensors::SafeTensors::deserialize(&o.stdout).unwrap();
    assert_eq!(st.tensor("u").unwrap().data(), swapped(Dtype::U32, &small));
}

#[test]
fn stdin_size_mismatch_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.safetensors");
    let args = |shape: &'static str| -> Vec<String> {
        [
            "-",
            "--raw-dtype",
            "U16",
            "--raw-shape",
            shape,
            "--name",
            "x",
            "-o",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let with_out = |mut v: Vec<String>| {
        v.push(out.display().to_string());
        v
    };
    let go = |v: Vec<String>, input: Vec<u8>| {
        let refs: Vec<&dyn AsRef<std::ffi::OsStr>> =
            v.iter().map(|s| s as &dyn AsRef<std::ffi::OsStr>).collect();
        run_stdin(&refs, input)
    };
    // Short and long: both counts, as for a file.
    let line = fails(&go(with_out(args("10")), pattern(1, 15)), 1);
    assert!(
        line.contains("data is 15 bytes but 20 are expected"),
        "{line}"
    );
    assert!(!out.exists());
    let line = fails(&go(with_out(args("10")), pattern(1, 21)), 1);
    assert!(
        line.contains("data is 21 bytes but 20 are expected"),
        "{line}"
    );
    assert!(line.contains("--raw-allow-trailing"), "{line}");
    let line = fails(&go(with_out(args("10")), pattern(1, 100_000)), 1);
    assert!(
        line.contains("data is 100000 bytes but 20 are expected"),
        "{line}"
    );
    assert!(!out.exists());
    // With an offset, the counts are of the whole dump: short in the prefix,
    // in the tensor, and long.
    for (len, fragment) in [
        (3, "data is 3 bytes but 24 are expected"),
        (21, "data is 21 bytes but 24 are expected"),
        (30, "data is 30 bytes but 24 are expected"),
    ] {
        let mut v = with_out(args("10"));
        v.extend(["--raw-offset".to_string(), "4".to_string()]);
        let line = fails(&go(v, pattern(1, len)), 1);
        assert!(line.contains(fragment), "{line}");
    }
    // Long, allowed.
    let mut v = with_out(args("10"));
    v.push("--raw-allow-trailing".into());
    v.push("--quiet".into());
    let o = go(v.clone(), pattern(1, 1000));
    ok(&o);
    assert_eq!(read_back(&out)["x"].2, pattern(1, 1000)[..20]);
    let line = fails(&go(v, pattern(1, 19)), 1);
    assert!(
        line.contains("data is 19 bytes but 20 are expected"),
        "{line}"
    );
    // No name: a usage error.
    let o = run_stdin(
        &[
            &"-",
            &"--raw-dtype",
            &"U8",
            &"--raw-shape",
            &"4",
            &"-o",
            &out,
        ],
        vec![1, 2, 3, 4],
    );
    assert!(fails(&o, 2).contains("--name"));
}

#[test]
fn stdin_manifest_is_spooled() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(10, 48);
    let entries: [Entry<'_>; 2] = [("b", "U8", &[16], 32), ("a", "I64", &[4], 0)];
    let manifest = write(dir.path(), "m.json", manifest_json(&entries).as_bytes());
    let out = dir.path().join("m.safetensors");
    let o = run_stdin(
        &[&"-", &"--raw-manifest", &manifest, &"-o", &out],
        data.clone(),
    );
    ok(&o);
    assert!(stderr(&o).contains("spool"), "{}", stderr(&o));
    let got = read_back(&out);
    assert_eq!(got["a"], (Dtype::I64, vec![4], data[..32].to_vec()));
    assert_eq!(got["b"], (Dtype::U8, vec![16], data[32..].to_vec()));
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn gzip_compressed_dump() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(11, 4 * 3000);
    let gz = write(dir.path(), "dump.bin.gz", &gzip(&data));
    let out = dir.path().join("g.safetensors");
    ok(&run(&[
        &gz,
        &"--raw-dtype",
        &"F32",
        &"--raw-shape",
        &"3000",
        &"-o",
        &out,
        &"--quiet",
    ]));
    // Named after the file, both extensions gone.
    assert_eq!(
        read_back(&out)["dump"],
        (Dtype::F32, vec![3000], data.clone())
    );
    // Wrong sizes are caught in the decompressed stream too, with both counts.
    for (shape, fragment) in [
        ("2999", "data is 12000 bytes but 11996 are expected"),
        ("3001", "data is 12000 bytes but 12004 are expected"),
    ] {
        let o = run(&[
            &gz,
            &"--raw-dtype",
            &"F32",
            &"--raw-shape",
            &shape,
            &"-o",
            &out,
        ]);
        let line = fails(&o, 1);
        assert!(line.contains(fragment), "{line}");
    }
    // A multi-tensor manifest over a compressed dump.
    let entries: [Entry<'_>; 2] = [("hi", "F32", &[1000], 8000), ("lo", "F64", &[1000], 0)];
    let manifest = write(dir.path(), "m.json", manifest_json(&entries).as_bytes());
    let out2 = dir.path().join("g2.safetensors");
    ok(&run(&[
        &gz,
        &"--raw-manifest",
        &manifest,
        &"-o",
        &out2,
        &"--quiet",
    ]));
    let got = read_back(&out2);
    assert_eq!(got["lo"].2, data[..8000]);
    assert_eq!(got["hi"].2, data[8000..]);
}

/// Raw bytes may begin with anything: a gzip magic in a dump not named .gz is data.
#[test]
fn gzip_magic_in_an_uncompressed_dump_is_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = vec![0x1f, 0x8b, 0x08, 0x00];
    data.extend(pattern(12, 12));
    let dump = write(dir.path(), "magic.bin", &data);
    let out = dir.path().join("m.safetensors");
    ok(&run(&[
        &dump,
        &"--raw-dtype",
        &"U8",
        &"--raw-shape",
        &"16",
        &"-o",
        &out,
        &"--quiet",
    ]));
    assert_eq!(read_back(&out)["magic"].2, data);
}

/// The library: a RawSource from a file, through convert_sources.
#[test]
fn raw_source_in_the_library() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(13, 40);
    let path = write(dir.path(), "lib.bin", &data);
    let spec = RawSpec {
        tensors: vec![
            RawTensor {
                name: "y".into(),
                dtype: Dtype::I16,
                shape: vec![8],
                offset: 24,
            },
            RawTensor {
                name: "x".into(),
                dtype: Dtype::U32,
                shape: vec![2, 3],
                offset: 0,
            },
        ],
        big_endian: true,
        ..RawSpec::default()
    };
    let file = std::fs::File::open(&path).unwrap();
    let src = RawSource::from_file(file, 40, "lib.bin", &spec).unwrap();
    let names: Vec<&str> = src.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 2);
    let out = dir.path().join("lib.safetensors");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut sources: Vec<Box<dyn Source>> = vec![Box::new(src)];
    let opts = ConvertOptions::default().sync(false);
    rt.block_on(convert_sources(
        &mut sources,
        &Out::File(out.clone()),
        &opts,
    ))
    .unwrap();
    let got = read_back(&out);
    assert_eq!(got["x"].2, swapped(Dtype::U32, &data[..24]));
    assert_eq!(got["y"].2, swapped(Dtype::I16, &data[24..]));
    // A length that does not match: the error carries both counts.
    let file = std::fs::File::open(&path).unwrap();
    let e = RawSource::from_file(file, 39, "lib.bin", &spec).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::DataLength {
                expected: 40,
                actual: 39
            }
        ),
        "{e}"
    );
}
