//! The ternary types TQ1_0 and TQ2_0: 256 codes in {-1, 0, 1} times an f16 `d`.

use super::{f16_at, kquants::crumb, QK_K};

/// `qs: [u8; 48], qh: [u8; 4], d: f16`: five trits per byte (four in
/// `qh`), stored as a fixed-point fraction of 3^5; trit `k` of byte `b` is
/// the top "digit" of `b * 3^k` (mod 256) times 3.
pub(super) fn tq1_0(block: &[u8], out: &mut [f32]) {
    let (qs, qh) = (&block[..48], &block[48..52]);
    let d = f16_at(block, 52);
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    for (e, o) in out.iter_mut().enumerate().take(QK_K) {
        // 160 elements from qs[..32], 80 from qs[32..], 16 from qh.
        let byte = match e {
            0..160 => qs[e % 32].wrapping_mul(POW3[e / 32]),
            160..240 => qs[32 + (e - 160) % 16].wrapping_mul(POW3[(e - 160) / 16]),
            _ => qh[(e - 240) % 4].wrapping_mul(POW3[(e - 240) / 4]),
        };
        let q = ((byte as u16 * 3) >> 8) as i32 - 1;
        *o = d * q as f32;
    }
}

/// `qs: [u8; 64], d: f16`: 2-bit codes, `q = code - 1`.
pub(super) fn tq2_0(block: &[u8], out: &mut [f32]) {
    let qs = &block[..64];
    let d = f16_at(block, 64);
    for (e, o) in out.iter_mut().enumerate().take(QK_K) {
        *o = d * (crumb(qs, e) as i32 - 1) as f32;
    }
}
