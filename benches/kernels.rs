//! Micro-benchmarks of the kernels a maintainer edits: casts, byte swaps,
//! header encoding, planning a million tensors, the Fortran-order reader.
//! Throughput is in bytes of input (or tensors planned).
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
use safetensors_stream::internals::FortranReader;
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

#[divan::bench(args = [
    (Dtype::F32, Dtype::BF16),
    (Dtype::F32, Dtype::F16),
    (Dtype::BF16, Dtype::F32),
    (Dtype::F16, Dtype::F32),
    (Dtype::F64, Dtype::F32),
])]
fn cast(bencher: Bencher, (from, to): (Dtype, Dtype)) {
    let cast = Cast::new(from, to).unwrap();
    let input = pattern(BUF / cast.in_width() * cast.in_width());
    let mut output = vec![0u8; input.len() / cast.in_width() * cast.out_width()];
    bencher
        .counter(BytesCount::new(input.len()))
        .bench_local(|| cast.apply(black_box(&input), black_box(&mut output)));
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
