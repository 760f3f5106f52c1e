//! Dequantizing stays within bounded memory whatever the weight's size:
//! a 32 MiB FP8 weight and a 32 MiB (as BF16) GPTQ weight convert with a
//! heap peak far below their size, measured with a counting allocator (one
//! measurement at a time).
//!
//! Print the peaks with `cargo test --test memory quantized -- --nocapture`.

use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::Dtype as St;
use safetensors_stream::convert::{convert, ConvertOptions, Output};
use safetensors_stream::{Dtype, SourceOptions};

/// What a conversion may hold above what was live before: half of one
/// weight's output, so holding a whole weight fails.
const LIMIT: usize = 16 << 20;

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 56) as u8
        })
        .collect()
}

fn write(path: &Path, tensors: &[(&str, St, Vec<usize>, &[u8])]) {
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, dt, shape, data)| {
            (
                n.to_string(),
                TensorView::new(*dt, shape.clone(), data).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// The caller holds [`crate::alloc::serial`] from its first line: its
/// input, built beforehand, counts in no other test's peak.
pub(crate) fn dequantize_peak(input: &Path, out: &Path) -> usize {
    let mut options = ConvertOptions::default();
    options.source = SourceOptions::default().dequantize(Some(Dtype::BF16));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (report, peak) = crate::alloc::peak_during(|| {
        rt.block_on(convert(
            &[input.to_path_buf()],
            &Output::File(out.to_path_buf()),
            &options,
        ))
    });
    report.unwrap();
    peak
}

#[test]
fn a_large_fp8_weight_dequantizes_in_bounded_memory() {
    let _serial = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (m, n) = (4096usize, 4096usize);
    // E4M3 codes without NaN (0x7f/0xff), and block scales.
    let mut codes = noise(m * n, 1);
    codes
        .iter_mut()
        .filter(|c| **c & 0x7f == 0x7f)
        .for_each(|c| *c &= 0xfe);
    let scales: Vec<u8> = (0..(m / 128) * (n / 128))
        .flat_map(|i| (1.0f32 + i as f32 / 1024.0).to_le_bytes())
        .collect();
    let input = tmp.path().join("fp8.safetensors");
    write(
        &input,
        &[
            ("w.weight", St::F8_E4M3, vec![m, n], &codes),
            (
                "w.weight_scale_inv",
                St::F32,
                vec![m / 128, n / 128],
                &scales,
            ),
        ],
    );
    drop(codes);
    let out = tmp.path().join("out.safetensors");
    let peak = dequantize_peak(&input, &out);
    println!(
        "fp8 {m}x{n} -> BF16 ({} MiB): heap peak {:.1} MiB",
        (m * n * 2) >> 20,
        peak as f64 / (1 << 20) as f64
    );
    assert!(std::fs::metadata(&out).unwrap().len() > (m * n * 2) as u64);
    assert!(peak < LIMIT, "peak {peak}");
}

#[test]
fn a_large_gptq_weight_dequantizes_in_bounded_memory() {
    let _serial = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (k, n, groups) = (4096usize, 4096usize, 32usize);
    let qweight = noise(k / 8 * n * 4, 2);
    let qzeros = noise(groups * n / 8 * 4, 3);
    let scales: Vec<u8> = (0..groups * n)
        .flat_map(|i| half::f16::from_f32(0.001 + (i % 97) as f32 / 8192.0).to_le_bytes())
        .collect();
    let input = tmp.path().join("gptq.safetensors");
    write(
        &input,
        &[
            ("w.qweight", St::I32, vec![k / 8, n], &qweight),
            ("w.qzeros", St::I32, vec![groups, n / 8], &qzeros),
            ("w.scales", St::F16, vec![groups, n], &scales),
        ],
    );
    drop(qweight);
    let out = tmp.path().join("out.safetensors");
    let peak = dequantize_peak(&input, &out);
    println!(
        "gptq {n}x{k} -> BF16 ({} MiB): heap peak {:.1} MiB",
        (k * n * 2) >> 20,
        peak as f64 / (1 << 20) as f64
    );
    assert!(std::fs::metadata(&out).unwrap().len() > (k * n * 2) as u64);
    assert!(peak < LIMIT, "peak {peak}");
}

#[test]
fn gpt_oss_sized_mxfp4_experts_dequantize_in_bounded_memory() {
    let _serial = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    // gpt-oss-120b's gate_up_proj experts: 5760 rows of 90 blocks (8.3 MB each).
    let (experts, rows, groups) = (2usize, 5760usize, 90usize);
    let blocks = noise(experts * rows * groups * 16, 4);
    let scales: Vec<u8> = noise(experts * rows * groups, 5)
        .iter()
        .map(|b| 112 + b % 24)
        .collect();
    let input = tmp.path().join("mxfp4.safetensors");
    write(
        &input,
        &[
            (
                "w.gate_up_proj_blocks",
                St::U8,
                vec![experts, rows, groups, 16],
                &blocks,
            ),
            (
                "w.gate_up_proj_scales",
                St::U8,
                vec![experts, rows, groups],
                &scales,
            ),
        ],
    );
    drop(blocks);
    let out = tmp.path().join("out.safetensors");
    let peak = dequantize_peak(&input, &out);
    let bytes = experts * rows * groups * 32 * 2;
    println!(
        "mxfp4 {experts}x{rows}x{groups}x16 -> BF16 ({} MiB): heap peak {:.1} MiB",
        bytes >> 20,
        peak as f64 / (1 << 20) as f64
    );
    assert!(std::fs::metadata(&out).unwrap().len() > bytes as u64);
    assert!(peak < LIMIT, "peak {peak}");
}

#[test]
fn a_large_pack_quantized_int4_weight_dequantizes_in_bounded_memory() {
    let _serial = crate::alloc::serial();
    let tmp = tempfile::tempdir().unwrap();
    let (n, k, group) = (4096usize, 4096usize, 128usize);
    let packed = noise(n * k / 2, 6);
    let scales: Vec<u8> = (0..n * k / group)
        .flat_map(|i| half::bf16::from_f32(0.001 + (i % 89) as f32 / 8192.0).to_le_bytes())
        .collect();
    let shape: Vec<u8> = [n as i64, k as i64]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let input = tmp.path().join("int4.safetensors");
    write(
        &input,
        &[
            ("w.weight_packed", St::I32, vec![n, k / 8], &packed),
            ("w.weight_scale", St::BF16, vec![n, k / group], &scales),
            ("w.weight_shape", St::I64, vec![2], &shape),
        ],
    );
    drop(packed);
    let out = tmp.path().join("out.safetensors");
    let peak = dequantize_peak(&input, &out);
    println!(
        "pack-quantized int4 {n}x{k} -> BF16 ({} MiB): heap peak {:.1} MiB",
        (n * k * 2) >> 20,
        peak as f64 / (1 << 20) as f64
    );
    assert!(std::fs::metadata(&out).unwrap().len() > (n * k * 2) as u64);
    assert!(peak < LIMIT, "peak {peak}");
}
