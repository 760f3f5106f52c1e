//! The K-quants: 256-element super-blocks of 16 or 8 sub-blocks, each with
//! a scale (and a minimum) quantized against the super-block's f16 `d`
//! (and `dmin`). A sub-block's scale is `d * sc`, rounded in f32 first; an
//! element is then `scale * q` (`- min`), as gguf-py computes it.

use super::{f16_at, QK_K};

/// Bits `2 * s .. 2 * s + 2` of the byte under element `e` in the layout
/// Q2_K, Q3_K and TQ2_0 share: two halves of 128 elements, each four runs of
/// 32 reading successive bit pairs of the same 32 bytes.
pub(super) fn crumb(qs: &[u8], e: usize) -> u8 {
    let (half, shift, l) = (e / 128, (e % 128) / 32, e % 32);
    (qs[half * 32 + l] >> (2 * shift)) & 3
}

/// `scales: [u8; 16], qs: [u8; 64], d: f16, dmin: f16`.
pub(super) fn q2_k(block: &[u8], out: &mut [f32]) {
    let (scales, qs) = (&block[..16], &block[16..80]);
    let (d, dmin) = (f16_at(block, 80), f16_at(block, 82));
    for (e, o) in out.iter_mut().enumerate().take(QK_K) {
        let sc = scales[e / 16];
        let dl = d * (sc & 0x0f) as f32;
        let ml = dmin * (sc >> 4) as f32;
        *o = dl * crumb(qs, e) as f32 - ml;
    }
}

/// `hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12] (6 bits each), d: f16`.
pub(super) fn q3_k(block: &[u8], out: &mut [f32]) {
    let (hmask, qs, packed) = (&block[..32], &block[32..96], &block[96..108]);
    let d = f16_at(block, 108);
    let mut dl = [0f32; 16];
    for (i, dl) in dl.iter_mut().enumerate() {
        let low = (packed[i % 8] >> (4 * (i / 8))) & 0x0f;
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        let sc = (low | (high << 4)) as i32 - 32;
        *dl = d * sc as f32;
    }
    for (e, o) in out.iter_mut().enumerate().take(QK_K) {
        // The offset of 4 applies where the mask bit is clear.
        let high = (hmask[e % 32] >> (e / 32)) & 1;
        let q = crumb(qs, e) as i32 - (((high ^ 1) as i32) << 2);
        *o = dl[e / 16] * q as f32;
    }
}

/// The 8 six-bit scales and minimums packed in 12 bytes (Q4_K, Q5_K).
fn scale_min(packed: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = packed[j] & 0x3f;
        mn[j] = packed[4 + j] & 0x3f;
        sc[4 + j] = (packed[8 + j] & 0x0f) | ((packed[j] >> 2) & 0x30);
        mn[4 + j] = (packed[8 + j] >> 4) | ((packed[4 + j] >> 2) & 0x30);
    }
    (sc, mn)
}

/// Sub-block scales `d * sc` and minimums `dmin * m` of a Q4_K or Q5_K block.
pub(super) fn scales_4_5(block: &[u8]) -> ([f32; 8], [f32; 8]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let (sc, mn) = scale_min(&block[4..16]);
    (sc.map(|s| d * s as f32), mn.map(|m| dmin * m as f32))
}

/// The nibble of element `e` in Q4_K's layout: four runs of 64, each the
/// low then the high nibbles of the same 32 bytes.
fn nibble_k(qs: &[u8], e: usize) -> u8 {
    let (chunk, shift, l) = (e / 64, (e % 64) / 32, e % 32);
    (qs[chunk * 32 + l] >> (4 * shift)) & 0x0f
}

/// `d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]`.
pub(super) fn q4_k(block: &[u8], out: &mut [f32]) {
    let (dl, ml) = scales_4_5(block);
    let qs = &block[16..144];
    // Four runs of 64: the low then the high nibbles of 32 bytes.
    for (c, (run, q)) in out
        .chunks_exact_mut(64)
        .zip(qs.chunks_exact(32))
        .enumerate()
    {
        let (lo, hi) = (2 * c, 2 * c + 1);
        let (low, high) = run.split_at_mut(32);
        for ((q, a), b) in q.iter().zip(low).zip(high) {
            *a = dl[lo] * (q & 0x0f) as f32 - ml[lo];
            *b = dl[hi] * (q >> 4) as f32 - ml[hi];
        }
    }
}

/// `d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]`.
pub(super) fn q5_k(block: &[u8], out: &mut [f32]) {
    let (dl, ml) = scales_4_5(block);
    let (qh, qs) = (&block[16..48], &block[48..176]);
    for (e, o) in out.iter_mut().enumerate().take(QK_K) {
        let high = (qh[e % 32] >> (e / 32)) & 1;
        let q = nibble_k(qs, e) | (high << 4);
        *o = dl[e / 32] * q as f32 - ml[e / 32];
    }
}

/// `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`; `q = code - 32`.
pub(super) fn q6_k(block: &[u8], out: &mut [f32]) {
    let (ql, qh, scales) = (&block[..128], &block[128..192], &block[192..208]);
    let d = f16_at(block, 208);
    let dl: [f32; 16] = std::array::from_fn(|i| d * (scales[i] as i8) as f32);
    // Two halves of 128: 64 bytes of low nibbles and 32 of high bit pairs
    // give four runs of 32.
    for (h, half) in out.chunks_exact_mut(128).enumerate() {
        let (ql, qh, dl) = (
            &ql[64 * h..64 * h + 64],
            &qh[32 * h..32 * h + 32],
            &dl[8 * h..],
        );
        for l in 0..32 {
            let codes = [
                (ql[l] & 0x0f) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (r, code) in codes.into_iter().enumerate() {
                let e = 32 * r + l;
                half[e] = dl[e / 16] * (code as i32 - 32) as f32;
            }
        }
    }
}
