//! HDF5 files (Keras `save_weights`, h5py's defaults; see
//! `fixtures/hdf5/make_hdf5.py`) convert byte-identical to the file
//! `safetensors.numpy.save_file` wrote from what h5py read, through the
//! library (file span and reader paths) and the binary; real `tf_model.h5`
//! files of transformers 4.57 (`fixtures/hdf5/make_tf.py`) convert with
//! `--names hf` to the PyTorch model's names, layouts and shapes (that
//! transformers 5 loads them with the TF model's logits:
//! `fixtures/hdf5/check_logits.py`); cut and corrupted files are refused
//! by name, never with a panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;
use crate::support::convert_bytes as convert;
use safetensors_stream::convert::ConvertOptions;
use safetensors_stream::source::hdf5::Hdf5Source;
use safetensors_stream::source::{open_input, Names, Source, SourceOptions};
use safetensors_stream::{Category, Error, ErrorKind, SinkOptions};
use support::{block_on, fixtures};

const CASES: [(&str, &str); 14] = [
    ("hdf5/keras2.h5", "hdf5/expected/keras2.safetensors"),
    ("hdf5/keras3.weights.h5", "hdf5/expected/keras3.safetensors"),
    ("hdf5/chunked.h5", "hdf5/expected/chunked.safetensors"),
    ("hdf5/dtypes.h5", "hdf5/expected/dtypes.safetensors"),
    ("hdf5/latest.h5", "hdf5/expected/latest.safetensors"),
    ("hdf5/dense.h5", "hdf5/expected/dense.safetensors"),
    ("hdf5/dense_many.h5", "hdf5/expected/dense_many.safetensors"),
    (
        "hdf5/track_order.h5",
        "hdf5/expected/track_order.safetensors",
    ),
    // h5py's LZF, alone and with shuffle and fletcher32, and chunks it left unfiltered.
    ("hdf5/filters.h5", "hdf5/expected/filters.safetensors"),
    // libver="latest" chunked datasets: fixed array chunk indexes, paged and
    // filtered, and data layout version 5.
    (
        "hdf5/fixed_array.h5",
        "hdf5/expected/fixed_array.safetensors",
    ),
    // ... with one unlimited dimension: extensible arrays, and super blocks.
    (
        "hdf5/extensible_array.h5",
        "hdf5/expected/extensible_array.safetensors",
    ),
    // ... with two: version 2 B-trees of chunk records.
    (
        "hdf5/btree2_index.h5",
        "hdf5/expected/btree2_index.safetensors",
    ),
    // The scaleoffset filter: integers of every width, D-scaled floats (the bytes h5py reads).
    (
        "hdf5/scaleoffset.h5",
        "hdf5/expected/scaleoffset.safetensors",
    ),
    // Space allocated early: no chunk index, the chunks in a row.
    ("hdf5/implicit.h5", "hdf5/expected/implicit.safetensors"),
];

fn fixture(p: &str) -> PathBuf {
    fixtures().join(p)
}

fn hf() -> ConvertOptions {
    let mut o = ConvertOptions::default().sync(false);
    o.source.names = Names::Hf;
    o
}

/// Name -> (dtype, shape, bytes) of a safetensors file.
fn tensors(bytes: &[u8]) -> BTreeMap<String, (String, Vec<usize>, Vec<u8>)> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, v)| {
            let d = format!("{:?}", v.dtype());
            (n, (d, v.shape().to_vec(), v.data().to_vec()))
        })
        .collect()
}

#[test]
fn every_fixture_converts_byte_identical_through_both_library_paths() {
    for (input, expected) in CASES {
        let want = std::fs::read(fixture(expected)).unwrap();
        for fast in [true, false] {
            let opts = ConvertOptions::default()
                .sync(false)
                .fast_path(fast)
                .sink(SinkOptions::default().buffer_size(4096));
            let got = convert(&fixture(input), &opts).unwrap();
            assert!(
                got == want,
                "{input} (fast path {fast}) differs from {expected}"
            );
        }
    }
}

#[test]
fn listings_name_every_dataset_by_its_path() {
    for (input, expected) in CASES {
        let src = block_on(open_input(
            &fixture(input),
            &SourceOptions::default(),
            &|_| {},
        ))
        .unwrap();
        let listed: BTreeMap<String, (String, Vec<usize>)> = src
            .tensors()
            .iter()
            .map(|t| {
                let shape = t.shape.iter().map(|&d| d as usize).collect();
                (t.name.clone(), (format!("{:?}", t.dtype), shape))
            })
            .collect();
        let want: BTreeMap<String, (String, Vec<usize>)> =
            tensors(&std::fs::read(fixture(expected)).unwrap())
                .into_iter()
                .map(|(n, (d, s, _))| (n, (d, s)))
                .collect();
        assert_eq!(listed, want, "{input}");
    }
    let src = block_on(open_input(
        &fixture("hdf5/keras3.weights.h5"),
        &SourceOptions::default(),
        &|_| {},
    ))
    .unwrap();
    assert_eq!(src.tensors()[0].name, "layers/dense/vars/0");
}

fn open_err(path: &Path) -> Error {
    block_on(open_input(path, &SourceOptions::default(), &|_| {}))
        .err()
        .expect("refused")
}

/// dense.h5 with its fractal heap claiming filters (its I/O filters'
/// length set), which the reader does not read.
fn filtered_heap(dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(fixture("hdf5/dense.h5")).unwrap();
    let at = bytes.windows(4).position(|w| w == b"FRHP").unwrap();
    bytes[at + 7] = 1;
    support::write(dir, "filtered.h5", &bytes)
}

#[test]
fn what_the_reader_does_not_read_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let e = open_err(&filtered_heap(dir.path()));
    assert!(matches!(e.kind(), ErrorKind::Hdf5(_)), "{e}");
    assert!(
        e.to_string()
            .contains("a fractal heap with filters is not supported"),
        "{e}"
    );
    assert!(e.offset().is_some(), "{e}");
}

#[test]
fn datasets_safetensors_cannot_hold_are_refused_saying_why_and_which() {
    let cases = [
        (
            "string.h5",
            "s",
            "a fixed-length string (datatype class 3; safetensors holds only numeric tensors)",
        ),
        (
            "vlen.h5",
            "s",
            "a variable-length type, as h5py writes `str` and `vlen_dtype`",
        ),
        (
            "complex.h5",
            "c",
            "a compound type, as h5py writes complex numbers",
        ),
        // Read as its fill value before: zeros where the data was.
        (
            "external.h5",
            "x",
            "external storage (h5py's `external=`: the data is in raw files outside the HDF5 file",
        ),
    ];
    for (name, dataset, says) in cases {
        let e = open_err(&fixture(&format!("hdf5/refused/{name}")));
        assert!(matches!(e.kind(), ErrorKind::Hdf5(_)), "{name}: {e}");
        let text = e.to_string();
        assert!(text.contains(says), "{name}: {text}");
        assert!(text.contains("is not supported"), "{name}: {text}");
        assert_eq!(e.tensor(), Some(dataset), "{name}: {text}");
    }
}

#[test]
fn a_keras_archive_is_refused_saying_to_extract_its_weights() {
    let e = open_err(&fixture("hdf5/m.keras"));
    let text = e.to_string();
    assert!(matches!(e.kind(), ErrorKind::Zip(_)), "{text}");
    assert!(
        text.contains("a Keras 3 .keras archive (model.save): its weights are the member \"model.weights.h5\""),
        "{text}"
    );
    assert!(
        text.contains("unzip MODEL.keras model.weights.h5"),
        "{text}"
    );
}

#[test]
fn structures_reached_again_and_again_are_listed_once_or_refused() {
    let hostile = |name: &str| fixture(&format!("fuzz-regressions/hdf5_file/{name}"));
    // latest.h5 under 40 groups, each linking the next twice: 2^40 paths
    // to one dataset in 4 KB (out of memory before). Each group is walked
    // once, under its first path; the second links are skipped and counted.
    let path = hostile("groups-2pow40-paths.h5");
    let file = std::fs::File::open(&path).unwrap();
    let len = file.metadata().unwrap().len();
    let src = Hdf5Source::open(file, len, "groups.h5").unwrap();
    let names: Vec<&str> = src.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, [["l0"; 40].join("/")]);
    assert_eq!(src.skipped(), 40);
    // chunked.h5 with "plain"'s chunk B-tree replaced by a level-1 root
    // whose two children are one leaf: its chunks would be listed twice
    // (65,535 children of a 65,535-entry leaf in 5 MB: 540 MB listed).
    let e = open_err(&hostile("btree-leaf-shared.h5"));
    assert!(matches!(e.kind(), ErrorKind::Hdf5(_)), "{e}");
    assert!(e.to_string().contains("a B-tree node reached twice"), "{e}");
    assert_eq!(e.tensor(), Some("plain"), "{e}");
}

#[test]
fn version_2_b_trees_and_heaps_reaching_a_node_twice_are_refused() {
    // dense.h5's name index and heap rewritten by
    // scripts/hostile_hdf5_btree2.py (checksums recomputed). Before, the
    // shared leaf was read until the records outnumbered the file's
    // length (a 100 MB file: 4.7 GB, then out of memory), the root that is
    // its own child failed on a signature, and the heap naming one direct
    // block twice was accepted.
    let hostile = |name: &str| fixture(&format!("fuzz-regressions/hdf5_file/{name}"));
    for (name, refusal, at) in [
        ("bt2-leaf-shared.h5", "a B-tree v2 node reached twice", 6044),
        (
            "bt2-root-own-child.h5",
            "a B-tree v2 node reached twice",
            6065,
        ),
        (
            "heap-direct-block-twice.h5",
            "a fractal heap direct block listed twice",
            6069,
        ),
        ("bt2-depth-lie.h5", "no BTIN signature", 5020),
        (
            "bt2-count-lie.h5",
            "a B-tree v2 node of 400 records in 512 bytes",
            5020,
        ),
    ] {
        let e = open_err(&hostile(name));
        assert!(matches!(e.kind(), ErrorKind::Hdf5(_)), "{name}: {e}");
        assert!(e.to_string().contains(refusal), "{name}: {e}");
        assert_eq!(e.offset(), Some(at), "{name}: {e}");
    }
}

#[test]
fn dense_groups_list_their_links_by_name_and_skip_soft_ones() {
    // 60 layers through a heap of several direct blocks; 2,100 soft links
    // through a B-tree of depth 2, all skipped.
    let src = block_on(open_input(
        &fixture("hdf5/dense_many.h5"),
        &SourceOptions::default(),
        &|_| {},
    ))
    .unwrap();
    let names: Vec<&str> = src.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 61);
    assert_eq!(names[0], "layers/dense_0/vars/0");
    assert_eq!(names[1], "layers/dense_1/vars/0");
    assert_eq!(names[2], "layers/dense_10/vars/0");
    assert_eq!(names[60], "links/target");
}

#[test]
fn paged_extensible_array_data_blocks_are_read_page_by_page() {
    // 140,000 one-byte chunks along the unlimited dimension (make_hdf5.py's
    // paged_earray): those past 131,076 are in data blocks of 2 pages of
    // 1,024, three pages written. Everything else is the fill value, 3.
    let out = convert(
        &fixture("hdf5/paged_earray.h5"),
        &ConvertOptions::default().sync(false),
    )
    .unwrap();
    let got = tensors(&out);
    let (dtype, shape, data) = &got["sparse"];
    assert_eq!((dtype.as_str(), shape.as_slice()), ("I8", &[140_000][..]));
    let mut want = vec![3u8; 140_000];
    want[0] = 1;
    want[131_100] = 2;
    want[135_000..135_010].fill(5);
    want[139_999] = 9;
    assert!(
        data == &want,
        "differs first at {:?}",
        data.iter().zip(&want).position(|(a, b)| a != b)
    );
}

#[test]
fn every_cut_of_a_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "hdf5/latest.h5",
        "hdf5/keras3.weights.h5",
        "hdf5/chunked.h5",
        "hdf5/dense.h5",
        "hdf5/track_order.h5",
    ] {
        let whole = std::fs::read(fixture(name)).unwrap();
        for cut in (1..whole.len()).step_by(if whole.len() > 4000 { 13 } else { 1 }) {
            let path = support::write(dir.path(), "cut.h5", &whole[..cut]);
            let e = block_on(open_input(&path, &SourceOptions::default(), &|_| {}))
                .err()
                .unwrap_or_else(|| panic!("{name} cut at {cut} opened"));
            // Until its signature is whole, a cut file is of no format.
            let hdf5 = matches!(e.kind(), ErrorKind::Hdf5(_));
            assert_eq!(hdf5, cut >= 8, "{name} cut {cut}: {e}");
        }
    }
}

#[test]
fn corrupted_bytes_are_refused_or_read_never_a_panic() {
    // Each byte of the metadata set to 0xff and to 0x00 in turn: the file
    // either converts or is refused as bad input; a panic fails the test.
    let dir = tempfile::tempdir().unwrap();
    // Read whole: their chunk indexes, or their chunks' scaleoffset headers, are far in.
    let newer_indexes = [
        "hdf5/fixed_array.h5",
        "hdf5/extensible_array.h5",
        "hdf5/btree2_index.h5",
        "hdf5/scaleoffset.h5",
    ];
    // The paged array's metadata (header, index and super block) is in its first 3000 bytes.
    let others = [
        "hdf5/latest.h5",
        "hdf5/chunked.h5",
        "hdf5/dense.h5",
        "hdf5/implicit.h5",
        "hdf5/paged_earray.h5",
    ];
    for name in others.into_iter().chain(newer_indexes) {
        let whole = std::fs::read(fixture(name)).unwrap();
        // The chunk indexes' blocks are past the first 3000 bytes: all of it.
        let (end, step) = if name.contains("dense") {
            (whole.len(), 3)
        } else if newer_indexes.contains(&name) {
            (whole.len(), 5)
        } else {
            (whole.len().min(3000), 3)
        };
        for at in (0..end).step_by(step) {
            for value in [0xff, 0x00] {
                let mut bytes = whole.clone();
                if bytes[at] == value {
                    continue;
                }
                bytes[at] = value;
                let path = support::write(dir.path(), "bad.h5", &bytes);
                if let Err(e) = convert(&path, &ConvertOptions::default().sync(false)) {
                    assert!(
                        matches!(e.category(), Category::BadInput | Category::Usage),
                        "{name} byte {at} = {value}: {e}"
                    );
                }
            }
        }
    }
}

// ---- --names hf -------------------------------------------------------------------

#[test]
fn names_hf_gives_the_pytorch_state_dict_of_real_tf_checkpoints() {
    for model in ["bert", "gpt2", "t5"] {
        let input = fixture(&format!("hdf5/transformers/{model}/tf_model.h5"));
        let stored = tensors(&convert(&input, &ConvertOptions::default().sync(false)).unwrap());
        let mapped = tensors(&convert(&input, &hf()).unwrap());
        // Every stored weight is somewhere in the output, as itself or transposed.
        for (name, (_, shape, _)) in &mapped {
            assert!(!name.contains('/') && !name.contains(":0"), "{name}");
            assert!(!shape.is_empty(), "{name}");
        }
        match model {
            "bert" => {
                let k = "bert/tf_bert_for_masked_lm/bert/encoder/layer_._0/attention/self/query/kernel:0";
                let (_, shape, data) = &stored[k];
                let (_, tshape, tdata) =
                    &mapped["bert.encoder.layer.0.attention.self.query.weight"];
                assert_eq!(tshape, &[shape[1], shape[0]]);
                assert_eq!(tdata, &transpose(data, shape[0], shape[1]));
                assert!(mapped.contains_key("cls.predictions.bias"));
                // The MLM head's copy of the word embeddings is not written again.
                assert_eq!(
                    mapped
                        .keys()
                        .filter(|n| n.contains("word_embeddings"))
                        .count(),
                    1
                );
            }
            "gpt2" => {
                let (_, shape, data) = &mapped["transformer.h.0.attn.c_attn.bias"];
                assert_eq!(shape, &[96]);
                let k = "transformer/tfgpt2lm_head_model/transformer/h_._0/attn/c_attn/bias:0";
                assert_eq!(data, &stored[k].2);
                // Conv1D weights are not transposed: TF and PyTorch share (in, out).
                assert_eq!(mapped["transformer.h.0.attn.c_attn.weight"].1, [32, 96]);
            }
            _ => {
                let shared: Vec<&String> = mapped.keys().filter(|n| n.contains("shared")).collect();
                assert_eq!(shared, ["shared.weight"]);
                assert!(
                    stored
                        .keys()
                        .filter(|n| n.ends_with("shared/embeddings:0"))
                        .count()
                        > 1
                );
            }
        }
    }
}

/// A row-major (rows, cols) f32 array's bytes, transposed.
fn transpose(data: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            let from = (r * cols + c) * 4;
            let to = (c * rows + r) * 4;
            out[to..to + 4].copy_from_slice(&data[from..from + 4]);
        }
    }
    out
}

#[test]
fn names_hf_transposes_chunked_data_and_refuses_other_formats() {
    let input = fixture("hdf5/chunked.h5");
    let stored = tensors(&convert(&input, &ConvertOptions::default().sync(false)).unwrap());
    for fast in [true, false] {
        let mapped = tensors(&convert(&input, &hf().fast_path(fast)).unwrap());
        let (_, shape, data) = &stored["layer/model/dense/kernel:0"];
        let (_, tshape, tdata) = &mapped["dense.weight"];
        assert_eq!(tshape, &[shape[1], shape[0]]);
        assert_eq!(
            tdata,
            &transpose(data, shape[0], shape[1]),
            "fast path {fast}"
        );
    }
    let e = convert(&fixture("onnx/raw.onnx"), &hf()).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Usage(_)), "{e}");
    assert!(e.to_string().contains("--names hf"), "{e}");
}

#[test]
fn names_hf_permutes_conv2d_kernels_as_transformers_did() {
    // (kh, kw, in, out) -> (out, in, kh, kw): numpy's transpose(3, 2, 0, 1), contiguous and chunked.
    let input = fixture("hdf5/conv.h5");
    let stored = tensors(&convert(&input, &ConvertOptions::default().sync(false)).unwrap());
    for fast in [true, false] {
        let mapped = tensors(&convert(&input, &hf().fast_path(fast)).unwrap());
        for (tf, pt) in [
            ("layer/model/conv/kernel:0", "conv.weight"),
            ("layer/model/conv2/kernel:0", "conv2.weight"),
        ] {
            let (_, s, data) = &stored[tf];
            let (_, tshape, tdata) = &mapped[pt];
            assert_eq!(tshape, &[s[3], s[2], s[0], s[1]], "{pt}");
            let mut want = Vec::new();
            for o in 0..s[3] {
                for i in 0..s[2] {
                    for a in 0..s[0] {
                        for b in 0..s[1] {
                            let at = (((a * s[1] + b) * s[2] + i) * s[3] + o) * 4;
                            want.extend_from_slice(&data[at..at + 4]);
                        }
                    }
                }
            }
            assert_eq!(tdata, &want, "{pt}, fast path {fast}");
        }
    }
}

// ---- the binary -------------------------------------------------------------------

fn bin() -> Command {
    Command::new(support::BIN)
}

#[test]
fn the_binary_converts_inspects_validates_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (input, expected)) in CASES.into_iter().enumerate() {
        let want = std::fs::read(fixture(expected)).unwrap();
        let out = dir.path().join(format!("{i}.safetensors"));
        support::converts_to(&fixture(input), &out, &want);
        let o = bin()
            .args(["-", "-o", "-"])
            .stdin(std::fs::File::open(fixture(input)).unwrap())
            .output()
            .unwrap();
        assert!(o.status.success() && o.stdout == want, "{input} from stdin");
    }
    let input = fixture("hdf5/keras2.h5");
    let o = bin().arg("inspect").arg(&input).output().unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("layer_._0/attention/self/query/kernel:0"),
        "{text}"
    );
    let o = bin().arg("validate").arg(&input).output().unwrap();
    assert_eq!(support::code(&o), 1);
    assert!(support::stderr(&o).contains("an HDF5 file, not a safetensors file"));
    let o = bin()
        .arg(&input)
        .args(["--names", "hf", "--dry-run", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::stderr(&o));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        plan.to_string()
            .contains("bert.encoder.layer.0.attention.self.query.weight"),
        "{plan}"
    );
    let o = bin()
        .arg(fixture("hdf5/dtypes.h5"))
        .args(["--report", "json", "-o"])
        .arg(dir.path().join("r.safetensors"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", support::stderr(&o));
    let err = support::stderr(&o);
    assert!(err.contains("skipped 2 soft or external links"), "{err}");
    let out = tempfile::tempdir().unwrap();
    let o = bin()
        .arg(filtered_heap(dir.path()))
        .arg("-o")
        .arg(out.path().join("o.safetensors"))
        .output()
        .unwrap();
    assert_eq!(support::code(&o), 1);
    assert_eq!(support::stderr(&o).trim().lines().count(), 1);
    assert!(support::listing(out.path()).is_empty());
}

#[test]
fn names_hf_gives_the_pytorch_state_dict_of_real_flax_checkpoints() {
    // Written by transformers 4.57's Flax classes (fixtures/msgpack/make_flax_hf.py); BERT's in bfloat16.
    let input = fixture("msgpack/transformers/bert/flax_model.msgpack");
    let stored = tensors(&convert(&input, &ConvertOptions::default().sync(false)).unwrap());
    let mapped = tensors(&convert(&input, &hf()).unwrap());
    assert_eq!(stored.len(), mapped.len());
    let (dtype, shape, data) = &stored["bert.encoder.layer.0.intermediate.dense.kernel"];
    let (tdtype, tshape, tdata) = &mapped["bert.encoder.layer.0.intermediate.dense.weight"];
    assert_eq!((dtype.as_str(), tdtype.as_str()), ("BF16", "BF16"));
    assert_eq!(tshape, &[shape[1], shape[0]]);
    assert_eq!(tdata, &transpose_bf16(data, shape[0], shape[1]));
    for (from, to) in [
        (
            "bert.embeddings.LayerNorm.scale",
            "bert.embeddings.LayerNorm.weight",
        ),
        (
            "bert.embeddings.word_embeddings.embedding",
            "bert.embeddings.word_embeddings.weight",
        ),
    ] {
        assert_eq!(stored[from], mapped[to], "{from}");
    }
    let t5 = tensors(
        &convert(
            &fixture("msgpack/transformers/t5/flax_model.msgpack"),
            &hf(),
        )
        .unwrap(),
    );
    assert!(t5.contains_key("shared.weight"));
    assert!(t5.contains_key("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"));
}

/// A row-major (rows, cols) array of 2-byte elements, transposed.
fn transpose_bf16(data: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            let from = (r * cols + c) * 2;
            let to = (c * rows + r) * 2;
            out[to..to + 2].copy_from_slice(&data[from..from + 2]);
        }
    }
    out
}

#[test]
fn a_row_of_chunks_over_the_callers_limit_is_refused_at_open() {
    use safetensors_stream::{Limit, Limits};
    let input = fixture("hdf5/chunked.h5");
    let open = |limits: Limits| {
        let options = SourceOptions::default().limits(limits);
        block_on(open_input(&input, &options, &|_| {}))
    };
    // The default's 64 MiB holds the fixture's rows; 16 bytes holds none.
    assert!(open(Limits::default()).is_ok());
    let tight = Limits::default()
        .with(Limit::Hdf5ChunkRowBytes, 16)
        .unwrap();
    let e = open(tight).err().expect("a row of chunks over 16 bytes");
    let ErrorKind::Limit(refusal) = e.kind() else {
        panic!("not a limit: {e}");
    };
    assert_eq!(refusal.limit, "hdf5-chunk-row-bytes");
    assert_eq!(
        refusal.raise.as_deref(),
        Some("--limit hdf5-chunk-row-bytes=32")
    );
    assert!(e.to_string().contains("a row of chunks takes"), "{e}");
    // Through the binary: named in the JSON report.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let o = Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .arg(&input)
        .args([
            "--limit",
            "hdf5-chunk-row-bytes=16",
            "--report",
            "json",
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("\"hdf5_chunk_row_bytes\""), "{stderr}");
    assert!(!out.exists());
}
