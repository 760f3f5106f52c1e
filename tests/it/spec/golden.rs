//! Golden bytes: every file the Python reference wrote (`fixtures/reference/`)
//! is reproduced byte for byte by our encoder, and reads back, in both modes,
//! as the manifest says.

use crate::support;

use std::collections::BTreeMap;

use safetensors_stream::header::{encode, parse_file_bytes, Header, Metadata, Order, Rules};
use safetensors_stream::index::Checkpoint;
use safetensors_stream::source::read_file_header;
use safetensors_stream::Dtype;
use support::reference::{
    as_ref_header, build_file, manifest, reference_dir, reference_read, ManifestEntry, RefVerdict,
};

fn pairs(entry: &ManifestEntry) -> Vec<(safetensors_stream::header::TensorMeta, Vec<u8>)> {
    entry
        .tensors
        .iter()
        .map(|t| (t.meta.clone(), t.data.clone()))
        .collect()
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

fn read_fixture(name: &str) -> Vec<u8> {
    std::fs::read(reference_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn header_text(file: &[u8]) -> &str {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    std::str::from_utf8(&file[8..8 + n]).unwrap()
}

#[test]
fn manifest_lists_every_fixture() {
    let m = manifest();
    assert_eq!(m.len(), 32);
    let mut listed: Vec<String> = m.iter().map(|e| e.file.clone()).collect();
    listed.sort();
    let mut on_disk: Vec<String> = std::fs::read_dir(reference_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    on_disk.sort();
    assert_eq!(listed, on_disk);
}

#[test]
fn every_fixture_is_reproduced_byte_for_byte() {
    for entry in manifest() {
        let want = std::fs::read(entry.path()).unwrap();
        let (header, got) = build_file(&pairs(&entry), entry.metadata.clone(), Order::Canonical);
        if let Some(at) = first_difference(&got, &want) {
            panic!(
                "{}: differs at byte {at} (ours {} bytes, reference {} bytes)\n ours: {}\n them: {}",
                entry.file,
                got.len(),
                want.len(),
                header_text(&got),
                header_text(&want),
            );
        }
        assert_eq!(header.file_len(), want.len() as u64, "{}", entry.file);
        // The header alone: N is a multiple of 8, data starts aligned.
        assert_eq!(header.header_len % 8, 0, "{}", entry.file);
    }
}

/// Checks a parsed header against the manifest entry (and the file's data).
fn assert_matches_manifest(entry: &ManifestEntry, header: &Header, file: &[u8], mode: &str) {
    let ctx = format!("{} ({mode})", entry.file);
    assert_eq!(header.metadata, entry.metadata, "{ctx}: metadata");
    assert_eq!(header.tensors.len(), entry.tensors.len(), "{ctx}: count");
    assert_eq!(header.file_len(), file.len() as u64, "{ctx}: file length");
    let n = u64::from_le_bytes(file[..8].try_into().unwrap());
    assert_eq!(header.header_len, n, "{ctx}: N");
    let mut prev_end = 0;
    for t in &header.tensors {
        let want = entry
            .tensors
            .iter()
            .find(|m| m.meta.name == t.meta.name)
            .unwrap_or_else(|| panic!("{ctx}: unexpected tensor {:?}", t.meta.name));
        assert_eq!(t.meta, want.meta, "{ctx}");
        assert_eq!(t.begin, prev_end, "{ctx}: offsets tile the buffer");
        prev_end = t.end;
        let start = header.data_start() as usize;
        let data = &file[start + t.begin as usize..start + t.end as usize];
        assert_eq!(data, &want.data[..], "{ctx}: data of {:?}", t.meta.name);
    }
}

#[test]
fn every_fixture_parses_to_the_manifest_in_both_modes() {
    for entry in manifest() {
        let file = std::fs::read(entry.path()).unwrap();
        for (rules, mode) in [(Rules::STRICT, "strict"), (Rules::REFERENCE, "reference")] {
            let header = parse_file_bytes(&file, rules)
                .unwrap_or_else(|e| panic!("{} ({mode}): {e}", entry.file));
            assert_matches_manifest(&entry, &header, &file, mode);
            // The I/O path reads the same header.
            let from_disk = read_file_header(&entry.path(), rules).unwrap();
            assert_eq!(from_disk, header, "{} ({mode}) from disk", entry.file);
            let cp = Checkpoint::open(&entry.path(), rules).unwrap();
            assert!(cp.index.is_none());
            assert_eq!(cp.files.len(), 1);
            assert_eq!(cp.files[0].1, header);
        }
    }
}

#[test]
fn the_reference_reader_agrees_on_every_fixture() {
    for entry in manifest() {
        let file = std::fs::read(entry.path()).unwrap();
        let ours = parse_file_bytes(&file, Rules::REFERENCE).unwrap();
        match reference_read(&file) {
            RefVerdict::Accepted(theirs) => {
                assert_eq!(as_ref_header(&ours), theirs, "{}", entry.file)
            }
            other => panic!("{}: the reference says {other:?}", entry.file),
        }
    }
}

// ---- the spec's four examples -------------------------------------------------

fn assert_example(file: &str, json: &str, n: u64, size: u64) {
    let bytes = read_fixture(file);
    assert_eq!(bytes.len() as u64, size, "{file}: size");
    assert_eq!(&bytes[..8], &n.to_le_bytes(), "{file}: N");
    let text = header_text(&bytes);
    assert_eq!(text.trim_end_matches(' '), json, "{file}: JSON");
    assert_eq!(text.len() as u64, n);
}

#[test]
fn spec_example_a_f32_is_76_bytes() {
    let json = r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}"#;
    assert_example("spec_a.safetensors", json, 56, 76);
    let t = vec![(
        safetensors_stream::header::TensorMeta::new("a", Dtype::F32, [3]),
        [0f32, 1., 2.]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
    )];
    let (h, file) = build_file(&t, None, Order::Canonical);
    assert_eq!(h.header_len, 56);
    assert_eq!(file, read_fixture("spec_a.safetensors"));
}

#[test]
fn spec_example_test_i32_is_88_bytes() {
    let json = r#"{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}"#;
    assert_example("spec_test.safetensors", json, 64, 88);
    let t = vec![(
        safetensors_stream::header::TensorMeta::new("test", Dtype::I32, [2, 2]),
        vec![0u8; 16],
    )];
    let (h, file) = build_file(&t, None, Order::Canonical);
    assert_eq!((h.header_len, h.file_len()), (64, 88));
    assert_eq!(file, read_fixture("spec_test.safetensors"));
}

#[test]
fn spec_example_four_tensors_with_metadata_is_275_bytes() {
    let json = r#"{"__metadata__":{"format":"np"},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"s":{"dtype":"F32","shape":[],"data_offsets":[8,12]},"w":{"dtype":"F16","shape":[2],"data_offsets":[12,16]},"m":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}}"#;
    assert_example("spec_four.safetensors", json, 248, 275);
    let metas = vec![
        safetensors_stream::header::TensorMeta::new("w", Dtype::F16, [2]),
        safetensors_stream::header::TensorMeta::new("b", Dtype::I64, [1]),
        safetensors_stream::header::TensorMeta::new("m", Dtype::U8, [3]),
        safetensors_stream::header::TensorMeta::new("s", Dtype::F32, []),
    ];
    let md = Metadata::from([("format".to_string(), "np".to_string())]);
    let enc = encode(metas, Some(md), Order::Canonical).unwrap();
    assert_eq!(enc.header().file_len(), 275);
    assert_eq!(enc.bytes(), &read_fixture("spec_four.safetensors")[..256]);
}

#[test]
fn spec_example_empty_is_16_bytes() {
    assert_example("spec_empty.safetensors", "{}", 8, 16);
    let enc = encode(vec![], None, Order::Canonical).unwrap();
    assert_eq!(enc.bytes(), &read_fixture("spec_empty.safetensors")[..]);
    assert_eq!(&enc.bytes()[8..], b"{}      ");
}

// ---- particular fixtures --------------------------------------------------------

fn names_in_offset_order(file: &str) -> Vec<String> {
    let h = parse_file_bytes(&read_fixture(file), Rules::STRICT).unwrap();
    h.tensors.into_iter().map(|t| t.meta.name).collect()
}

#[test]
fn ml_dtypes_sort_as_the_reference_declares_them() {
    let h = parse_file_bytes(&read_fixture("ml_dtypes.safetensors"), Rules::STRICT).unwrap();
    let dtypes: Vec<Dtype> = h.tensors.iter().map(|t| t.meta.dtype).collect();
    assert_eq!(
        dtypes,
        [
            Dtype::BF16,
            Dtype::F8_E5M2FNUZ,
            Dtype::F8_E4M3FNUZ,
            Dtype::F8_E8M0,
            Dtype::F8_E4M3,
            Dtype::F8_E5M2,
        ]
    );
    assert_eq!(h.tensors[0].len(), 12);
    assert!(h.tensors[1..].iter().all(|t| t.len() == 6));
}

#[test]
fn all_dtypes_file_is_dtype_descending() {
    let h = parse_file_bytes(&read_fixture("all_dtypes.safetensors"), Rules::STRICT).unwrap();
    let dtypes: Vec<Dtype> = h.tensors.iter().map(|t| t.meta.dtype).collect();
    let mut sorted = dtypes.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(dtypes, sorted);
    assert_eq!(dtypes.first(), Some(&Dtype::U64));
    assert_eq!(dtypes.last(), Some(&Dtype::BOOL));
    assert_eq!(dtypes.len(), 13);
}

#[test]
fn empty_name_is_a_tensor_in_both_modes() {
    let file = read_fixture("empty_name.safetensors");
    assert!(
        header_text(&file).starts_with(r#"{"":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}"#)
    );
    for rules in [Rules::STRICT, Rules::REFERENCE] {
        let h = parse_file_bytes(&file, rules).unwrap();
        let names: Vec<&str> = h.tensors.iter().map(|t| t.meta.name.as_str()).collect();
        assert_eq!(names, ["", "x"]);
        assert_eq!(h.get("").unwrap().len(), 2);
    }
}

#[test]
fn names_sort_by_utf8_bytes() {
    assert_eq!(
        names_in_offset_order("sort_order.safetensors"),
        ["B", "Z", "_", "a", "a.1", "a.10", "a.2", "b", "\u{ff61}", "🙂"]
    );
    assert_eq!(
        names_in_offset_order("sort_dtype_vs_name.safetensors"),
        ["e", "b", "d", "a", "c", "f"],
        "I64, then F64 by name, then U8 by name, then BOOL"
    );
}

#[test]
fn escaping_is_serde_json_s() {
    let file = read_fixture("escape_names.safetensors");
    let text = header_text(&file);
    assert!(text.contains(r#""quote\"back\\slash\nnew\ttab""#), "{text}");
    assert!(
        text.contains("\"ctl\\u0001\\u001f del\u{7f} slash/\""),
        "{text}"
    );
    assert!(text.contains("\"é\\\"🙂\""), "{text}");
    let file = read_fixture("metadata_unicode.safetensors");
    let text = header_text(&file);
    assert!(
        text.starts_with(r#"{"__metadata__":{"désc \"q\"\n":"välue 名前🙂\t\\ \u0001 /end"}"#),
        "{text}"
    );
}

#[test]
fn metadata_variants() {
    let text = |f| header_text(&read_fixture(f)).to_string();
    assert!(!text("metadata_none.safetensors").contains("__metadata__"));
    assert!(text("metadata_empty.safetensors").starts_with(r#"{"__metadata__":{},"#));
    assert!(text("metadata_one.safetensors").starts_with(r#"{"__metadata__":{"format":"pt"},"#));
}

// ---- the caller's order -------------------------------------------------------

#[test]
fn as_given_layout_is_valid_and_read_by_the_reference() {
    for entry in manifest() {
        let (header, file) = build_file(&pairs(&entry), entry.metadata.clone(), Order::AsGiven);
        let ctx = &entry.file;
        // Offsets follow the manifest's order, packed from 0.
        let names: Vec<&str> = header
            .tensors
            .iter()
            .map(|t| t.meta.name.as_str())
            .collect();
        let given: Vec<&str> = entry.tensors.iter().map(|t| t.meta.name.as_str()).collect();
        // Zero-length tensors share offsets, so compare by begin then the given order.
        let mut by_offset = entry
            .tensors
            .iter()
            .map(|t| t.meta.name.as_str())
            .collect::<Vec<_>>();
        by_offset.sort_by_key(|n| {
            let t = header.get(n).unwrap();
            (t.begin, t.end, given.iter().position(|g| g == n))
        });
        assert_eq!(names, given, "{ctx}: as given");
        assert_eq!(by_offset, given, "{ctx}: offsets in the given order");

        for rules in [Rules::STRICT, Rules::REFERENCE] {
            let parsed = parse_file_bytes(&file, rules).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_matches_manifest(&entry, &parsed, &file, "as given");
        }

        let st = safetensors::SafeTensors::deserialize(&file)
            .unwrap_or_else(|e| panic!("{ctx}: the reference refuses our AsGiven layout: {e}"));
        let theirs: BTreeMap<String, Vec<u8>> = st
            .tensors()
            .into_iter()
            .map(|(n, v)| (n, v.data().to_vec()))
            .collect();
        assert_eq!(theirs.len(), entry.tensors.len(), "{ctx}");
        for t in &entry.tensors {
            assert_eq!(theirs[&t.meta.name], t.data, "{ctx}: {:?}", t.meta.name);
            let v = st.tensor(&t.meta.name).unwrap();
            assert_eq!(format!("{:?}", v.dtype()), t.meta.dtype.as_str());
            let shape: Vec<u64> = v.shape().iter().map(|&d| d as u64).collect();
            assert_eq!(shape, t.meta.shape);
        }
    }
}
