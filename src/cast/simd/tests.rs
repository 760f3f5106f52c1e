//! Every vector path against the reference, bit for bit and overflow
//! count for count: exhaustively over 16-bit inputs, over every high half
//! of an F32 with low halves that decide ties, and over random inputs, on
//! each path this CPU has (the reference forced with [`with_isa`]).

use proptest::prelude::*;

use super::{isa, with_isa, Isa};
use crate::cast::Cast;
use crate::Dtype::{self, *};

/// The output and the overflow count of `from -> to` over `input` on `isa`.
fn run(isa: Isa, from: Dtype, to: Dtype, input: &[u8]) -> (Vec<u8>, u64) {
    let cast = Cast::new(from, to).unwrap();
    let mut out = vec![0u8; input.len() / cast.in_width() * cast.out_width()];
    let over = with_isa(isa, || cast.apply(input, &mut out));
    (out, over)
}

/// The vector paths agree with the reference on `input`, which each runs
/// mostly in whole vectors (the reference does the tail).
fn agree(from: Dtype, to: Dtype, input: &[u8]) {
    let (want, want_over) = run(Isa::Scalar, from, to, input);
    let w = Cast::new(from, to).unwrap().out_width();
    for path in Isa::available().filter(|&i| i != Isa::Scalar) {
        let (got, over) = run(path, from, to, input);
        if let Some(e) = (0..want.len() / w).find(|e| got[e * w..][..w] != want[e * w..][..w]) {
            let iw = input.len() / (want.len() / w);
            panic!(
                "{path:?} {from} -> {to}: element {e}, input {:02x?}: got {:02x?}, want {:02x?}",
                &input[e * iw..][..iw],
                &got[e * w..][..w],
                &want[e * w..][..w]
            );
        }
        assert_eq!(over, want_over, "{path:?} {from} -> {to}: overflow count");
    }
}

/// `input` behind one byte, so that no load is aligned, and with an odd
/// number of elements after it, so that a tail is left to the reference.
fn shifted(input: &[u8], width: usize) -> Vec<u8> {
    let mut v = vec![0x5a];
    v.extend_from_slice(input);
    v.extend_from_slice(&input[..3 * width]);
    v
}

fn every_u16() -> Vec<u8> {
    (0..=u16::MAX).flat_map(u16::to_le_bytes).collect()
}

#[test]
fn every_16_bit_pattern() {
    let all = every_u16();
    for (from, to) in [(BF16, F32), (F16, F32), (BF16, F16), (F16, BF16)] {
        agree(from, to, &all);
        agree(from, to, &shifted(&all, 2)[1..]);
    }
}

/// Low halves of an F32 that decide its rounding to BF16 (bit 16 is the
/// last kept) and to F16 (bit 13), and NaN payloads: below, at and above
/// half a unit, with the kept bit even and odd.
const LOW_HALVES: [u16; 16] = [
    0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2fff, 0x3000, 0x3001, 0x7fff, 0x8000,
    0x8001, 0xbfff, 0xe000, 0xffff,
];

#[test]
fn every_f32_high_half_with_the_low_halves_that_round() {
    let input: Vec<u8> = (0..=u16::MAX)
        .flat_map(|hi| LOW_HALVES.map(|lo| (u32::from(hi) << 16 | u32::from(lo)).to_le_bytes()))
        .flatten()
        .collect();
    for to in [BF16, F16] {
        agree(F32, to, &input);
        agree(F32, to, &shifted(&input, 4)[1..]);
    }
}

/// F64s at the edges of F32: ties and near-ties of its last bit, normal
/// and subnormal, the overflow threshold, NaN payloads quiet and
/// signalling, infinities, signed zeros.
fn f64_edges() -> Vec<u8> {
    let mut v: Vec<u64> = vec![
        0,
        1 << 63,
        0x7ff0_0000_0000_0000,
        0xfff0_0000_0000_0000,
        0x7ff0_0000_0000_0001,
        0xfff4_0000_0000_0000,
        0x7ff8_0000_0000_0000,
        0x7fff_ffff_ffff_ffff,
        f64::from(f32::MAX).to_bits(),
        (f64::from(f32::MAX) * (1.0 + f64::powi(2.0, -25))).to_bits(),
        (f64::from(f32::MAX) * (1.0 + f64::powi(2.0, -24))).to_bits(),
        1e300f64.to_bits(),
        1e-300f64.to_bits(),
        f64::powi(2.0, -149).to_bits(),
        f64::powi(2.0, -150).to_bits(),
        (f64::powi(2.0, -150) * 1.5).to_bits(),
        f64::powi(2.0, -127).to_bits(),
    ];
    // Every F32 exponent, with the 29 dropped bits at a tie and around it.
    for e in 0..256u64 {
        for dropped in [0, 1, 0x0fff_ffff, 0x1000_0000, 0x1000_0001, 0x1fff_ffff] {
            for kept_odd in [0, 1 << 29] {
                let exp = (e + 1023 - 127) << 52;
                v.push(exp | kept_odd | dropped);
                v.push(1 << 63 | exp | kept_odd | dropped);
            }
        }
    }
    v.iter().flat_map(|d| d.to_le_bytes()).collect()
}

#[test]
fn f64_to_f32_at_every_edge() {
    let edges = f64_edges();
    agree(F64, F32, &edges);
    agree(F64, F32, &shifted(&edges, 8)[1..]);
}

proptest! {
    #[test]
    fn random_inputs(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        for (from, to) in [(F32, BF16), (F32, F16), (BF16, F32), (F16, F32), (BF16, F16),
                           (F16, BF16), (F64, F32)] {
            let w = Cast::new(from, to).unwrap().in_width();
            agree(from, to, &bytes[..bytes.len() / w * w]);
        }
    }
}

#[test]
fn a_path_is_forced_on_its_thread_only_and_never_above_the_cpu() {
    for path in Isa::ALL {
        with_isa(path, || {
            assert_eq!(isa(), path.min(Isa::detected()));
            let other = std::thread::spawn(isa).join().unwrap();
            assert_eq!(other, super::process_isa());
        });
    }
    eprintln!(
        "vector paths tested: {:?}",
        Isa::available().collect::<Vec<_>>()
    );
}

#[test]
fn the_vector_paths_do_whole_vectors() {
    // 100 elements: every vector kernel does 96 of them, the reference 4.
    let input = vec![0x3fu8; 100 * 8];
    for path in Isa::available().filter(|&i| i != Isa::Scalar) {
        for (from, to) in [(F32, BF16), (F16, F32), (F64, F32)] {
            let c = Cast::new(from, to).unwrap();
            let input = &input[..100 * c.in_width()];
            let mut out = vec![0u8; 100 * c.out_width()];
            let done = with_isa(path, || c.vector(input, &mut out));
            assert_eq!(done.elems, 96, "{path:?} {from} -> {to}");
        }
    }
}
