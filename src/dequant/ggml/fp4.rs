//! The FP4 (E2M1) types: MXFP4 (32 codes, a power-of-two E8M0 scale) and
//! NVFP4 (64 codes in four runs of 16, each with an unsigned E4M3 scale).
//! Both read the E2M1 code book doubled, and halve the scale to match.

use super::nibbles;

/// E2M1 values, doubled so that they are integers (ggml's `kvalues_mxfp4`).
const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half of 2^(e - 127), as an f32 bit pattern (ggml's `ggml_e8m0_to_fp32_half`).
fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e - 1) as u32) << 23
    };
    f32::from_bits(bits)
}

/// `e: u8, qs: [u8; 16]`.
pub(super) fn mxfp4(block: &[u8], out: &mut [f32]) {
    let d = e8m0_half(block[0]);
    let qs = &block[1..17];
    nibbles(qs, out, |q| d * KVALUES[q as usize] as f32);
}

/// Half an unsigned E4M3 (bias 7) scale, as gguf-py decodes it: the top
/// bit is ignored, and 0x7f (NaN in E4M3) reads as 0. Every value is exact in f32.
fn ue4m3_half(x: u8) -> f32 {
    let exp = ((x >> 3) & 0x0f) as i32;
    let man = (x & 7) as f32;
    let raw = if exp == 0 {
        man * f32::powi(2.0, -9)
    } else {
        (1.0 + man / 8.0) * f32::powi(2.0, exp - 7)
    };
    if x == 0 || x == 0x7f {
        0.0
    } else {
        raw * 0.5
    }
}

/// `d: [u8; 4] (E4M3), qs: [u8; 32]`: four sub-blocks of 16, each the low
/// then the high nibbles of its 8 bytes.
pub(super) fn nvfp4(block: &[u8], out: &mut [f32]) {
    let qs = &block[4..36];
    for (s, sub) in out.chunks_exact_mut(16).enumerate().take(4) {
        let d = ue4m3_half(block[s]);
        let codes = &qs[s * 8..s * 8 + 8];
        nibbles(codes, sub, |q| d * KVALUES[q as usize] as f32);
    }
}
