//! Quantized safetensors (FP8, GPTQ, AWQ, bitsandbytes int8) through the
//! binary: with `--dequantize-to X` every fixture converts to exactly what
//! its scheme's library computes (fixtures/quantized/generate.py wrote the
//! expectations with torch, compressed-tensors and bitsandbytes), without
//! it the file is copied as it is; hostile scales, zeros and `g_idx` are
//! refused naming the tensor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use safetensors::SafeTensors;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/quantized")
}

fn convert(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .args(args)
        .output()
        .expect("run convert")
}

/// Converts `model` into `out` with `args` after them, asserting success;
/// the run (for its notices) and the output's tensors.
fn converted(model: &Path, out: &Path, args: &[&str]) -> (Output, Tensors) {
    let mut all = vec![model.as_os_str(), "-o".as_ref(), out.as_os_str()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    let run = convert(&all);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let got = tensors(out);
    (run, got)
}

/// Name -> (dtype, shape, bytes) of a safetensors file.
type Tensors = BTreeMap<String, (String, Vec<usize>, Vec<u8>)>;

/// The tensors of the safetensors file at `path`.
fn tensors(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, v)| {
            (
                n,
                (
                    format!("{:?}", v.dtype()),
                    v.shape().to_vec(),
                    v.data().to_vec(),
                ),
            )
        })
        .collect()
}

/// The input of a case: its index if it has one, else its file.
fn input(case: &str) -> PathBuf {
    let d = dir().join(case);
    let index = d.join("model.safetensors.index.json");
    if index.exists() {
        index
    } else {
        d.join("model.safetensors")
    }
}

fn dequantize(case: &str, to: &str, out: &Path) -> Output {
    convert(&[
        input(case).as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--dequantize-to".as_ref(),
        to.as_ref(),
    ])
}

/// Every scheme of fixtures/quantized/, each checked here against its
/// library (and, from its object, in tests/it/object_store/quantized.rs).
pub(crate) const CASES: &[&str] = &[
    "fp8-block",
    "fp8-sharded",
    "fp8-compressed-tensors",
    "gptq",
    "gptq-8bit-v2",
    "awq",
    "bnb-int8",
    "bnb-4bit",
    "nvfp4-compressed-tensors",
    "nvfp4-modelopt",
    "mxfp4",
    "pack-quantized",
    "int-quantized",
    "fbgemm-fp8",
    "mxfp4-compressed-tensors",
    "ct-more",
];

#[test]
fn every_scheme_dequantizes_bit_identically_to_its_library() {
    let tmp = tempfile::tempdir().unwrap();
    for case in CASES {
        for to in ["BF16", "F16", "F32"] {
            let out = tmp.path().join(format!("{case}-{to}.safetensors"));
            let run = dequantize(case, to, &out);
            assert!(
                run.status.success(),
                "{case} {to}: {}",
                String::from_utf8_lossy(&run.stderr)
            );
            let got = tensors(&out);
            let want = tensors(&dir().join(case).join(format!("expected-{to}.safetensors")));
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>(),
                "{case} {to}: the tensors written"
            );
            for (name, w) in &want {
                let g = &got[name];
                assert_eq!(
                    (&g.0, &g.1),
                    (&w.0, &w.1),
                    "{case} {to}: {name}'s dtype and shape"
                );
                let differ = g.2.iter().zip(&w.2).filter(|(a, b)| a != b).count();
                assert!(g.2 == w.2, "{case} {to}: {name}: {differ} bytes differ");
            }
        }
    }
}

#[test]
fn without_dequantize_the_file_is_copied_as_it_is_with_a_notice() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.safetensors");
    let src = input("gptq");
    let (run, got) = converted(&src, &out, &[]);
    assert_eq!(got, tensors(&src));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("quantized") && stderr.contains("--dequantize"),
        "{stderr}"
    );
}

/// A copy of a case's tensors with `edit` applied, written with the
/// reference writer, next to the case's config.json.
fn hostile(
    case: &str,
    edit: impl FnOnce(&mut BTreeMap<String, (String, Vec<usize>, Vec<u8>)>),
) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let mut t = tensors(&input(case));
    edit(&mut t);
    let views: Vec<(String, safetensors::tensor::TensorView)> = t
        .iter()
        .map(|(n, (dt, shape, data))| {
            let dtype = match dt.as_str() {
                "I32" => safetensors::Dtype::I32,
                "F16" => safetensors::Dtype::F16,
                "BF16" => safetensors::Dtype::BF16,
                "F32" => safetensors::Dtype::F32,
                "F8_E4M3" => safetensors::Dtype::F8_E4M3,
                "I8" => safetensors::Dtype::I8,
                "U8" => safetensors::Dtype::U8,
                "F8_E8M0" => safetensors::Dtype::F8_E8M0,
                "I64" => safetensors::Dtype::I64,
                other => panic!("{other}"),
            };
            (
                n.clone(),
                safetensors::tensor::TensorView::new(dtype, shape.clone(), data).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &tmp.path().join("model.safetensors")).unwrap();
    let config = dir().join(case).join("config.json");
    if config.exists() {
        std::fs::copy(config, tmp.path().join("config.json")).unwrap();
    }
    tmp
}

/// Runs `--dequantize` on the hostile copy: exit 1, one line naming `tensor`
/// and saying `what`, nothing written.
fn refused(tmp: &tempfile::TempDir, tensor: &str, what: &str) {
    let out = tmp.path().join("out.safetensors");
    let run = convert(&[
        tmp.path().join("model.safetensors").as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--dequantize".as_ref(),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(tensor) && stderr.contains(what), "{stderr}");
    assert!(!out.exists());
}

const Q: &str = "model.layers.0.self_attn.q_proj";

#[test]
fn scales_of_the_wrong_shape_are_refused_naming_them() {
    let tmp = hostile("fp8-block", |t| {
        let s = t
            .get_mut("model.layers.0.mlp.down_proj.weight_scale_inv")
            .unwrap();
        s.1 = vec![3, 2];
    });
    refused(&tmp, "down_proj.weight_scale_inv", "shape [3, 2]");
    let tmp = hostile("gptq", |t| {
        let z = t.get_mut(&format!("{Q}.qzeros")).unwrap();
        z.1 = vec![2, 24];
    });
    refused(&tmp, "q_proj.qzeros", "shape [2, 24]");
    let tmp = hostile("nvfp4-modelopt", |t| {
        let s = t
            .get_mut("model.layers.0.self_attn.o_proj.weight_scale")
            .unwrap();
        s.1 = vec![6, 32];
    });
    refused(
        &tmp,
        "o_proj.weight_scale",
        "expected [32, 6] (one per 16 columns)",
    );
}

#[test]
fn scales_of_the_wrong_dtype_are_refused_naming_them() {
    let tmp = hostile("gptq", |t| {
        let s = t.get_mut(&format!("{Q}.scales")).unwrap();
        s.0 = "I32".into();
        s.1[1] /= 2;
    });
    refused(&tmp, "q_proj.scales", "dtype I32");
}

#[test]
fn group_counts_that_do_not_divide_are_refused() {
    // AWQ: 128 input columns in 3 groups.
    let tmp = hostile("awq", |t| {
        for n in ["scales", "qzeros"] {
            let e = t
                .get_mut(&format!("model.layers.0.mlp.up_proj.{n}"))
                .unwrap();
            let row = e.2.len() / e.1[0];
            e.1[0] = 3;
            e.2.truncate(3 * row);
        }
    });
    refused(
        &tmp,
        "up_proj.scales",
        "3 groups do not divide the 128 input columns",
    );
    // compressed-tensors FP8: 96 columns in 5 groups.
    let tmp = hostile("fp8-compressed-tensors", |t| {
        let e = t
            .get_mut("model.layers.2.self_attn.group_proj.weight_scale")
            .unwrap();
        e.1 = vec![48, 5];
        e.2.resize(48 * 5 * 2, 0x3f);
    });
    refused(
        &tmp,
        "group_proj.weight_scale",
        "5 scale columns do not divide",
    );
}

#[test]
fn scales_for_more_groups_than_input_columns_are_refused() {
    // GPTQ with g_idx: every piece reads every group's scales, so a
    // million groups for a few input columns would cost without a bound.
    let tmp = hostile("gptq", |t| {
        let k = t[&format!("{Q}.g_idx")].1[0];
        for n in ["scales", "qzeros"] {
            let e = t.get_mut(&format!("{Q}.{n}")).unwrap();
            let row = e.2.len() / e.1[0];
            e.1[0] = k + 1;
            e.2.resize((k + 1) * row, 0x11);
        }
    });
    refused(&tmp, "q_proj.scales", "groups of scales for");
}

#[test]
fn a_row_longer_than_the_most_dequantized_is_refused() {
    // One FP8 row of 2^21 + 16 values, a per-tensor scale: dequantizing
    // holds a row at a time, so this one is refused; copied as it is, it
    // is an ordinary tensor.
    let tmp = tempfile::tempdir().unwrap();
    let cols = (1usize << 21) + 16;
    let codes = vec![0x38u8; cols];
    let scale = 1.0f32.to_le_bytes();
    let views = vec![
        (
            "w.weight".to_string(),
            safetensors::tensor::TensorView::new(
                safetensors::Dtype::F8_E4M3,
                vec![1, cols],
                &codes,
            )
            .unwrap(),
        ),
        (
            "w.weight_scale".to_string(),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![], &scale).unwrap(),
        ),
    ];
    let model = tmp.path().join("model.safetensors");
    safetensors::serialize_to_file(views, None, &model).unwrap();
    refused(&tmp, "w.weight", &format!("rows of {cols} values"));
    let out = tmp.path().join("copied.safetensors");
    let run = convert(&[model.as_os_str(), "-o".as_ref(), out.as_os_str()]);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn a_g_idx_naming_a_missing_group_is_refused() {
    let tmp = hostile("gptq", |t| {
        let g = t.get_mut(&format!("{Q}.g_idx")).unwrap();
        g.2[40..44].copy_from_slice(&9i32.to_le_bytes());
    });
    refused(
        &tmp,
        "q_proj",
        "g_idx[10] is 9, but the scales have 4 groups",
    );
}

#[test]
fn a_weight_without_its_scales_is_refused() {
    let tmp = hostile("gptq", |t| {
        t.remove(&format!("{Q}.scales"));
    });
    refused(&tmp, "q_proj.qweight", "q_proj.scales is missing");
}

#[test]
fn a_config_that_does_not_parse_is_refused() {
    let tmp = hostile("gptq", |_| {});
    std::fs::write(
        tmp.path().join("config.json"),
        br#"{"quantization_config": {"bits": "four"}}"#,
    )
    .unwrap();
    refused(&tmp, "config.json", "quantization_config");
}

#[test]
fn inspect_names_the_scheme_and_the_size_after_dequantization() {
    // The JSON report of every scheme: `inspect_names_the_low_bit_schemes_and_their_size`.
    let run = convert(&["inspect".as_ref(), input("fp8-sharded").as_os_str()]);
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("quantized: fp8 (1 weights)"), "{text}");
}

#[test]
fn standard_output_gets_the_same_bytes_as_a_file() {
    // Standard output is written through the sources' async `open`; a
    // file through their blocking readers.
    let tmp = tempfile::tempdir().unwrap();
    for case in ["gptq", "fp8-sharded", "awq"] {
        let out = tmp.path().join("out.safetensors");
        let run = dequantize(case, "BF16", &out);
        assert!(run.status.success());
        let piped = convert(&[
            input(case).as_os_str(),
            "-o".as_ref(),
            "-".as_ref(),
            "--dequantize".as_ref(),
        ]);
        assert!(
            piped.status.success(),
            "{}",
            String::from_utf8_lossy(&piped.stderr)
        );
        assert_eq!(piped.stdout, std::fs::read(&out).unwrap(), "{case}");
    }
}

#[test]
fn a_quant_state_record_that_does_not_parse_is_refused() {
    let record = "model.layers.1.mlp.up_proj.weight.quant_state.bitsandbytes__nf4";
    let tmp = hostile("bnb-4bit", |t| {
        let r = t.get_mut(record).unwrap();
        r.2 = br#"{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [24, 6"#
            .to_vec();
        r.1 = vec![r.2.len()];
    });
    refused(
        &tmp,
        record,
        "bitsandbytes quant_state record: EOF while parsing",
    );
    // A block size the library refuses.
    let tmp = hostile("bnb-4bit", |t| {
        let r = t.get_mut(record).unwrap();
        let text = String::from_utf8(r.2.clone())
            .unwrap()
            .replace("\"blocksize\": 64", "\"blocksize\": 48");
        r.2 = text.into_bytes();
        r.1 = vec![r.2.len()];
    });
    refused(&tmp, record, "blocksize 48");
    // An absmax that does not cover the weight.
    let tmp = hostile("bnb-4bit", |t| {
        let a = t
            .get_mut("model.layers.1.mlp.up_proj.weight.absmax")
            .unwrap();
        a.1 = vec![a.1[0] - 1];
        a.2.truncate(a.2.len() - 4);
    });
    refused(
        &tmp,
        "up_proj.weight.absmax",
        "expected [24] (one per 64 elements)",
    );
}

const EXPERTS: &str = "model.layers.0.mlp.experts";

#[test]
fn mxfp4_experts_come_out_transposed_as_transformers_names_them() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.safetensors");
    assert!(dequantize("mxfp4", "BF16", &out).status.success());
    let got = tensors(&out);
    // [experts, rows, blocks, 16] -> [experts, blocks * 32, rows].
    assert_eq!(got[&format!("{EXPERTS}.gate_up_proj")].1, vec![3, 64, 64]);
    assert_eq!(got[&format!("{EXPERTS}.down_proj")].1, vec![3, 32, 64]);
    assert!(got
        .keys()
        .all(|n| !n.ends_with("_blocks") && !n.ends_with("_scales")));
}

#[test]
fn hostile_mxfp4_auxiliaries_are_refused_naming_the_tensor() {
    let blocks = format!("{EXPERTS}.gate_up_proj_blocks");
    let scales = format!("{EXPERTS}.gate_up_proj_scales");
    // Blocks of 8 bytes (16 codes): not MXFP4's 32.
    let tmp = hostile("mxfp4", |t| {
        let b = t.get_mut(&blocks).unwrap();
        b.1 = vec![3, 64, 4, 8];
    });
    refused(&tmp, &blocks, "32 codes, 16 bytes, a block");
    // One scale too few per row.
    let tmp = hostile("mxfp4", |t| {
        let s = t.get_mut(&scales).unwrap();
        s.1 = vec![3, 64, 1];
        s.2.truncate(3 * 64);
    });
    refused(&tmp, &scales, "expected [3, 64, 2] (one per block)");
    // Scales as floats: a wrong reading would scale by 1e40.
    let tmp = hostile("mxfp4", |t| {
        let s = t.get_mut(&scales).unwrap();
        s.0 = "F16".into();
        s.1 = vec![3, 64, 1];
    });
    refused(&tmp, &scales, "dtype F16, expected U8 or F8_E8M0");
    // Scale 0xFF is NaN in E8M0: refused, with its byte offset.
    let tmp = hostile("mxfp4", |t| {
        let s = t.get_mut(&scales).unwrap();
        s.2[130] = 0xff;
    });
    refused(
        &tmp,
        &scales,
        "scale 0xFF (NaN in E8M0) for block 0 of row 1 of expert 1",
    );
    // Missing scales when config.json says mxfp4.
    let tmp = hostile("mxfp4", |t| {
        t.remove(&scales);
    });
    refused(&tmp, &blocks, "gate_up_proj_scales is missing");
}

#[test]
fn mxfp4_scales_stored_as_f8_e8m0_read_the_same() {
    let scales = format!("{EXPERTS}.down_proj_scales");
    let tmp = hostile("mxfp4", |t| {
        t.get_mut(&scales).unwrap().0 = "F8_E8M0".into();
    });
    let out = tmp.path().join("out.safetensors");
    let (_, got) = converted(
        &tmp.path().join("model.safetensors"),
        &out,
        &["--dequantize-to", "F32"],
    );
    assert_eq!(got, tensors(&dir().join("mxfp4/expected-F32.safetensors")));
}

#[test]
fn hostile_compressed_tensors_integer_packs_are_refused_naming_the_tensor() {
    let k = "model.layers.0.self_attn.k_proj";
    // Zero points packed along the columns (the wrong way): [40, 1] words.
    let tmp = hostile("pack-quantized", |t| {
        let z = t.get_mut(&format!("{k}.weight_zero_point")).unwrap();
        z.1 = vec![4, 5];
    });
    refused(
        &tmp,
        &format!("{k}.weight_zero_point"),
        "expected [5, 4] (40 zero points of 4 bits packed down each column)",
    );
    // Zero points unpacked (I8) where the codes are packed.
    let tmp = hostile("pack-quantized", |t| {
        let z = t.get_mut(&format!("{k}.weight_zero_point")).unwrap();
        z.0 = "I8".into();
        z.1 = vec![20, 4];
    });
    refused(
        &tmp,
        &format!("{k}.weight_zero_point"),
        "dtype I8, expected I32",
    );
    // Words that hold no declared bit width's codes.
    let tmp = hostile("pack-quantized", |t| {
        let w = t.get_mut(&format!("{k}.weight_packed")).unwrap();
        w.1 = vec![40, 5];
        w.2.truncate(40 * 5 * 4);
    });
    refused(
        &tmp,
        &format!("{k}.weight_packed"),
        "5 words a row do not hold 64 codes",
    );
    // Scales for groups that do not divide the columns.
    let tmp = hostile("int-quantized", |t| {
        let s = t
            .get_mut("model.layers.0.mlp.gate_proj.weight_scale")
            .unwrap();
        s.1 = vec![24, 5];
        s.2.resize(24 * 5 * 2, 0x20);
    });
    refused(
        &tmp,
        "gate_proj.weight_scale",
        "5 groups do not divide the 96 columns",
    );
}

#[test]
fn inspect_names_the_low_bit_schemes_and_their_size() {
    for (case, scheme, weights) in [
        ("gptq", "gptq", 1),
        ("mxfp4", "mxfp4", 2),
        ("pack-quantized", "pack-quantized", 4),
        ("int-quantized", "int-quantized", 2),
        ("fbgemm-fp8", "fbgemm-fp8", 2),
        ("mxfp4-compressed-tensors", "mxfp4-pack-quantized", 2),
    ] {
        let run = convert(&[
            "inspect".as_ref(),
            "--json".as_ref(),
            input(case).as_os_str(),
        ]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
        let want = tensors(&dir().join(case).join("expected-BF16.safetensors"));
        let bytes: usize = want.values().map(|t| t.2.len()).sum();
        assert_eq!(
            v["quantized"]["schemes"],
            serde_json::json!([scheme]),
            "{case}"
        );
        assert_eq!(v["quantized"]["weights"], weights, "{case}");
        assert_eq!(v["quantized"]["dequantized_bytes"], bytes, "{case}");
    }
}

/// An FP8 weight of codes `0x38` (1.0) and `0xc0` (-2.0) whose block scale
/// is the E8M0 byte `scale`, in a folder of its own.
fn fp8_with_e8m0_scale(scale: u8) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let codes = [0x38u8, 0xc0, 0x38, 0xc0];
    let scales = [scale];
    let views = vec![
        (
            "w.weight",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F8_E4M3, vec![2, 2], &codes)
                .unwrap(),
        ),
        (
            "w.weight_scale_inv",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F8_E8M0, vec![1, 1], &scales)
                .unwrap(),
        ),
    ];
    safetensors::serialize_to_file(views, None, &tmp.path().join("model.safetensors")).unwrap();
    tmp
}

#[test]
fn e8m0_block_scales_are_powers_of_two_and_nan_is_refused() {
    // 2^(130 - 127) = 8: the codes times 8, in f32.
    let tmp = fp8_with_e8m0_scale(130);
    let out = tmp.path().join("out.safetensors");
    let (_, got) = converted(
        &tmp.path().join("model.safetensors"),
        &out,
        &["--dequantize-to", "F32"],
    );
    let want: Vec<u8> = [8.0f32, -16.0, 8.0, -16.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(got["w.weight"].2, want);
    // 0xFF is NaN: never a factor of 2^128, never a NaN weight.
    let tmp = fp8_with_e8m0_scale(0xff);
    refused(&tmp, "w.weight_scale_inv", "E8M0 scale 0 is 0xFF, NaN");
}

#[test]
fn fbgemm_scales_that_are_not_one_f32_a_row_are_refused() {
    let scale = "model.layers.0.mlp.down_proj.weight_scale";
    let tmp = hostile("fbgemm-fp8", |t| {
        let s = t.get_mut(scale).unwrap();
        s.1 = vec![24, 2];
        s.2.extend_from_within(..);
    });
    refused(
        &tmp,
        scale,
        "expected [24, 1] (one scale a row, as FBGEMM writes)",
    );
    let tmp = hostile("fbgemm-fp8", |t| {
        let s = t.get_mut(scale).unwrap();
        s.0 = "BF16".into();
        s.1 = vec![24, 2];
    });
    refused(&tmp, scale, "fbgemm-fp8: dtype BF16, expected F32");
}

#[test]
fn a_compressed_tensors_g_idx_maps_columns_to_groups() {
    let k = "model.layers.0.self_attn.k_proj";
    let g_idx =
        |f: &dyn Fn(i32) -> i32| -> Vec<u8> { (0..64).flat_map(|j| f(j).to_le_bytes()).collect() };
    // The columns' own groups (64 columns in groups of 16): the same weight.
    let tmp = hostile("pack-quantized", |t| {
        t.insert(
            format!("{k}.weight_g_idx"),
            ("I32".into(), vec![64], g_idx(&|j| j / 16)),
        );
    });
    let out = tmp.path().join("out.safetensors");
    let (_, got) = converted(
        &tmp.path().join("model.safetensors"),
        &out,
        &["--dequantize-to", "F16"],
    );
    let want = tensors(&dir().join("pack-quantized/expected-F16.safetensors"));
    assert_eq!(got, want);
    // A group the scales do not have.
    let tmp = hostile("pack-quantized", |t| {
        t.insert(
            format!("{k}.weight_g_idx"),
            (
                "I32".into(),
                vec![64],
                g_idx(&|j| if j == 9 { 4 } else { j / 16 }),
            ),
        );
    });
    refused(
        &tmp,
        "k_proj",
        "g_idx[9] is 4, but the scales have 4 groups",
    );
}

#[test]
fn compressed_tensors_mxfp4_scales_are_checked() {
    let scale = "model.layers.0.mlp.up_proj.weight_scale";
    let tmp = hostile("mxfp4-compressed-tensors", |t| {
        t.get_mut(scale).unwrap().2[7] = 0xff;
    });
    refused(
        &tmp,
        "up_proj",
        &format!("{scale}: E8M0 scale 7 is 0xFF, NaN"),
    );
    let tmp = hostile("mxfp4-compressed-tensors", |t| {
        let s = t.get_mut(scale).unwrap();
        s.1 = vec![24, 2];
        s.2.truncate(48);
    });
    refused(&tmp, scale, "expected [24, 3] (one per 32 columns)");
}

#[test]
fn an_f8_e8m0_tensor_is_copied_as_it_is_and_not_cast() {
    // Scales 2^-127, 1, 2^127 and NaN: a plain tensor keeps its bytes; no
    // cast reads them as a float (--cast-all leaves them, --cast refuses).
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("e8m0.safetensors");
    let bytes = [0u8, 127, 254, 255];
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F8_E8M0, vec![4], &bytes).unwrap();
    safetensors::serialize_to_file(vec![("s", view)], None, &input).unwrap();
    let out = tmp.path().join("out.safetensors");
    let (_, got) = converted(&input, &out, &["--cast-all", "F32"]);
    assert_eq!(got["s"], ("F8_E8M0".to_string(), vec![4], bytes.to_vec()));
    let run = convert(&[
        input.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--cast".as_ref(),
        "F8_E8M0=F32".as_ref(),
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("cannot cast F8_E8M0 to F32"));
}

#[test]
fn hostile_compressed_tensors_blocks_and_mx_scales_are_refused_naming_the_tensor() {
    // A block strategy's zero points not one a scale ([3, 2] scales).
    let q1 = "model.layers.1.self_attn.q_proj";
    let tmp = hostile("ct-more", |t| {
        t.get_mut(&format!("{q1}.weight_zero_point")).unwrap().1 = vec![2, 3];
    });
    refused(
        &tmp,
        &format!("{q1}.weight_zero_point"),
        "expected [3, 2] (one a scale)",
    );
    // MXFP8 scales that are not one a 32 columns of the [8, 64] weight.
    let down = "model.layers.0.mlp.down_proj.weight_scale";
    let tmp = hostile("ct-more", |t| t.get_mut(down).unwrap().1 = vec![2, 8]);
    refused(&tmp, down, "MXFP8: one E8M0 scale a 32 columns");
    // An MXFP6 scale of 0xFF, E8M0's NaN: no number to multiply by.
    let gate = "model.layers.0.mlp.gate_proj.weight_scale";
    let tmp = hostile("ct-more", |t| t.get_mut(gate).unwrap().2[3] = 0xFF);
    refused(&tmp, gate, "E8M0 scale 3 is 0xFF, NaN");
}

#[test]
fn a_one_row_pack_quantized_weight_with_a_per_tensor_zero_point_is_dequantized() {
    // With one row, a [1] scale is the tensor strategy's and the channel
    // strategy's alike. compressed-tensors packs the zero point (I32, down
    // the rows) for the group and channel strategies only, and stores the
    // tensor strategy's as one I8: an I8 zero point of one value says the
    // tensor strategy. The first row of ct-more's [16, 64] tensor-strategy
    // weight (4 bits, asymmetric) is that weight's first row dequantized.
    let tmp = hostile("ct-more", |t| {
        let p = t.get_mut(&format!("{Q}.weight_packed")).unwrap();
        p.1 = vec![1, 8];
        p.2.truncate(32);
        let s = t.get_mut(&format!("{Q}.weight_shape")).unwrap();
        assert_eq!(s.0, "I64");
        s.2 = [1i64, 64].iter().flat_map(|v| v.to_le_bytes()).collect();
    });
    let out = tmp.path().join("out.safetensors");
    let model = tmp.path().join("model.safetensors");
    let (_, got) = converted(&model, &out, &["--dequantize-to", "F32"]);
    let want = tensors(&dir().join("ct-more/expected-F32.safetensors"));
    let name = format!("{Q}.weight");
    assert_eq!(got[&name].1, [1, 64]);
    assert_eq!(got[&name].2, want[&name].2[..64 * 4]);
}
