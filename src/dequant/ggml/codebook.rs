//! The codebook-grid IQ types: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! IQ1_S and IQ1_M. Each 256-element super-block is 8 sub-blocks of 32;
//! each group of 8 (or 4) elements is an entry of a fixed grid ([`super::grids`]),
//! with signs (IQ2, IQ3) or a shift `delta` (IQ1), times a sub-block scale.
//!
//! As in gguf-py: an IQ2/IQ3 element is `(db * grid) * sign` (two f32
//! products, the second exact), an IQ1 element is `dl * (grid + delta)`.

use super::grids::{IQ1S, IQ2S, IQ2XS, IQ2XXS, IQ3S, IQ3XXS, KSIGNS};
use super::{f16_at, f16_from_bits};

/// `x * -1` if `negative`, as the FPU multiplies (and numpy with it): a
/// NaN comes out as it went in. Written out because the compiler may fold
/// a product by -1 into a negation, which flips a NaN's sign bit.
#[inline(always)]
pub(super) fn times_sign(x: f32, negative: bool) -> f32 {
    if negative && !x.is_nan() {
        -x
    } else {
        x
    }
}

/// `scale * grid[j] * (-1 if bit j of signs is set, else 1)` into `out`.
#[inline(always)]
fn signed(out: &mut [f32], scale: f32, grid: &[u8], signs: u8) {
    for (j, (o, &g)) in out.iter_mut().zip(grid).enumerate() {
        *o = times_sign(scale * g as f32, (signs >> j) & 1 == 1);
    }
}

/// `dl * (grid[j] + delta)` into `out`, `delta` being -1/8 if `negative`, else 1/8.
#[inline(always)]
fn shifted(out: &mut [f32], dl: f32, grid: &[i8; 8], negative: bool) {
    let delta: f32 = if negative { -0.125 } else { 0.125 };
    for (o, &g) in out.iter_mut().zip(grid) {
        *o = dl * (g as f32 + delta);
    }
}

/// The little-endian `u32` at `at`.
fn u32_at(block: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(block[at..at + 4].try_into().unwrap())
}

/// The little-endian `u16` at `at`.
fn u16_at(block: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([block[at], block[at + 1]])
}

/// The IQ2 sub-block scale of a 4-bit `ls`: `d * (1/2 + ls) / 4`.
fn iq2_scale(d: f32, ls: u8) -> f32 {
    d * (0.5 + ls as f32) * 0.25
}

/// `d: f16, qs: [u32; 64]`: per sub-block, two words: four grid indices
/// (bytes of the first), four 7-bit sign indices and a 4-bit scale (the second).
pub(super) fn iq2_xxs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (ib, sub) in out.chunks_exact_mut(32).enumerate() {
        let (idx, aux) = (&block[2 + 8 * ib..6 + 8 * ib], u32_at(block, 6 + 8 * ib));
        let db = iq2_scale(d, (aux >> 28) as u8);
        for (l, run) in sub.chunks_exact_mut(8).enumerate() {
            let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
            signed(run, db, &IQ2XXS[idx[l] as usize], signs);
        }
    }
}

/// `d: f16, qs: [u16; 32], scales: [u8; 8]`: each `u16` a 9-bit grid index
/// and a 7-bit sign index; two 4-bit scales per sub-block.
pub(super) fn iq2_xs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (k, run) in out.chunks_exact_mut(8).enumerate() {
        let q = u16_at(block, 2 + 2 * k);
        let sc = block[66 + k / 4] >> (4 * (k / 2 % 2));
        let db = iq2_scale(d, sc & 0x0f);
        signed(
            run,
            db,
            &IQ2XS[(q & 511) as usize],
            KSIGNS[(q >> 9) as usize],
        );
    }
}

/// `d: f16, qs: [u8; 32], signs: [u8; 32], qh: [u8; 8], scales: [u8; 8]`:
/// 10-bit grid indices (2 high bits from `qh`), a sign byte per 8 elements.
pub(super) fn iq2_s(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let (qs, signs, qh, scales) = (
        &block[2..34],
        &block[34..66],
        &block[66..74],
        &block[74..82],
    );
    for (k, run) in out.chunks_exact_mut(8).enumerate() {
        let high = ((qh[k / 4] >> (2 * (k % 4))) & 3) as usize;
        let sc = scales[k / 4] >> (4 * (k / 2 % 2));
        let db = iq2_scale(d, sc & 0x0f);
        signed(run, db, &IQ2S[qs[k] as usize | high << 8], signs[k]);
    }
}

/// `d: f16, qs: [u8; 64], scales_and_signs: [u32; 8]`: 4-value grid entries,
/// per sub-block a word of four 7-bit sign indices and a 4-bit scale.
pub(super) fn iq3_xxs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..66];
    for (ib, sub) in out.chunks_exact_mut(32).enumerate() {
        let aux = u32_at(block, 66 + 4 * ib);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for (l, run) in sub.chunks_exact_mut(8).enumerate() {
            let signs = KSIGNS[((aux >> (7 * l)) & 127) as usize];
            let (a, b) = run.split_at_mut(4);
            signed(a, db, &IQ3XXS[qs[8 * ib + 2 * l] as usize], signs);
            signed(b, db, &IQ3XXS[qs[8 * ib + 2 * l + 1] as usize], signs >> 4);
        }
    }
}

/// `d: f16, qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4]`:
/// 9-bit indices into a 4-value grid (bit `k % 8` of `qh[k / 8]` the
/// ninth), a sign byte per 8 elements, a 4-bit scale per sub-block: `d * (1 + 2 * sc)`.
pub(super) fn iq3_s(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let (qs, qh, signs, scales) = (
        &block[2..66],
        &block[66..74],
        &block[74..106],
        &block[106..110],
    );
    for (ib, sub) in out.chunks_exact_mut(32).enumerate() {
        let sc = (scales[ib / 2] >> (4 * (ib % 2))) & 0x0f;
        let db = d * (1 + 2 * sc) as f32;
        for (k, half) in sub.chunks_exact_mut(4).enumerate() {
            let k = 8 * ib + k;
            let high = ((qh[k / 8] >> (k % 8)) & 1) as usize;
            signed(
                half,
                db,
                &IQ3S[qs[k] as usize | high << 8],
                signs[k / 2] >> (4 * (k % 2)),
            );
        }
    }
}

/// `d: f16, qs: [u8; 32], qh: [u16; 8]`: per sub-block, one `qh` word holds
/// four 3-bit high index bits, a 3-bit scale (`d * (2 * sc + 1)`) and the
/// sign of `delta`.
pub(super) fn iq1_s(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..34];
    for (ib, sub) in out.chunks_exact_mut(32).enumerate() {
        let qh = u16_at(block, 34 + 2 * ib);
        let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
        for (l, run) in sub.chunks_exact_mut(8).enumerate() {
            let index = qs[4 * ib + l] as usize | (((qh >> (3 * l)) & 7) as usize) << 8;
            shifted(run, dl, &IQ1S[index], qh & 0x8000 != 0);
        }
    }
}

/// `qs: [u8; 32], qh: [u8; 16], scales: [u16; 4]`: each `qh` nibble holds
/// an entry's three high index bits and the sign of its `delta`; the
/// scales hold sixteen 3-bit scales (`d * (2 * sc + 1)`, one per 16
/// elements) and, in their top nibbles, the f16 `d`.
pub(super) fn iq1_m(block: &[u8], out: &mut [f32]) {
    let (qs, qh) = (&block[..32], &block[32..48]);
    let sc: [u16; 4] = std::array::from_fn(|k| u16_at(block, 48 + 2 * k));
    let d = f16_from_bits(
        (sc[0] >> 12) | (sc[1] >> 8) & 0x00f0 | (sc[2] >> 4) & 0x0f00 | sc[3] & 0xf000,
    );
    for (k, run) in out.chunks_exact_mut(8).enumerate() {
        // Scale k / 2 of the sixteen: word k / 8, bits 3 * (k / 2 % 4).
        let s = (sc[k / 8] >> (3 * (k / 2 % 4))) & 7;
        let dl = d * (2 * s + 1) as f32;
        let h = qh[k / 2] >> (4 * (k % 2));
        let index = qs[k] as usize | ((h & 7) as usize) << 8;
        shifted(run, dl, &IQ1S[index], h & 8 != 0);
    }
}
