//! Micro-benchmarks of the kernels a maintainer edits: casts and
//! dequantization on each vector path this CPU has (`scalar` is the
//! reference), byte swaps, header encoding, planning a million tensors, the
//! Fortran-order reader. Throughput is in bytes of input and in elements
//! (or tensors planned).
//!
//! ```text
//! cargo bench --bench kernels            # all
//! cargo bench --bench kernels -- cast    # those whose name contains "cast"
//! ```
//! Whole-job figures against `cp` and the Python reference are `bench.py`'s.

use std::io::{Read, Write};

use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use safetensors_stream::header::{encode, Order, TensorMeta};
use safetensors_stream::internals::{dequant, with_isa, FortranReader, Isa};
use safetensors_stream::plan::Cast;
use safetensors_stream::plan::{plan, PlanOptions};
use safetensors_stream::source::Listing;
use safetensors_stream::source::Transform;
use safetensors_stream::Dtype;

fn main() {
    divan::main();
}

/// 4 MiB: the sink's default buffer, the unit every kernel runs on.
const BUF: usize = 4 << 20;

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// A kernel's case: what it converts, on which path.
#[derive(Clone, Copy)]
struct Case<T> {
    what: T,
    isa: Isa,
}

impl<T: std::fmt::Display> std::fmt::Display for Case<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.what, self.isa.name())
    }
}

/// `what` on every path this CPU has.
fn on_each_path<T: Copy>(what: &[T]) -> Vec<Case<T>> {
    what.iter()
        .flat_map(|&what| Isa::available().map(move |isa| Case { what, isa }))
        .collect()
}

/// A cast, shown as `F32->BF16`.
#[derive(Clone, Copy)]
struct Pair(Dtype, Dtype);

impl std::fmt::Display for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}->{}", self.0, self.1)
    }
}

fn casts() -> Vec<Case<Pair>> {
    use Dtype::*;
    on_each_path(&[
        Pair(F32, BF16),
        Pair(F32, F16),
        Pair(BF16, F32),
        Pair(F16, F32),
        Pair(BF16, F16),
        Pair(F16, BF16),
        Pair(F64, F32),
    ])
}

#[divan::bench(args = casts())]
fn cast(bencher: Bencher, case: Case<Pair>) {
    let cast = Cast::new(case.what.0, case.what.1).unwrap();
    let input = pattern(BUF / cast.in_width() * cast.in_width());
    let mut output = vec![0u8; input.len() / cast.in_width() * cast.out_width()];
    bencher
        .counter(BytesCount::new(input.len()))
        .counter(ItemsCount::new(input.len() / cast.in_width()))
        .bench_local(|| {
            with_isa(case.isa, || {
                cast.apply(black_box(&input), black_box(&mut output))
            })
        });
}

/// Elements per dequantization piece: the quantized reader's piece (2^20).
const PIECE: usize = 1 << 20;

/// DeepSeek-V3's FP8 weight: 128 x 128 tiles, F32 scales, to BF16 (and to
/// F32), and compressed-tensors' per-channel BF16 scales.
fn fp8_cases() -> Vec<Case<&'static str>> {
    on_each_path(&[
        "block-f32->BF16",
        "block-f32->BF16 fused",
        "block-f32->F32",
        "channel-bf16->BF16",
    ])
}

#[divan::bench(args = fp8_cases())]
fn fp8(bencher: Bencher, case: Case<&str>) {
    let cols = 7168;
    let rows = PIECE / cols;
    // No NaN codes, as in real weights (and kernels_e2e.py's input).
    let codes: Vec<u8> = pattern(rows * cols)
        .into_iter()
        .map(|c| if c & 0x7f == 0x7f { c & 0xfe } else { c })
        .collect();
    let (block, scale_dtype, to) = match case.what {
        "block-f32->BF16" | "block-f32->BF16 fused" => (128, Dtype::F32, Dtype::BF16),
        "block-f32->F32" => (128, Dtype::F32, Dtype::F32),
        _ => (cols as u64, Dtype::BF16, Dtype::BF16),
    };
    let scales: Vec<f32> = (0..rows * cols.div_ceil(block as usize))
        .map(|i| 1.0 + i as f32 / 64.0)
        .collect();
    let mut values = vec![0f32; codes.len()];
    let mut out = vec![0u8; codes.len() * to.byte_width().unwrap() as usize];
    bencher
        .counter(BytesCount::new(codes.len()))
        .counter(ItemsCount::new(codes.len()))
        .bench_local(|| {
            with_isa(case.isa, || match case.what.ends_with("fused") {
                true => dequant::fp8_rows_into(
                    black_box(&codes),
                    cols,
                    &scales,
                    block,
                    scale_dtype,
                    to,
                    &mut out,
                ),
                false => dequant::fp8_rows(
                    black_box(&codes),
                    cols,
                    &scales,
                    block,
                    scale_dtype,
                    &mut values,
                    to,
                    &mut out,
                ),
            })
        });
}

/// The GGUF types llama.cpp files are made of, to BF16.
fn ggml_cases() -> Vec<Case<&'static str>> {
    on_each_path(&[
        "Q8_0",
        "Q4_0",
        "Q4_K",
        "Q4_K fused",
        "Q5_K",
        "Q6_K",
        "IQ4_XS",
    ])
}

#[divan::bench(args = ggml_cases())]
fn ggml(bencher: Bencher, case: Case<&str>) {
    let (name, fused) = match case.what.strip_suffix(" fused") {
        Some(name) => (name, true),
        None => (case.what, false),
    };
    let (bytes, elems) = dequant::ggml_block(name);
    let n = PIECE / elems;
    let mut blocks = pattern(n * bytes);
    // Scales (an f16 at the block's start or end) finite, as in a real file.
    for b in blocks.chunks_exact_mut(bytes) {
        let at = if name == "Q6_K" { bytes - 2 } else { 0 };
        b[at..at + 2].copy_from_slice(&0x2c00u16.to_le_bytes());
    }
    let mut values = vec![0f32; n * elems];
    let mut out = vec![0u8; n * elems * 2];
    bencher
        .counter(BytesCount::new(blocks.len()))
        .counter(ItemsCount::new(n * elems))
        .bench_local(|| {
            with_isa(case.isa, || match fused {
                true => dequant::ggml_into(name, black_box(&blocks), Dtype::BF16, &mut out),
                false => {
                    dequant::ggml(name, black_box(&blocks), &mut values, Dtype::BF16, &mut out)
                }
            })
        });
}

/// The 4-bit schemes, to BF16: bitsandbytes NF4 (blocks of 64), GPTQ and
/// AWQ int4 (groups of 128, F16 scales), compressed-tensors' MXFP4 and
/// gpt-oss's (transposed).
fn four_bit_cases() -> Vec<Case<&'static str>> {
    on_each_path(&[
        "NF4",
        "GPTQ int4",
        "AWQ int4",
        "MXFP4 packed",
        "MXFP4 transposed",
    ])
}

#[divan::bench(args = four_bit_cases())]
fn four_bit(bencher: Bencher, case: Case<&str>) {
    // AWQ's words are one per input column and 8 rows: the largest input.
    let cols = 4096;
    let raw = pattern(PIECE * 4 / 8 + 4096);
    let mut values = vec![0f32; PIECE];
    let mut out = vec![0u8; PIECE * 2];
    bencher.counter(ItemsCount::new(PIECE)).bench_local(|| {
        with_isa(case.isa, || {
            dequant::four_bit(case.what, black_box(&raw), cols, &mut values, &mut out)
        })
    });
}

/// gpt-oss MXFP4 to BF16 on the end-to-end shape: a gpt-oss-120b expert
/// band (5760 source rows of 30 blocks, 2.8 MB, past L2), its 960 output
/// rows (11,520 B apart) made in the part reader's pieces of 40 rows,
/// `piece/call` saying the piece's output rows and each kernel call's;
/// `float`: a scale in every tile past BF16's normal range, so every tile
/// takes the float path (as main's kernel did every tile) instead of the
/// exponent one.
fn mxfp4_band_cases() -> Vec<Case<&'static str>> {
    on_each_path(&[
        "40/8",
        "40/40",
        "32/32",
        "64/64",
        "88/88",
        "91/91",
        "40/40 float",
        "88/88 float",
        "91/91 float",
    ])
}

#[divan::bench(args = mxfp4_band_cases())]
fn mxfp4_band(bencher: Bencher, case: Case<&str>) {
    let (rows, width) = (5760, 30);
    let raw = pattern(rows * width * 16);
    let (shape, extreme) = match case.what.split_once(' ') {
        Some((shape, _)) => (shape, true),
        None => (case.what, false),
    };
    let (piece, call) = shape.split_once('/').expect("piece/call");
    let (piece, call) = (piece.parse().unwrap(), call.parse().unwrap());
    let mut out = vec![0u8; piece * rows * 2];
    bencher
        .counter(ItemsCount::new(rows * width * 32))
        .bench_local(|| {
            with_isa(case.isa, || {
                let (raw, shape) = (black_box(&raw[..]), (rows, width));
                dequant::mxfp4_band(raw, shape, (piece, call), extreme, &mut out)
            })
        });
}

#[divan::bench(args = [2, 4, 8])]
fn swap_bytes(bencher: Bencher, width: usize) {
    let mut buf = pattern(BUF);
    let t = Transform::SwapBytes { width };
    bencher
        .counter(BytesCount::new(BUF))
        .bench_local(|| t.apply(black_box(&mut buf)));
}

fn metas(n: usize) -> Vec<TensorMeta> {
    // Names in reverse, so canonical order has to sort them.
    (0..n)
        .rev()
        .map(|i| TensorMeta::new(format!("model.layers.{i}.weight"), Dtype::F32, [1]))
        .collect()
}

#[divan::bench(args = [1_000, 100_000])]
fn header_encode(bencher: Bencher, n: usize) {
    let tensors = metas(n);
    bencher
        .counter(ItemsCount::new(n))
        .with_inputs(|| tensors.clone())
        .bench_local_values(|t| encode(t, None, Order::Canonical).unwrap());
}

#[divan::bench(sample_count = 5, args = [1_000_000])]
fn plan_tensors(bencher: Bencher, n: usize) {
    let listing = Listing {
        input: "in.safetensors".into(),
        tensors: metas(n),
        metadata: None,
    };
    let listings = [listing];
    let options = PlanOptions::default();
    bencher
        .counter(ItemsCount::new(n))
        .bench_local(|| plan(black_box(&listings), &options).unwrap());
}

/// A 16 MiB F32 array in Fortran order, read back in C order.
#[divan::bench(args = [[2048u64, 2048]])]
fn fortran_reader(bencher: Bencher, shape: [u64; 2]) {
    fortran(bencher, &shape);
}

#[divan::bench(args = [[64u64, 256, 256]])]
fn fortran_reader_3d(bencher: Bencher, shape: [u64; 3]) {
    fortran(bencher, &shape);
}

fn fortran(bencher: Bencher, shape: &[u64]) {
    let len = shape.iter().product::<u64>() as usize * 4;
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&pattern(len)).unwrap();
    let mut out = vec![0u8; 1 << 20];
    bencher.counter(BytesCount::new(len)).bench_local(|| {
        let mut r = FortranReader::new(file.try_clone().unwrap(), 0, shape, 4);
        while r.read(&mut out).unwrap() > 0 {}
    });
}
