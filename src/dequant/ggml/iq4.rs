//! IQ4_NL and IQ4_XS: 4-bit codes into a fixed non-linear table of 16 values.

use super::{f16_at, nibbles, QK_K};

/// The non-linear code book both types share (ggml's `kvalues_iq4nl`).
pub(super) const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// `d: f16, qs: [u8; 16]`, packed as Q4_0.
pub(super) fn iq4_nl(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..18];
    nibbles(qs, out, |q| d * KVALUES[q as usize] as f32);
}

/// `d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128]`: eight
/// sub-blocks of 32, each with a 6-bit scale less 32, packed as IQ4_NL.
pub(super) fn iq4_xs(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let high = u16::from_le_bytes([block[2], block[3]]);
    let (low, qs) = (&block[4..8], &block[8..136]);
    for (j, sub) in out.chunks_exact_mut(32).enumerate().take(QK_K / 32) {
        let l = (low[j / 2] >> (4 * (j % 2))) & 0x0f;
        let h = ((high >> (2 * j)) & 3) as u8;
        let dl = d * ((l | (h << 4)) as i32 - 32) as f32;
        let codes = &qs[j * 16..j * 16 + 16];
        nibbles(codes, sub, |q| dl * KVALUES[q as usize] as f32);
    }
}
