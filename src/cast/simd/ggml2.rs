//! The GGUF block kernels on AVX2: 8 codes at a time, each element the
//! reference's (`dequant::ggml`) product and difference, in its order, each
//! rounded once. Block scales are decoded with the reference's scalar code.

use std::arch::x86_64::*;

use super::super::scalar::f16_to_f32;

/// The f16 at `at`, as f32 (exact).
fn f16_at(block: &[u8], at: usize) -> f32 {
    f32::from_bits(f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]])))
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn bytes8(b: &[u8]) -> __m128i {
    _mm_cvtsi64_si128(bytemuck::pod_read_unaligned::<i64>(&b[..8]))
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn put(out: &mut [f32], v: __m256) {
    let values: [f32; 8] = bytemuck::cast(v);
    out[..8].copy_from_slice(&values);
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn splat(n: i32) -> __m256i {
    _mm256_set1_epi32(n)
}

/// Unsigned bytes as f32 lanes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn float(v: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(v)
}

/// `d * f(nibble)` for 8 bytes of nibbles: the low ones into `low`, the
/// high ones into `high` (ggml's Q4_0 packing), `offset` subtracted first.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn nibbles_times(qs: &[u8], d: f32, offset: i32, low: &mut [f32], high: &mut [f32]) {
    let x = _mm256_cvtepu8_epi32(bytes8(qs));
    let d = _mm256_set1_ps(d);
    let lo = _mm256_sub_epi32(_mm256_and_si256(x, splat(0x0f)), splat(offset));
    let hi = _mm256_sub_epi32(_mm256_srli_epi32::<4>(x), splat(offset));
    put(low, _mm256_mul_ps(d, float(lo)));
    put(high, _mm256_mul_ps(d, float(hi)));
}

/// Q4_0 (`d * (q - 8)`), block by block.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q4_0(blocks: &[u8], out: &mut [f32]) -> bool {
    for (b, o) in blocks.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
        let (low, high) = o.split_at_mut(16);
        let d = f16_at(b, 0);
        nibbles_times(&b[2..10], d, 8, low, high);
        nibbles_times(&b[10..18], d, 8, &mut low[8..], &mut high[8..]);
    }
    true
}

/// Q8_0 (`q * d`), block by block.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q8_0(blocks: &[u8], out: &mut [f32]) -> bool {
    for (b, o) in blocks.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
        let d = _mm256_set1_ps(f16_at(b, 0));
        for (q, o) in b[2..34].chunks_exact(8).zip(o.chunks_exact_mut(8)) {
            let q = float(_mm256_cvtepi8_epi32(bytes8(q)));
            put(o, _mm256_mul_ps(q, d));
        }
    }
    true
}

/// Q4_K: four runs of 64, the low then the high nibbles of 32 bytes, each
/// half its sub-block's `dl * q - ml`.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q4_k(blocks: &[u8], out: &mut [f32], scales: super::KScales) -> bool {
    for (b, o) in blocks.chunks_exact(144).zip(out.chunks_exact_mut(256)) {
        let (dl, ml) = scales(b);
        for (c, (run, q)) in o
            .chunks_exact_mut(64)
            .zip(b[16..].chunks_exact(32))
            .enumerate()
        {
            let (lo, hi) = (2 * c, 2 * c + 1);
            let (dlo, mlo) = (_mm256_set1_ps(dl[lo]), _mm256_set1_ps(ml[lo]));
            let (dhi, mhi) = (_mm256_set1_ps(dl[hi]), _mm256_set1_ps(ml[hi]));
            let (low, high) = run.split_at_mut(32);
            for (part, q) in q.chunks_exact(8).enumerate() {
                let x = _mm256_cvtepu8_epi32(bytes8(q));
                let a = float(_mm256_and_si256(x, splat(0x0f)));
                let h = float(_mm256_srli_epi32::<4>(x));
                let at = 8 * part;
                put(&mut low[at..], _mm256_sub_ps(_mm256_mul_ps(dlo, a), mlo));
                put(&mut high[at..], _mm256_sub_ps(_mm256_mul_ps(dhi, h), mhi));
            }
        }
    }
    true
}

/// Q6_K: two halves of 128, each from 64 bytes of low nibbles and 32 of
/// high bit pairs, four runs of 32; element `e` of a half is
/// `dl[e / 16] * (code - 32)`.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q6_k(blocks: &[u8], out: &mut [f32]) -> bool {
    for (b, o) in blocks.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 208);
        let dl: [f32; 16] = std::array::from_fn(|i| d * (b[192 + i] as i8) as f32);
        for (h, half) in o.chunks_exact_mut(128).enumerate() {
            let (ql, qh) = (&b[64 * h..64 * h + 64], &b[128 + 32 * h..128 + 32 * h + 32]);
            for part in 0..4 {
                let (at, side) = (8 * part, part / 2);
                let a = _mm256_cvtepu8_epi32(bytes8(&ql[at..]));
                let c = _mm256_cvtepu8_epi32(bytes8(&ql[32 + at..]));
                let hb = _mm256_cvtepu8_epi32(bytes8(&qh[at..]));
                let two = |v: __m256i| _mm256_slli_epi32::<4>(_mm256_and_si256(v, splat(3)));
                let codes = [
                    _mm256_or_si256(_mm256_and_si256(a, splat(0x0f)), two(hb)),
                    _mm256_or_si256(
                        _mm256_and_si256(c, splat(0x0f)),
                        two(_mm256_srli_epi32::<2>(hb)),
                    ),
                    _mm256_or_si256(_mm256_srli_epi32::<4>(a), two(_mm256_srli_epi32::<4>(hb))),
                    _mm256_or_si256(_mm256_srli_epi32::<4>(c), two(_mm256_srli_epi32::<6>(hb))),
                ];
                for (r, code) in codes.into_iter().enumerate() {
                    let scale = _mm256_set1_ps(dl[8 * h + 2 * r + side]);
                    let q = float(_mm256_sub_epi32(code, splat(32)));
                    put(&mut half[32 * r + at..], _mm256_mul_ps(scale, q));
                }
            }
        }
    }
    true
}

/// Q5_K: Q4_K's four runs of 64, each nibble given its fifth bit from
/// `qh` (bit `2c` of byte `l` for the low nibbles of run `c`, bit `2c + 1`
/// for the high ones), then its sub-block's `dl * q - ml`.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn q5_k(blocks: &[u8], out: &mut [f32], scales: super::KScales) -> bool {
    for (b, o) in blocks.chunks_exact(176).zip(out.chunks_exact_mut(256)) {
        let (dl, ml) = scales(b);
        let (qh, qs) = (&b[16..48], &b[48..176]);
        for (c, (run, q)) in o.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
            let (lo, hi) = (2 * c, 2 * c + 1);
            let (dlo, mlo) = (_mm256_set1_ps(dl[lo]), _mm256_set1_ps(ml[lo]));
            let (dhi, mhi) = (_mm256_set1_ps(dl[hi]), _mm256_set1_ps(ml[hi]));
            // The fifth bits of this run, shifted to bit 4.
            let fifth = |h: __m256i, bit: usize| {
                let b = _mm256_srlv_epi32(h, splat(bit as i32));
                _mm256_slli_epi32::<4>(_mm256_and_si256(b, splat(1)))
            };
            let (low, high) = run.split_at_mut(32);
            for (part, (q, h)) in q.chunks_exact(8).zip(qh.chunks_exact(8)).enumerate() {
                let x = _mm256_cvtepu8_epi32(bytes8(q));
                let h = _mm256_cvtepu8_epi32(bytes8(h));
                let a = _mm256_or_si256(_mm256_and_si256(x, splat(0x0f)), fifth(h, lo));
                let g = _mm256_or_si256(_mm256_srli_epi32::<4>(x), fifth(h, hi));
                let at = 8 * part;
                let (a, g) = (float(a), float(g));
                put(&mut low[at..], _mm256_sub_ps(_mm256_mul_ps(dlo, a), mlo));
                put(&mut high[at..], _mm256_sub_ps(_mm256_mul_ps(dhi, g), mhi));
            }
        }
    }
    true
}

/// IQ4_XS: eight sub-blocks of 32, each 16 bytes of nibbles (the low ones
/// first) looked up in `table` (ggml's `kvalues_iq4nl`, one `i8` per
/// nibble, by `vpshufb`), times the sub-block's `d * (scale - 32)`.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn iq4_xs(blocks: &[u8], out: &mut [f32], table: &[i8; 16]) -> bool {
    let table: __m128i = bytemuck::cast(*table);
    for (b, o) in blocks.chunks_exact(136).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 0);
        let high = u16::from_le_bytes([b[2], b[3]]);
        let (low, qs) = (&b[4..8], &b[8..136]);
        for (j, (sub, q)) in o.chunks_exact_mut(32).zip(qs.chunks_exact(16)).enumerate() {
            let l = (low[j / 2] >> (4 * (j % 2))) & 0x0f;
            let h = ((high >> (2 * j)) & 3) as u8;
            let dl = _mm256_set1_ps(d * ((l | (h << 4)) as i32 - 32) as f32);
            let x: __m128i = bytemuck::pod_read_unaligned(&q[..16]);
            let nib = _mm_set1_epi8(0x0f);
            let lo = _mm_shuffle_epi8(table, _mm_and_si128(x, nib));
            let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16::<4>(x), nib));
            for (at, v) in [(0, lo), (8, _mm_srli_si128::<8>(lo))] {
                let v = float(_mm256_cvtepi8_epi32(v));
                put(&mut sub[at..], _mm256_mul_ps(dl, v));
            }
            for (at, v) in [(16, hi), (24, _mm_srli_si128::<8>(hi))] {
                let v = float(_mm256_cvtepi8_epi32(v));
                put(&mut sub[at..], _mm256_mul_ps(dl, v));
            }
        }
    }
    true
}
