//! Property tests: each kernel against a second, independent reading of its
//! block layout, written after ggml's C reference (`dequantize_row_*` in
//! ggml-quants.c: per-block loops over byte indices and shifts, not the
//! element-indexed lookups of the kernels), over random blocks with any
//! bits in every field, f16 scales included (NaN payloads compared as bits).

// Index loops on purpose: the C reference's shape, not the kernels'.
#![allow(clippy::needless_range_loop)]

use proptest::prelude::*;

use super::GgmlType;
use crate::cast::simd::{with_isa, Isa};

fn h(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

fn ref_q4_0(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    for j in 0..16 {
        y[j] = ((b[2 + j] & 0x0f) as i32 - 8) as f32 * d;
        y[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
    }
}

fn ref_q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (h(b, 0), h(b, 2));
    for j in 0..16 {
        y[j] = (b[4 + j] & 0x0f) as f32 * d + m;
        y[j + 16] = (b[4 + j] >> 4) as f32 * d + m;
    }
}

fn ref_q5(b: &[u8], y: &mut [f32], with_min: bool) {
    let d = h(b, 0);
    let m = if with_min { h(b, 2) } else { 0.0 };
    let at = if with_min { 4 } else { 2 };
    let qh = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let qs = &b[at + 4..at + 20];
    for j in 0..16 {
        let xh0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
        let (x0, x1) = ((qs[j] & 0x0f) | xh0, (qs[j] >> 4) | xh1);
        if with_min {
            y[j] = x0 as f32 * d + m;
            y[j + 16] = x1 as f32 * d + m;
        } else {
            y[j] = (x0 as i32 - 16) as f32 * d;
            y[j + 16] = (x1 as i32 - 16) as f32 * d;
        }
    }
}

fn ref_q8_0(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

fn ref_q8_k(b: &[u8], y: &mut [f32]) {
    let d = f32::from_le_bytes(b[..4].try_into().unwrap());
    for j in 0..256 {
        y[j] = d * (b[4 + j] as i8) as f32;
    }
}

fn ref_q1_0(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let neg_d = -d;
    for j in 0..128 {
        let bit = (b[2 + j / 8] >> (j % 8)) & 1;
        y[j] = if bit != 0 { d } else { neg_d };
    }
}

fn ref_q2_k(b: &[u8], y: &mut [f32]) {
    let (sc, qs) = (&b[..16], &b[16..80]);
    let (d, min) = (h(b, 80), h(b, 82));
    let (mut is, mut o) = (0, 0);
    for n in [0, 32] {
        let q = &qs[n..n + 32];
        for shift in [0, 2, 4, 6] {
            for half in [0, 16] {
                let s = sc[is];
                is += 1;
                let (dl, ml) = (d * (s & 0x0f) as f32, min * (s >> 4) as f32);
                for l in 0..16 {
                    y[o] = dl * ((q[half + l] >> shift) & 3) as f32 - ml;
                    o += 1;
                }
            }
        }
    }
}

fn ref_q3_k(b: &[u8], y: &mut [f32]) {
    let (hm, qs, sc) = (&b[..32], &b[32..96], &b[96..108]);
    let d = h(b, 108);
    // ggml unpacks the 16 six-bit scales through two 32-bit words.
    let mut aux = [0u32; 4];
    for (i, a) in aux.iter_mut().take(3).enumerate() {
        *a = u32::from_le_bytes(sc[4 * i..4 * i + 4].try_into().unwrap());
    }
    let (kmask1, kmask2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
    let tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | ((tmp & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    let scales: Vec<i8> = aux
        .iter()
        .flat_map(|a| a.to_le_bytes())
        .map(|x| x as i8)
        .collect();
    let (mut is, mut o, mut m) = (0, 0, 1u8);
    for n in [0, 32] {
        let q = &qs[n..n + 32];
        for shift in [0, 2, 4, 6] {
            for half in [0, 16] {
                let dl = d * (scales[is] as i32 - 32) as f32;
                is += 1;
                for l in 0..16 {
                    let low = ((q[half + l] >> shift) & 3) as i32;
                    let off = if hm[half + l] & m != 0 { 0 } else { 4 };
                    y[o] = dl * (low - off) as f32;
                    o += 1;
                }
            }
            m <<= 1;
        }
    }
}

fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

fn ref_q45_k(b: &[u8], y: &mut [f32], five: bool) {
    let (d, min) = (h(b, 0), h(b, 2));
    let sc = &b[4..16];
    let (qh, ql) = if five {
        (&b[16..48], &b[48..176])
    } else {
        (&b[..0], &b[16..144])
    };
    let (mut is, mut o) = (0, 0);
    let (mut u1, mut u2) = (1u8, 2u8);
    for j in (0..256).step_by(64) {
        let q = &ql[j / 2..j / 2 + 32];
        let (s1, m1) = get_scale_min_k4(is, sc);
        let (s2, m2) = get_scale_min_k4(is + 1, sc);
        let (d1, m1) = (d * s1 as f32, min * m1 as f32);
        let (d2, m2) = (d * s2 as f32, min * m2 as f32);
        for l in 0..32 {
            let hi = if five && qh[l] & u1 != 0 { 16 } else { 0 };
            y[o] = d1 * ((q[l] & 0x0f) + hi) as f32 - m1;
            o += 1;
        }
        for l in 0..32 {
            let hi = if five && qh[l] & u2 != 0 { 16 } else { 0 };
            y[o] = d2 * ((q[l] >> 4) + hi) as f32 - m2;
            o += 1;
        }
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
}

fn ref_q6_k(b: &[u8], y: &mut [f32]) {
    let d = h(b, 208);
    for n in [0usize, 128] {
        let (ql, qh) = (&b[n / 2..n / 2 + 64], &b[128 + n / 4..128 + n / 4 + 32]);
        let sc = &b[192 + n / 16..192 + n / 16 + 8];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |k: usize| d * (sc[k] as i8) as f32;
            y[n + l] = s(is) * q1 as f32;
            y[n + l + 32] = s(is + 2) * q2 as f32;
            y[n + l + 64] = s(is + 4) * q3 as f32;
            y[n + l + 96] = s(is + 6) * q4 as f32;
        }
    }
}

const IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

fn ref_iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    for j in 0..16 {
        y[j] = d * IQ4NL[(b[2 + j] & 0x0f) as usize] as f32;
        y[j + 16] = d * IQ4NL[(b[2 + j] >> 4) as usize] as f32;
    }
}

fn ref_iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let sh = u16::from_le_bytes([b[2], b[3]]);
    for ib in 0..8 {
        let ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f) | ((((sh >> (2 * ib)) & 3) as u8) << 4);
        let dl = d * (ls as i32 - 32) as f32;
        let qs = &b[8 + 16 * ib..24 + 16 * ib];
        for j in 0..16 {
            y[32 * ib + j] = dl * IQ4NL[(qs[j] & 0x0f) as usize] as f32;
            y[32 * ib + j + 16] = dl * IQ4NL[(qs[j] >> 4) as usize] as f32;
        }
    }
}

fn ref_tq1_0(b: &[u8], y: &mut [f32]) {
    let d = h(b, 52);
    let pow3 = [1u8, 3, 9, 27, 81, 243];
    let mut o = 0;
    // 32 bytes of five trits, then 16, then the 4 bytes of qh with four each.
    for (start, len, trits) in [(0usize, 32usize, 5usize), (32, 16, 5), (48, 4, 4)] {
        for n in 0..trits {
            for m in 0..len {
                let q = b[start + m].wrapping_mul(pow3[n]);
                let xi = ((q as u16 * 3) >> 8) as i16;
                y[o] = (xi - 1) as f32 * d;
                o += 1;
            }
        }
    }
}

fn ref_tq2_0(b: &[u8], y: &mut [f32]) {
    let d = h(b, 64);
    let mut o = 0;
    for j in [0usize, 32] {
        for l in 0..4 {
            for m in 0..32 {
                let q = ((b[j + m] >> (l * 2)) & 3) as i8;
                y[o] = (q - 1) as f32 * d;
                o += 1;
            }
        }
    }
}

const E2M1: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

fn ref_mxfp4(b: &[u8], y: &mut [f32]) {
    // 2^(e - 127) / 2, computed in f64 (exact) and narrowed.
    let d = (2f64.powi(b[0] as i32 - 127) / 2.0) as f32;
    for j in 0..16 {
        y[j] = d * E2M1[(b[1 + j] & 0x0f) as usize] as f32;
        y[j + 16] = d * E2M1[(b[1 + j] >> 4) as usize] as f32;
    }
}

// ---- the codebook-grid IQ types -------------------------------------------------
// The grids are ggml's tables (generated into `grids.rs`; spot-checked against
// ggml-common.h's own literals below); what these readings check is the layout.

use super::grids::{IQ1S, IQ2S, IQ2XS, IQ2XXS, IQ3S, IQ3XXS, KSIGNS};

const KMASK_IQ2XS: [u8; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// ggml's `x * (signs & kmask_iq2xs[j] ? -1.f : 1.f)`, the product as the
/// FPU computes it (a NaN keeps its sign), which a compiler may not keep.
fn signed(x: f32, signs: u8, j: usize) -> f32 {
    super::codebook::times_sign(x, signs & KMASK_IQ2XS[j] != 0)
}

#[test]
fn a_product_by_minus_one_keeps_a_nans_sign() {
    let nan = f32::from_bits(0x7fc0_8000);
    let black_box = std::hint::black_box;
    // What the FPU does with a product it is made to compute.
    let fpu = black_box(nan) * black_box(-1.0f32);
    assert_eq!(fpu.to_bits(), 0x7fc0_8000);
    assert_eq!(signed(nan, 1, 0).to_bits(), fpu.to_bits());
    assert_eq!(signed(-nan, 1, 0).to_bits(), 0xffc0_8000);
    assert_eq!(signed(2.5, 1, 0), -2.5);
    assert_eq!(signed(0.0, 1, 0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(signed(f32::INFINITY, 0, 0), f32::INFINITY);
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn ref_iq2_xxs(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let mut o = 0;
    for ib32 in 0..8 {
        let aux32 = [le32(b, 2 + 8 * ib32), le32(b, 6 + 8 * ib32)];
        let aux8 = aux32[0].to_le_bytes();
        let db = d * (0.5 + (aux32[1] >> 28) as f32) * 0.25;
        for l in 0..4 {
            let grid = &IQ2XXS[aux8[l] as usize];
            let signs = KSIGNS[((aux32[1] >> (7 * l)) & 127) as usize];
            for j in 0..8 {
                y[o + j] = signed(db * grid[j] as f32, signs, j);
            }
            o += 8;
        }
    }
}

/// IQ2_XS and IQ2_S: a sub-block's two scales, from the nibbles of `sc`.
fn iq2_db(d: f32, sc: u8) -> [f32; 2] {
    [
        d * (0.5 + (sc & 0xf) as f32) * 0.25,
        d * (0.5 + (sc >> 4) as f32) * 0.25,
    ]
}

fn ref_iq2_xs(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let scales = &b[66..74];
    let mut o = 0;
    for ib32 in 0..8 {
        let db = iq2_db(d, scales[ib32]);
        for l in 0..4 {
            let q = le16(b, 2 + 2 * (4 * ib32 + l));
            let grid = &IQ2XS[(q & 511) as usize];
            let signs = KSIGNS[(q >> 9) as usize];
            for j in 0..8 {
                y[o + j] = signed(db[l / 2] * grid[j] as f32, signs, j);
            }
            o += 8;
        }
    }
}

fn ref_iq2_s(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
    let mut o = 0;
    for ib32 in 0..8 {
        let db = iq2_db(d, scales[ib32]);
        for l in 0..4 {
            let idx = qs[4 * ib32 + l] as usize | ((qh[ib32] as usize) << (8 - 2 * l) & 0x300);
            let grid = &IQ2S[idx];
            for j in 0..8 {
                y[o + j] = signed(db[l / 2] * grid[j] as f32, signs[4 * ib32 + l], j);
            }
            o += 8;
        }
    }
}

fn ref_iq3_xxs(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let qs = &b[2..66];
    let mut o = 0;
    for ib32 in 0..8 {
        let aux32 = le32(b, 66 + 4 * ib32);
        let db = d * (0.5 + (aux32 >> 28) as f32) * 0.5;
        for l in 0..4 {
            let signs = KSIGNS[((aux32 >> (7 * l)) & 127) as usize];
            let grid1 = &IQ3XXS[qs[8 * ib32 + 2 * l] as usize];
            let grid2 = &IQ3XXS[qs[8 * ib32 + 2 * l + 1] as usize];
            for j in 0..4 {
                y[o + j] = signed(db * grid1[j] as f32, signs, j);
                y[o + j + 4] = signed(db * grid2[j] as f32, signs, j + 4);
            }
            o += 8;
        }
    }
}

fn ref_iq3_s(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    let mut o = 0;
    for ib32 in (0..8).step_by(2) {
        let db1 = d * (1 + 2 * (scales[ib32 / 2] & 0xf) as i32) as f32;
        let db2 = d * (1 + 2 * (scales[ib32 / 2] >> 4) as i32) as f32;
        for (half, db) in [db1, db2].into_iter().enumerate() {
            let (qs, qh, signs) = (
                &qs[8 * (ib32 + half)..],
                qh[ib32 + half] as usize,
                &signs[4 * (ib32 + half)..],
            );
            for l in 0..4 {
                let grid1 = &IQ3S[qs[2 * l] as usize | ((qh << (8 - 2 * l)) & 256)];
                let grid2 = &IQ3S[qs[2 * l + 1] as usize | ((qh << (7 - 2 * l)) & 256)];
                for j in 0..4 {
                    y[o + j] = signed(db * grid1[j] as f32, signs[l], j);
                    y[o + j + 4] = signed(db * grid2[j] as f32, signs[l], j + 4);
                }
                o += 8;
            }
        }
    }
}

const IQ1S_DELTA: f32 = 0.125;

fn ref_iq1_s(b: &[u8], y: &mut [f32]) {
    let d = h(b, 0);
    let qs = &b[2..34];
    let mut o = 0;
    for ib in 0..8 {
        let qh = le16(b, 34 + 2 * ib);
        let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
        let delta = if qh & 0x8000 != 0 {
            -IQ1S_DELTA
        } else {
            IQ1S_DELTA
        };
        for l in 0..4 {
            let grid = &IQ1S[qs[4 * ib + l] as usize | (((qh >> (3 * l)) & 7) as usize) << 8];
            for j in 0..8 {
                y[o + j] = dl * (grid[j] as f32 + delta);
            }
            o += 8;
        }
    }
}

fn ref_iq1_m(b: &[u8], y: &mut [f32]) {
    let (qs, qh) = (&b[..32], &b[32..48]);
    let sc = [le16(b, 48), le16(b, 50), le16(b, 52), le16(b, 54)];
    let scale =
        (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    let d = half::f16::from_bits(scale).to_f32();
    let mut o = 0;
    for ib in 0..8 {
        let dl1 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 0x7) + 1) as f32;
        let dl2 = d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 0x7) + 1) as f32;
        let (q, h) = (&qs[4 * ib..], &qh[2 * ib..]);
        let idx = [
            q[0] as usize | ((h[0] as usize) << 8 & 0x700),
            q[1] as usize | ((h[0] as usize) << 4 & 0x700),
            q[2] as usize | ((h[1] as usize) << 8 & 0x700),
            q[3] as usize | ((h[1] as usize) << 4 & 0x700),
        ];
        let delta = |x: u8| if x != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
        let delta = [
            delta(h[0] & 0x08),
            delta(h[0] & 0x80),
            delta(h[1] & 0x08),
            delta(h[1] & 0x80),
        ];
        for l in 0..4 {
            let dl = if l < 2 { dl1 } else { dl2 };
            for j in 0..8 {
                y[o + j] = dl * (IQ1S[idx[l]][j] as f32 + delta[l]);
            }
            o += 8;
        }
    }
}

/// An entry as ggml-common.h writes it: its values as little-endian bytes.
fn packed<T: Copy + Into<i16>>(entry: &[T]) -> u64 {
    entry
        .iter()
        .enumerate()
        .map(|(j, &v)| ((v.into() as u8) as u64) << (8 * j))
        .sum()
}

#[test]
fn the_grids_hold_ggmls_entries() {
    // The first two and the last two entries of each table in ggml-common.h.
    let ends = |t: &[u64]| [t[0], t[1], t[t.len() - 2], t[t.len() - 1]];
    let iq2xxs: Vec<u64> = IQ2XXS.iter().map(|e| packed(e)).collect();
    assert_eq!(
        ends(&iq2xxs),
        [
            0x0808080808080808,
            0x080808080808082b,
            0x2b2b2b0819190808,
            0x2b2b2b1908081908
        ]
    );
    let iq2xs: Vec<u64> = IQ2XS.iter().map(|e| packed(e)).collect();
    assert_eq!(
        ends(&iq2xs),
        [
            0x0808080808080808,
            0x080808080808082b,
            0x2b2b2b2b2b190819,
            0x2b2b2b2b2b2b2b2b
        ]
    );
    let iq2s: Vec<u64> = IQ2S.iter().map(|e| packed(e)).collect();
    assert_eq!(
        ends(&iq2s),
        [
            0x0808080808080808,
            0x080808080808082b,
            0x2b2b2b2b2b082b08,
            0x2b2b2b2b2b2b2b2b
        ]
    );
    let iq3xxs: Vec<u64> = IQ3XXS.iter().map(|e| packed(e)).collect();
    assert_eq!(
        ends(&iq3xxs),
        [0x04040404, 0x04040414, 0x3e2c1424, 0x3e341c04]
    );
    let iq3s: Vec<u64> = IQ3S.iter().map(|e| packed(e)).collect();
    assert_eq!(
        ends(&iq3s),
        [0x01010101, 0x01010103, 0x0f0d0703, 0x0f0f0101]
    );
    let iq1s: Vec<u64> = IQ1S.iter().map(|e| packed(e)).collect();
    assert_eq!(
        ends(&iq1s),
        [
            0xffffffffffffffff,
            0xffffffffffffff01,
            0x01010101010101ff,
            0x0101010101010101
        ]
    );
    // ksigns_iq2xs: seven bits and their parity.
    for (i, &k) in KSIGNS.iter().enumerate() {
        let parity = (i as u8).count_ones() as u8 & 1;
        assert_eq!(k, i as u8 | parity << 7, "ksigns[{i}]");
    }
}

/// Bits of each value; NaNs are equal when their payloads are.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The kernel of `name` against `reference`, on every path this CPU has
/// (the vector paths of Q4_0, Q8_0, Q4_K, Q5_K, Q6_K and IQ4_XS, the scalar one of all).
fn check(name: &str, blocks: &[u8], reference: fn(&[u8], &mut [f32])) {
    let ty = GgmlType::all().iter().find(|t| t.name == name).unwrap();
    let (bb, be) = (ty.block_bytes as usize, ty.block_elems as usize);
    let n = blocks.len() / bb;
    let mut want = vec![0f32; n * be];
    for (b, y) in blocks.chunks_exact(bb).zip(want.chunks_exact_mut(be)) {
        reference(b, y);
    }
    for isa in Isa::available() {
        let mut got = vec![0f32; n * be];
        with_isa(isa, || ty.dequantize(&blocks[..n * bb], &mut got));
        assert_eq!(bits(&got), bits(&want), "{name} on {isa:?}");
    }
}

fn blocks(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// [`GgmlType::dequantize_into`] against `dequantize` then `store_f32`,
/// over a run longer than one of its steps.
#[test]
fn dequantize_into_stores_what_dequantize_then_store_f32_does() {
    let bytes: Vec<u8> = (0..210 * 100u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    for name in [
        "Q4_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ2_XS", "MXFP4",
    ] {
        let ty = GgmlType::all().iter().find(|t| t.name == name).unwrap();
        let (bb, be) = (ty.block_bytes as usize, ty.block_elems as usize);
        let blocks = &bytes[..bytes.len() / bb * bb];
        let n = blocks.len() / bb * be;
        for to in [crate::Dtype::BF16, crate::Dtype::F16, crate::Dtype::F32] {
            let width = (to.bits() / 8) as usize;
            let mut values = vec![0f32; n];
            ty.dequantize(blocks, &mut values);
            let mut want = vec![0u8; n * width];
            crate::dequant::store_f32(&values, to, &mut want);
            let mut got = vec![0u8; n * width];
            ty.dequantize_into(blocks, to, &mut Vec::new(), &mut got);
            assert!(got == want, "{name} -> {to}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn legacy_kernels_match_the_c_reference(b in blocks(34 * 6)) {
        check("Q4_0", &b, ref_q4_0);
        check("Q4_1", &b, ref_q4_1);
        check("Q5_0", &b, |b, y| ref_q5(b, y, false));
        check("Q5_1", &b, |b, y| ref_q5(b, y, true));
        check("Q8_0", &b, ref_q8_0);
    }

    #[test]
    fn k_quant_kernels_match_the_c_reference(b in blocks(210 * 3)) {
        check("Q2_K", &b, ref_q2_k);
        check("Q3_K", &b, ref_q3_k);
        check("Q4_K", &b, |b, y| ref_q45_k(b, y, false));
        check("Q5_K", &b, |b, y| ref_q45_k(b, y, true));
        check("Q6_K", &b, ref_q6_k);
    }

    #[test]
    fn iq4_kernels_match_the_c_reference(b in blocks(136 * 3)) {
        check("IQ4_NL", &b, ref_iq4_nl);
        check("IQ4_XS", &b, ref_iq4_xs);
    }

    #[test]
    fn codebook_grid_kernels_match_the_c_reference(b in blocks(110 * 3)) {
        check("IQ2_XXS", &b, ref_iq2_xxs);
        check("IQ2_XS", &b, ref_iq2_xs);
        check("IQ2_S", &b, ref_iq2_s);
        check("IQ3_XXS", &b, ref_iq3_xxs);
        check("IQ3_S", &b, ref_iq3_s);
        check("IQ1_S", &b, ref_iq1_s);
        check("IQ1_M", &b, ref_iq1_m);
    }

    #[test]
    fn q8_k_and_q1_0_match_the_c_reference(b in blocks(292 * 2)) {
        check("Q8_K", &b, ref_q8_k);
        check("Q1_0", &b, ref_q1_0);
    }

    #[test]
    fn ternary_kernels_match_the_c_reference(b in blocks(66 * 4)) {
        check("TQ1_0", &b, ref_tq1_0);
        check("TQ2_0", &b, ref_tq2_0);
    }

    #[test]
    fn mxfp4_matches_the_c_reference(b in blocks(17 * 8)) {
        check("MXFP4", &b, ref_mxfp4);
    }
}
