//! Every input of `fixtures/cases.json` through `convert`: the output must
//! equal the Python reference's file byte for byte, or the input must be
//! refused with the right error kind, naming the input, and leave no file.

use crate::support;

use std::path::PathBuf;

use safetensors_stream::convert::{convert, ConvertOptions, Output};
use safetensors_stream::source::{NpyOptions, SourceOptions};
use safetensors_stream::{Category, Error, ErrorKind, HeaderError};
use support::numpy::{block_on, cases, dir_names, fixtures, tensors_of, Case};

fn options(source: SourceOptions) -> ConvertOptions {
    ConvertOptions::default().source(source).sync(false)
}

/// Converts `inputs` into `out.safetensors` in a fresh temp dir.
fn run(
    inputs: &[PathBuf],
    source: SourceOptions,
) -> (tempfile::TempDir, PathBuf, Result<(), Error>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let r = block_on(convert(
        inputs,
        &Output::File(out.clone()),
        &options(source),
    ));
    (dir, out, r.map(|_| ()))
}

/// Options a case needs: the two archives with extra members are converted
/// with `skip_non_npy`, as their expected outputs say.
fn case_options(c: &Case) -> SourceOptions {
    let skip = matches!(c.file_name(), "extra_member.npz" | "dir_entry.npz");
    SourceOptions::default().npy(NpyOptions::default().skip_non_npy(skip))
}

/// The error kind each refused fixture must give.
fn refusal_matches(file: &str, kind: &ErrorKind) -> bool {
    match file {
        "object.npy"
        | "structured.npy"
        | "structured_subarray_field.npy"
        | "subarray.npy"
        | "unicode.npy"
        | "bytes.npy"
        | "datetime64.npy"
        | "timedelta64.npy"
        | "void.npy"
        | "bfloat16.npy"
        | "complex128.npy"
        | "longdouble.npy"
        | "object_member.npz" => {
            matches!(kind, ErrorKind::UnsupportedDtype { .. })
        }
        "truncated.npy" | "trailing_bytes.npy" => matches!(kind, ErrorKind::DataLength { .. }),
        "huge_header_len.npy" | "bad_version.npy" => matches!(kind, ErrorKind::NpyHeader(_)),
        // `\x93NUMPZ` is not .npy magic: the input is not recognised at all.
        "bad_magic.npy" => matches!(kind, ErrorKind::UnknownFormat(_) | ErrorKind::NpyHeader(_)),
        other => panic!("no expected error kind for refused fixture {other}"),
    }
}

/// What the descr in the message must be, for dtype refusals.
fn refused_descr(file: &str) -> Option<&'static str> {
    Some(match file {
        "object.npy" | "object_member.npz" => "|O",
        "unicode.npy" => "<U5",
        "bytes.npy" => "|S3",
        "datetime64.npy" => "<M8[D]",
        "timedelta64.npy" => "<m8[s]",
        "void.npy" => "|V4",
        "bfloat16.npy" => "<V2",
        "complex128.npy" => "<c16",
        "longdouble.npy" => "<f16",
        _ => return None,
    })
}

fn check_case(c: &Case) -> Result<(), String> {
    let input = c.input_path();
    let (dir, out, r) = run(std::slice::from_ref(&input), case_options(c));
    match (&c.expected, &c.error) {
        (Some(expected), None) => {
            r.map_err(|e| format!("refused: {e}"))?;
            let want = std::fs::read(fixtures().join(expected)).unwrap();
            let got = std::fs::read(&out).unwrap();
            if got != want {
                let (g, w) = (tensors_of(&got), tensors_of(&want));
                return Err(format!(
                    "output differs from {expected} ({} vs {} bytes); tensors equal: {}",
                    got.len(),
                    want.len(),
                    g == w
                ));
            }
            if dir_names(dir.path()) != ["out.safetensors"] {
                return Err(format!("leftovers: {:?}", dir_names(dir.path())));
            }
        }
        (None, Some(why)) => {
            let e = match r {
                Ok(()) => return Err(format!("accepted, but must be refused: {why}")),
                Err(e) => e,
            };
            if !refusal_matches(c.file_name(), e.kind()) {
                return Err(format!("wrong error kind {:?} ({e})", e.kind()));
            }
            if e.category() != Category::BadInput {
                return Err(format!("category {:?}, not BadInput ({e})", e.category()));
            }
            if e.input() != Some(input.display().to_string().as_str()) {
                return Err(format!("error does not name the input: {e}"));
            }
            if let Some(descr) = refused_descr(c.file_name()) {
                if !e.to_string().contains(descr) {
                    return Err(format!("message does not name the descr {descr}: {e}"));
                }
            }
            if c.kind == "npz" && e.tensor() != Some("obj") {
                return Err(format!("error does not name the member's tensor: {e}"));
            }
            if !dir_names(dir.path()).is_empty() {
                return Err(format!("files left behind: {:?}", dir_names(dir.path())));
            }
        }
        // An input with nothing expected of it (an input file for other tests):
        // it must convert; a canonical safetensors input comes back unchanged.
        (None, None) => {
            r.map_err(|e| format!("refused: {e}"))?;
            if input.extension().is_some_and(|x| x == "safetensors")
                && std::fs::read(&out).unwrap() != std::fs::read(&input).unwrap()
            {
                return Err("a canonical safetensors input changed".into());
            }
        }
        (Some(_), Some(_)) => return Err("case has both expected and error".into()),
    }
    Ok(())
}

fn run_kind(kind: &str) {
    let all = cases();
    let selected: Vec<&Case> = all.iter().filter(|c| c.kind == kind).collect();
    assert!(!selected.is_empty(), "no {kind} cases");
    let failures: Vec<String> = selected
        .iter()
        .filter_map(|c| check_case(c).err().map(|e| format!("{}: {e}", c.input)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} {kind} cases failed:\n{}",
        failures.len(),
        selected.len(),
        failures.join("\n")
    );
}

#[test]
fn every_case_is_covered() {
    let kinds: Vec<String> = cases().into_iter().map(|c| c.kind).collect();
    for k in &kinds {
        assert!(
            ["npy", "npz", "compressed", "example"].contains(&k.as_str()),
            "unknown case kind {k}"
        );
    }
    assert!(cases().len() >= 81, "cases.json lost rows");
}

#[test]
fn npy_cases() {
    run_kind("npy");
}

#[test]
fn npz_cases() {
    run_kind("npz");
}

#[test]
fn compressed_cases() {
    run_kind("compressed");
}

#[test]
fn example_cases() {
    run_kind("example");
}

fn npz(name: &str) -> PathBuf {
    fixtures().join("npz").join(name)
}

#[test]
fn non_npy_member_is_refused_without_skip() {
    let input = npz("extra_member.npz");
    let (dir, _, r) = run(std::slice::from_ref(&input), SourceOptions::default());
    let e = r.expect_err("readme.txt must be refused");
    assert!(matches!(e.kind(), ErrorKind::Zip(_)), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("readme.txt"), "{msg}");
    assert!(msg.contains("--skip-non-npy"), "{msg}");
    assert_eq!(e.input(), Some(input.display().to_string().as_str()));
    assert!(dir_names(dir.path()).is_empty());
}

#[test]
fn directory_entries_need_no_skip() {
    let input = npz("dir_entry.npz");
    let (_dir, out, r) = run(std::slice::from_ref(&input), SourceOptions::default());
    r.unwrap();
    let want = std::fs::read(npz("expected/dir_entry.safetensors")).unwrap();
    assert_eq!(std::fs::read(out).unwrap(), want);
}

#[test]
fn name_option_renames_a_single_array() {
    for input in [
        fixtures().join("npy/dtype_f4.npy"),
        fixtures().join("compressed/arr.npy.zst"),
    ] {
        let source = SourceOptions::default().name(Some("renamed.weight".into()));
        let (_dir, out, r) = run(std::slice::from_ref(&input), source);
        r.unwrap();
        let got = tensors_of(&std::fs::read(out).unwrap());
        assert_eq!(got.keys().collect::<Vec<_>>(), ["renamed.weight"]);
    }
}

#[test]
fn tensor_name_strips_npy_and_compression_suffixes() {
    let dir = tempfile::tempdir().unwrap();
    let gz = std::fs::read(fixtures().join("compressed/arr.npy.gz")).unwrap();
    let input = dir.path().join("layer.0.npy.gz");
    std::fs::write(&input, gz).unwrap();
    let (_d, out, r) = run(&[input], SourceOptions::default());
    r.unwrap();
    let got = tensors_of(&std::fs::read(out).unwrap());
    assert_eq!(got.keys().collect::<Vec<_>>(), ["layer.0"]);
}

/// Many inputs into one file: each tensor equals its own expected output's.
#[test]
fn several_inputs_into_one_file() {
    let names = [
        "dtype_f4",
        "dtype_c8_be",
        "fortran_3d_be",
        "scalar_i8_be",
        "empty_3d",
        "version_3_0",
    ];
    let inputs: Vec<PathBuf> = names
        .iter()
        .map(|n| fixtures().join(format!("npy/{n}.npy")))
        .chain([npz("mixed_compressed.npz"), npz("names.npz")])
        .collect();
    let (_dir, out, r) = run(&inputs, SourceOptions::default());
    r.unwrap();
    let got = tensors_of(&std::fs::read(out).unwrap());
    let mut want = std::collections::BTreeMap::new();
    for n in names {
        want.extend(tensors_of(
            &std::fs::read(fixtures().join(format!("npy/expected/{n}.safetensors"))).unwrap(),
        ));
    }
    for n in ["mixed_compressed", "names"] {
        want.extend(tensors_of(
            &std::fs::read(npz(&format!("expected/{n}.safetensors"))).unwrap(),
        ));
    }
    assert_eq!(got, want);
}

/// Two inputs giving the same tensor name: a usage error, nothing written.
#[test]
fn same_name_from_two_inputs_is_refused() {
    let a = npz("mixed.npz");
    let b = npz("mixed_compressed.npz");
    let (dir, _, r) = run(&[a, b], SourceOptions::default());
    let e = r.unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::DuplicateTensor { .. })
        ),
        "{e:?}"
    );
    assert!(dir_names(dir.path()).is_empty());
}
