//! The legacy 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; and the
//! other blocks of one scale and plain codes, Q8_K and Q1_0.
//!
//! Each legacy block is an f16 scale `d` (and an f16 offset `m` for the `_1`
//! kinds) and 32 codes; an element is `d * q` (`+ m`), rounded in f32 at
//! each step as gguf-py does. gguf-py 0.19 cannot dequantize Q8_K and Q1_0:
//! their kernels compute what ggml's C reference does.

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

/// `q * d` of each `i8` code of `qs`.
fn times_d(qs: &[u8], d: f32, out: &mut [f32]) {
    for (q, o) in qs.iter().zip(out.iter_mut()) {
        *o = (*q as i8) as f32 * d;
    }
}

/// `d: f16, qs: [i8; 32]`; `q * d`.
pub(super) fn q8_0(block: &[u8], out: &mut [f32]) {
    times_d(&block[2..34], f16_at(block, 0), out);
}

/// `d: f32, qs: [i8; 256], bsums: [i16; 16]`; `d * q` (ggml's
/// `dequantize_row_q8_K`; the sums are not needed).
pub(super) fn q8_k(block: &[u8], out: &mut [f32]) {
    let d = f32::from_le_bytes(block[..4].try_into().unwrap());
    times_d(&block[4..260], d, out);
}

/// `d: f16, qs: [u8; 16]`: one bit per element, `d` where it is set and
/// `-d` where it is clear (ggml's `dequantize_row_q1_0`). `d` is written
/// with no arithmetic, so a signalling NaN is quieted here, as ggml's f16
/// conversion (F16C or its software fallback) does.
pub(super) fn q1_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let d = if d.is_nan() {
        f32::from_bits(d.to_bits() | 0x0040_0000)
    } else {
        d
    };
    let neg_d = -d;
    for (j, o) in out.iter_mut().enumerate().take(128) {
        *o = if (block[2 + j / 8] >> (j % 8)) & 1 == 1 {
            d
        } else {
            neg_d
        };
    }
}
