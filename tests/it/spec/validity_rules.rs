//! One hand-built bad file per validity rule of the spec, each asserting the
//! specific error kind (and byte offset where the error carries one); the
//! strict-only rules also checked to pass in reference mode. Then a sparse
//! 10 GB file, validated while reading under 1 MB of it.

use crate::support;

use std::fs::File;
use std::io::{BufReader, Write};

use safetensors_stream::header::read_header;
use safetensors_stream::header::{encode, parse_file_bytes, Order, Rules, TensorMeta};
use safetensors_stream::index::Checkpoint;
use safetensors_stream::source::read_file_header;
use safetensors_stream::Span;
use safetensors_stream::{Dtype, Error, ErrorKind, HeaderError};
use support::reference::{raw_file, raw_file_bytes, reference_read, CountingReader};

const BOTH: [Rules; 2] = [Rules::STRICT, Rules::REFERENCE];

/// The error of `file` under `rules`; also checks that the reference refuses
/// the file (these are the format's own rules).
fn err(file: &[u8], rules: Rules) -> Error {
    let e = parse_file_bytes(file, rules).expect_err("must be refused");
    // The I/O driver gives the same error.
    let via_reader = read_header(&mut &file[..], file.len() as u64, rules).unwrap_err();
    assert_eq!(format!("{e:?}"), format!("{via_reader:?}"));
    e
}

/// Refused in both modes and by the reference; returns the strict error.
fn refused_everywhere(file: &[u8]) -> Error {
    assert!(
        !reference_read(file).accepted(),
        "the reference accepts {}",
        support::reference::show(file)
    );
    let strict = err(file, Rules::STRICT);
    let reference = err(file, Rules::REFERENCE);
    assert_eq!(
        std::mem::discriminant(strict.kind()),
        std::mem::discriminant(reference.kind()),
        "strict {strict} vs reference {reference}"
    );
    strict
}

fn assert_json_error(file: &[u8], needle: &str) {
    for rules in BOTH {
        let e = err(file, rules);
        match e.kind() {
            ErrorKind::Header(HeaderError::HeaderJson(json)) => {
                let msg = json.to_string();
                assert!(msg.contains(needle), "{rules:?}: {msg:?} lacks {needle:?}");
                // serde_json's own error is under it, reached from ours
                // (ours -> HeaderError -> JsonError -> serde_json's).
                let header = std::error::Error::source(&e).expect("the header error");
                assert!(header.is::<HeaderError>(), "{e:?}");
                let under = header.source().and_then(|s| s.source());
                assert!(under.is_some_and(|s| s.is::<serde_json::Error>()), "{e:?}");
            }
            other => panic!("{rules:?}: expected HeaderJson, got {other:?}"),
        }
    }
    assert!(!reference_read(file).accepted());
}

/// A header with entries `(name, dtype, shape, begin, end)`, space-padded
/// to a multiple of 8, then `data_len` bytes.
fn file_of(entries: &[(&str, &str, &[u64], u64, u64)], data_len: usize) -> Vec<u8> {
    let body: Vec<String> = entries
        .iter()
        .map(|(n, d, s, b, e)| {
            format!(
                r#"{}:{{"dtype":"{d}","shape":{s:?},"data_offsets":[{b},{e}]}}"#,
                serde_json::to_string(n).unwrap()
            )
        })
        .collect();
    padded(&format!("{{{}}}", body.join(",")), data_len)
}

fn padded(json: &str, data_len: usize) -> Vec<u8> {
    let mut text = json.as_bytes().to_vec();
    text.resize(text.len().next_multiple_of(8), b' ');
    raw_file_bytes(&text, data_len)
}

// ---- the file's frame -----------------------------------------------------------

#[test]
fn file_shorter_than_8_bytes() {
    for len in [0, 1, 7] {
        let file = vec![0u8; len];
        let e = refused_everywhere(&file);
        assert!(
            matches!(e.kind(), ErrorKind::Header(HeaderError::FileTooShort { len: l }) if *l == len as u64),
            "{e:?}"
        );
        assert_eq!(e.offset(), Some(0));
    }
}

#[test]
fn header_length_over_100_000_000() {
    for n in [100_000_001, 1 << 40, u64::MAX] {
        let mut file = n.to_le_bytes().to_vec();
        file.extend_from_slice(b"{}      ");
        let e = refused_everywhere(&file);
        assert!(
            matches!(e.kind(), ErrorKind::Header(HeaderError::HeaderTooLarge { len, limit: 100_000_000 }) if *len == n),
            "{e:?}"
        );
        assert_eq!(e.offset(), Some(0));
        // Refused on the prefix alone: only 8 bytes are read.
        let mut r = CountingReader::new(&file[..]);
        read_header(&mut r, file.len() as u64, Rules::STRICT).unwrap_err();
        assert_eq!(r.count, 8);
    }
    // Exactly the limit is allowed by this rule (and fails the next one here).
    let mut file = 100_000_000u64.to_le_bytes().to_vec();
    file.extend_from_slice(b"{}");
    let e = refused_everywhere(&file);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::HeaderPastEnd { .. })
        ),
        "{e:?}"
    );
}

#[test]
fn header_past_end_of_file() {
    let mut file = 100u64.to_le_bytes().to_vec();
    file.extend_from_slice(&[b' '; 50]);
    let e = refused_everywhere(&file);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::HeaderPastEnd {
                len: 100,
                available: 50
            })
        ),
        "{e:?}"
    );
    assert_eq!(e.offset(), Some(0));
    // Nothing was allocated or read on N's claim.
    let mut r = CountingReader::new(&file[..]);
    read_header(&mut r, file.len() as u64, Rules::STRICT).unwrap_err();
    assert_eq!(r.count, 8);
}

#[test]
fn header_not_utf8() {
    let mut json = br#"{"ab":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#.to_vec();
    json[3] = 0xff; // the `b` of the name
    let file = raw_file_bytes(&json, 1);
    let e = refused_everywhere(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::HeaderNotUtf8)),
        "{e:?}"
    );
    assert_eq!(e.offset(), Some(8 + 3));
    // A truncated multi-byte sequence at the end of the header.
    let file = raw_file_bytes(b"{}     \xc3", 0);
    let e = refused_everywhere(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::HeaderNotUtf8)),
        "{e:?}"
    );
    assert_eq!(e.offset(), Some(8 + 7));
}

#[test]
fn header_not_json() {
    let file = padded(r#"{"a" 1}"#, 0);
    for rules in BOTH {
        let e = err(&file, rules);
        assert!(
            matches!(e.kind(), ErrorKind::Header(HeaderError::HeaderJson(_))),
            "{e:?}"
        );
        assert_eq!(e.offset(), Some(8 + 5), "{rules:?}: at the `1`");
    }
    assert!(!reference_read(&file).accepted());
    assert_json_error(&padded(r#"{"a":"#, 0), "EOF");
    assert_json_error(&raw_file("", 0), "EOF");
    // Not starting with `{`: strict names its own rule, reference the JSON's.
    let file = padded("not json", 0);
    assert!(matches!(
        err(&file, Rules::STRICT).kind(),
        ErrorKind::Header(HeaderError::HeaderNotBrace(b'n'))
    ));
    assert!(matches!(
        err(&file, Rules::REFERENCE).kind(),
        ErrorKind::Header(HeaderError::HeaderJson(_))
    ));
    assert!(!reference_read(&file).accepted());
}

// ---- the schema -------------------------------------------------------------------

#[test]
fn wrong_schema_variants() {
    let entry = |v: &str| padded(&format!(r#"{{"a":{v}}}"#), 4);
    // Not an object at the top.
    let file = padded("[]", 0);
    assert!(matches!(
        err(&file, Rules::STRICT).kind(),
        ErrorKind::Header(HeaderError::HeaderNotBrace(b'['))
    ));
    assert!(matches!(
        err(&file, Rules::REFERENCE).kind(),
        ErrorKind::Header(HeaderError::HeaderJson(_))
    ));
    assert!(!reference_read(&file).accepted());
    // A tensor's value is not an entry.
    assert_json_error(&entry("5"), "invalid type");
    assert_json_error(&entry("null"), "invalid type");
    assert_json_error(&entry(r#""F32""#), "invalid type");
    // Missing fields.
    assert_json_error(
        &entry(r#"{"shape":[4],"data_offsets":[0,4]}"#),
        "missing field `dtype`",
    );
    assert_json_error(
        &entry(r#"{"dtype":"U8","data_offsets":[0,4]}"#),
        "missing field `shape`",
    );
    assert_json_error(
        &entry(r#"{"dtype":"U8","shape":[4]}"#),
        "missing field `data_offsets`",
    );
    // data_offsets not two integers.
    for bad in ["[0]", "[0,4,4]", "[]", "4", r#"{"0":0}"#, r#"[0,"4"]"#] {
        let v = format!(r#"{{"dtype":"U8","shape":[4],"data_offsets":{bad}}}"#);
        assert_json_error(&entry(&v), "");
    }
    // Negative and non-integer numbers, in offsets and shapes.
    for bad in ["-1", "-0", "1.5", "4.0", "1e0", "18446744073709551616"] {
        let v = format!(r#"{{"dtype":"U8","shape":[4],"data_offsets":[0,{bad}]}}"#);
        assert_json_error(&entry(&v), "");
        let v = format!(r#"{{"dtype":"U8","shape":[{bad}],"data_offsets":[0,4]}}"#);
        assert_json_error(&entry(&v), "");
    }
    assert_json_error(
        &entry(r#"{"dtype":"U8","shape":4,"data_offsets":[0,4]}"#),
        "invalid type",
    );
    // A repeated field is refused by the reference's derived struct too.
    let dup = entry(r#"{"dtype":"U8","dtype":"U8","shape":[4],"data_offsets":[0,4]}"#);
    assert!(!reference_read(&dup).accepted());
    for rules in BOTH {
        assert!(
            matches!(err(&dup, rules).kind(), ErrorKind::Header(HeaderError::DuplicateKey { key, .. }) if key == "dtype")
        );
    }
}

#[test]
fn unknown_dtype() {
    for bad in ["F33", "f32", "", "float32", "BOOL "] {
        let file = file_of(&[("a", bad, &[4], 0, 4)], 4);
        assert_json_error(&file, bad);
    }
    // Not a string at all.
    let file = padded(r#"{"a":{"dtype":5,"shape":[4],"data_offsets":[0,4]}}"#, 4);
    assert_json_error(&file, "");
}

#[test]
fn metadata_value_not_a_string() {
    for md in [
        r#"{"k":1}"#,
        r#"{"k":null}"#,
        r#"{"k":["v"]}"#,
        r#"{"k":{}}"#,
    ] {
        let file = padded(&format!(r#"{{"__metadata__":{md}}}"#), 0);
        assert_json_error(&file, "invalid type");
    }
    // A tensor named __metadata__ is read as metadata, and is not strings.
    let file = padded(
        r#"{"__metadata__":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
        1,
    );
    assert_json_error(&file, "invalid type");
    // Metadata that is not an object.
    assert_json_error(&padded(r#"{"__metadata__":"x"}"#, 0), "invalid type");
    assert_json_error(&padded(r#"{"__metadata__":[]}"#, 0), "invalid type");
    // `__metadata__` twice is refused by the reference (serde: duplicate field).
    let file = padded(r#"{"__metadata__":{},"__metadata__":{}}"#, 0);
    assert!(!reference_read(&file).accepted());
    for rules in BOTH {
        assert!(matches!(
            err(&file, rules).kind(),
            ErrorKind::Header(HeaderError::DuplicateKey { key, within }) if key == "__metadata__" && within == "the header"
        ));
    }
}

/// `null` metadata is the reference's `None`; strict mode wants an object.
#[test]
fn metadata_null_is_reference_only() {
    let file = padded(r#"{"__metadata__":null}"#, 0);
    assert!(reference_read(&file).accepted());
    let h = parse_file_bytes(&file, Rules::REFERENCE).unwrap();
    assert_eq!(h.metadata, None);
    assert!(matches!(
        err(&file, Rules::STRICT).kind(),
        ErrorKind::Header(HeaderError::HeaderJson(_))
    ));
}

// ---- the layout ---------------------------------------------------------------------

#[test]
fn offsets_inverted() {
    let file = file_of(&[("a", "U8", &[4], 4, 0)], 0);
    let e = refused_everywhere(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::InvertedOffsets { tensor, span: Span(4, 0) }) if tensor == "a"),
        "{e:?}"
    );
    assert_eq!(
        e.kind().to_string(),
        r#"tensor "a" has data_offsets [4,0) with end before begin"#
    );
}

#[test]
fn gap_between_tensors() {
    let file = file_of(&[("a", "U8", &[4], 0, 4), ("b", "U8", &[4], 8, 12)], 12);
    let e = refused_everywhere(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::Gap { begin: 4, end: 8, next }) if next == "b"),
        "{e:?}"
    );
    // A hole before the first tensor.
    let file = file_of(&[("a", "U8", &[4], 4, 8)], 8);
    let e = refused_everywhere(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::Gap { begin: 0, end: 4, next }) if next == "a"),
        "{e:?}"
    );
}

#[test]
fn overlap_names_both_tensors() {
    let file = file_of(&[("b", "U8", &[16], 8, 24), ("a", "U8", &[16], 0, 16)], 24);
    let e = refused_everywhere(&file);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::Overlap { first, first_span: Span(0, 16), second, second_span: Span(8, 24) })
                if first == "a" && second == "b"
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        r#"tensors "a" [0,16) and "b" [8,24) overlap"#
    );
    assert_eq!(
        e.with_input("model.safetensors").to_string(),
        r#"model.safetensors: tensors "a" [0,16) and "b" [8,24) overlap"#
    );
    // The same range twice overlaps too.
    let file = file_of(&[("a", "U8", &[4], 0, 4), ("b", "U8", &[4], 0, 4)], 4);
    let e = refused_everywhere(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::Overlap { .. })),
        "{e:?}"
    );
}

#[test]
fn shape_overflow() {
    // The element count overflows.
    let file = file_of(&[("a", "U8", &[1 << 63, 4], 0, 0)], 0);
    let e = refused_everywhere(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::ShapeOverflow { tensor, dtype: Dtype::U8, .. }) if tensor == "a"),
        "{e:?}"
    );
    // The count fits but the bits do not.
    let file = file_of(&[("a", "U64", &[1 << 58], 0, 0)], 0);
    let e = refused_everywhere(&file);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::ShapeOverflow { .. })
        ),
        "{e:?}"
    );
    // Left to right, as the reference: a later 0 does not save it.
    let file = file_of(&[("a", "U8", &[1 << 63, 4, 0], 0, 0)], 0);
    let e = refused_everywhere(&file);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::ShapeOverflow { .. })
        ),
        "{e:?}"
    );
    // While a 0 first does.
    let file = file_of(&[("a", "U8", &[0, 1 << 63, 4], 0, 0)], 0);
    assert!(parse_file_bytes(&file, Rules::STRICT).is_ok());
    assert!(reference_read(&file).accepted());
}

#[test]
fn sub_byte_counts_must_fill_whole_bytes() {
    let file = file_of(&[("f", "F4", &[3], 0, 2)], 2);
    let e = refused_everywhere(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::NotWholeBytes { tensor, dtype: Dtype::F4, bits: 12, .. }) if tensor == "f"),
        "{e:?}"
    );
    let file = file_of(&[("f", "F6_E2M3", &[2], 0, 2)], 2);
    let e = refused_everywhere(&file);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::NotWholeBytes { bits: 12, .. })
        ),
        "{e:?}"
    );
    // Even counts are fine.
    let file = file_of(&[("f", "F4", &[4], 0, 2), ("g", "F6_E3M2", &[4], 2, 5)], 5);
    assert!(parse_file_bytes(&file, Rules::STRICT).is_ok());
    assert!(reference_read(&file).accepted());
}

#[test]
fn range_length_must_match_dtype_and_shape() {
    let file = file_of(&[("a", "F32", &[3], 0, 8)], 8);
    let e = refused_everywhere(&file);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::RangeLength { tensor, dtype: Dtype::F32, span: Span(0, 8), expected: 12, .. })
                if tensor == "a"
        ),
        "{e:?}"
    );
    // A scalar is one element, not zero.
    let file = file_of(&[("s", "F64", &[], 0, 0)], 0);
    let e = refused_everywhere(&file);
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::RangeLength { expected: 8, .. })
        ),
        "{e:?}"
    );
}

#[test]
fn file_too_long_or_too_short() {
    let entries: &[(&str, &str, &[u64], u64, u64)] = &[("a", "F32", &[3], 0, 12)];
    let good = file_of(entries, 12);
    assert!(parse_file_bytes(&good, Rules::STRICT).is_ok());
    let expected = good.len() as u64;
    for data_len in [11, 13, 0, 100] {
        let file = file_of(entries, data_len);
        let e = refused_everywhere(&file);
        assert!(
            matches!(e.kind(), ErrorKind::Header(HeaderError::FileLength { expected: x, actual }) if *x == expected && *actual == file.len() as u64),
            "{e:?}"
        );
    }
    // No tensors: nothing may follow the header.
    let e = refused_everywhere(&padded("{}", 1));
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(HeaderError::FileLength {
                expected: 16,
                actual: 17
            })
        ),
        "{e:?}"
    );
}

// ---- strict only --------------------------------------------------------------------

/// Refused in strict mode, accepted in reference mode and by the reference.
fn strict_only(file: &[u8]) -> Error {
    assert!(
        reference_read(file).accepted(),
        "the reference refuses {}",
        support::reference::show(file)
    );
    parse_file_bytes(file, Rules::REFERENCE).expect("reference mode accepts");
    err(file, Rules::STRICT)
}

#[test]
fn duplicate_tensor_key() {
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
    let file = padded(json, 2);
    let e = strict_only(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::DuplicateKey { key, within }) if key == "a" && within == "the header"),
        "{e:?}"
    );
    // The reference keeps the last one, and so does reference mode.
    let h = parse_file_bytes(&file, Rules::REFERENCE).unwrap();
    assert_eq!(h.tensors.len(), 1);
    assert_eq!(h.tensors[0].meta.shape, [2]);
    // Also when spelled differently: `\u0061` is `a`.
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"\u0061":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#;
    let e = strict_only(&padded(json, 1));
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::DuplicateKey { key, .. }) if key == "a")
    );
}

#[test]
fn duplicate_metadata_key() {
    let file = padded(r#"{"__metadata__":{"k":"1","k":"2"}}"#, 0);
    let e = strict_only(&file);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::DuplicateKey { key, within }) if key == "k" && within == "__metadata__"),
        "{e:?}"
    );
    let h = parse_file_bytes(&file, Rules::REFERENCE).unwrap();
    assert_eq!(h.metadata.unwrap()["k"], "2");
}

#[test]
fn leading_whitespace() {
    for lead in [" ", "\n", "\t", "\r\n"] {
        let file = padded(&format!("{lead}{{}}"), 0);
        let e = strict_only(&file);
        assert!(
            matches!(e.kind(), ErrorKind::Header(HeaderError::HeaderNotBrace(b)) if *b == lead.as_bytes()[0]),
            "{e:?}"
        );
        assert_eq!(e.offset(), Some(8));
    }
}

#[test]
fn extra_field_in_a_tensor_entry() {
    let json = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[{"y":null}]}}"#;
    let e = strict_only(&padded(json, 1));
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::UnknownField { tensor, field }) if tensor == "a" && field == "x"),
        "{e:?}"
    );
}

#[test]
fn array_form_entry_and_enum_map_dtype() {
    // The reference's derived struct also reads a sequence, and its derived
    // enum a one-key map: the format's text has neither.
    for json in [
        r#"{"a":["U8",[1],[0,1]]}"#,
        r#"{"a":{"dtype":{"U8":null},"shape":[1],"data_offsets":[0,1]}}"#,
    ] {
        let e = strict_only(&padded(json, 1));
        assert!(
            matches!(e.kind(), ErrorKind::Header(HeaderError::HeaderJson(_))),
            "{e:?}"
        );
    }
}

#[test]
fn padding_other_than_spaces() {
    for (pad, byte) in [("\t", b'\t'), ("\n", b'\n'), ("\r", b'\r')] {
        let file = raw_file(&format!("{{}}  {pad}  "), 0);
        let e = strict_only(&file);
        assert!(
            matches!(e.kind(), ErrorKind::Header(HeaderError::BadPadding(b)) if *b == byte),
            "{e:?}"
        );
        assert_eq!(e.offset(), Some(8 + 4));
    }
}

/// NUL (or any non-whitespace) padding: the reference refuses it too (it is
/// not JSON), so it is not strict-only; strict mode names the padding rule.
#[test]
fn nul_padding() {
    let file = raw_file_bytes(b"{}\0\0\0\0\0\0", 0);
    assert!(!reference_read(&file).accepted());
    let e = err(&file, Rules::STRICT);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::BadPadding(0))),
        "{e:?}"
    );
    assert_eq!(e.offset(), Some(8 + 2));
    let e = err(&file, Rules::REFERENCE);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::HeaderJson(m)) if m.to_string().contains("trailing characters")),
        "{e:?}"
    );
    // After some legal spaces, and after a tab.
    let e = err(&raw_file_bytes(b"{}   \0  ", 0), Rules::STRICT);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::BadPadding(0))),
        "{e:?}"
    );
    assert_eq!(e.offset(), Some(8 + 5));
    let e = err(&raw_file_bytes(b"{}\t\0    ", 0), Rules::STRICT);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::BadPadding(b'\t'))),
        "{e:?}"
    );
    assert_eq!(e.offset(), Some(8 + 2));
    // A second closing brace is padding too.
    let e = err(&raw_file_bytes(b"{}}     ", 0), Rules::STRICT);
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::BadPadding(b'}'))),
        "{e:?}"
    );
}

#[test]
fn spaces_need_not_align_to_8() {
    // The reference writer aligns, but readers accept any trailing spaces.
    for pad in ["", " ", "   "] {
        let file = raw_file(&format!("{{}}{pad}"), 0);
        assert!(reference_read(&file).accepted());
        for rules in BOTH {
            assert!(parse_file_bytes(&file, rules).is_ok());
        }
    }
}

// ---- a sparse 10 GB file ------------------------------------------------------------

#[test]
fn sparse_10_gb_file_is_validated_from_its_header_alone() {
    let tensors = vec![
        TensorMeta::new("embed", Dtype::BF16, [1 << 20, 4096]), // 8 GiB
        TensorMeta::new("head", Dtype::F32, [500_000, 1024]),   // 2.048 GB
        TensorMeta::new("step", Dtype::I64, []),
    ];
    let md = [("format".to_string(), "pt".to_string())].into();
    let enc = encode(tensors, Some(md), Order::Canonical).unwrap();
    let file_len = enc.header().file_len();
    assert!(file_len > 10_000_000_000, "{file_len}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.safetensors");
    {
        let mut f = File::create(&path).unwrap();
        f.write_all(enc.bytes()).unwrap();
        f.set_len(file_len).unwrap(); // sparse: no data written
    }

    let mut r = CountingReader::new(BufReader::new(File::open(&path).unwrap()));
    let header = read_header(&mut r, file_len, Rules::STRICT).unwrap();
    assert!(r.count < 1 << 20, "read {} bytes", r.count);
    assert_eq!(&header, enc.header());
    assert_eq!(header.file_len(), file_len);

    let header = read_file_header(&path, Rules::STRICT).unwrap();
    assert_eq!(&header, enc.header());
    for rules in BOTH {
        let cp = Checkpoint::open(&path, rules).unwrap();
        assert_eq!(cp.tensor_count(), 3);
        assert_eq!(cp.data_len(), file_len - header.data_start());
    }

    // One byte short is noticed from the length alone.
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(file_len - 1)
        .unwrap();
    let e = Checkpoint::open(&path, Rules::STRICT).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Header(HeaderError::FileLength { .. })),
        "{e:?}"
    );
    assert!(e.to_string().starts_with(&format!("{}: ", path.display())));
}
