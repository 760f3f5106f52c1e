//! The legacy 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Each block is an f16 scale `d` (and an f16 offset `m` for the `_1`
//! kinds) and 32 codes; an element is `d * q` (`+ m`), rounded in f32 at
//! each step as gguf-py does.

use super::{f16_at, nibbles};

/// `d: f16, qs: [u8; 16]`; `q = nibble - 8`.
pub(super) fn q4_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..18];
    nibbles(qs, out, |q| d * (q as i32 - 8) as f32);
}

/// `d: f16, m: f16, qs: [u8; 16]`; `d * nibble + m`.
pub(super) fn q4_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let qs = &block[4..20];
    nibbles(qs, out, |q| d * q as f32 + m);
}

/// Writes `f` of each 5-bit code: element `e`'s nibble (packed as Q4_0),
/// and bit `e` of `qh` as its fifth bit.
#[inline(always)]
fn five_bits(qh: u32, qs: &[u8], out: &mut [f32], f: impl Fn(u8) -> f32) {
    let (low, high) = out.split_at_mut(16);
    for (j, ((q, lo), hi)) in qs.iter().zip(low).zip(high).enumerate() {
        let (b0, b1) = ((qh >> j) & 1, (qh >> (j + 16)) & 1);
        *lo = f((q & 0x0f) | (b0 as u8) << 4);
        *hi = f((q >> 4) | (b1 as u8) << 4);
    }
}

/// `d: f16, qh: u32, qs: [u8; 16]`; `q = code - 16`.
pub(super) fn q5_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
    let qs = &block[6..22];
    five_bits(qh, qs, out, |q| d * (q as i32 - 16) as f32);
}

/// `d: f16, m: f16, qh: u32, qs: [u8; 16]`; `d * code + m`.
pub(super) fn q5_1(block: &[u8], out: &mut [f32]) {
    let (d, m) = (f16_at(block, 0), f16_at(block, 2));
    let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
    let qs = &block[8..24];
    five_bits(qh, qs, out, |q| d * q as f32 + m);
}

/// `d: f16, qs: [i8; 32]`; `q * d`.
pub(super) fn q8_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (q, o) in block[2..34].iter().zip(out.iter_mut()) {
        *o = (*q as i8) as f32 * d;
    }
}
