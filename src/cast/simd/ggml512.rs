//! The GGUF block kernels on AVX-512: 16 codes at a time, each element the
//! reference's (`dequant::ggml`) product and difference, in its order, each
//! rounded once. Block scales are decoded with the reference's scalar code.

use std::arch::x86_64::*;

use super::super::scalar::f16_to_f32;

/// The f16 at `at`, as f32 (exact).
fn f16_at(block: &[u8], at: usize) -> f32 {
    f32::from_bits(f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]])))
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn bytes16(b: &[u8]) -> __m128i {
    bytemuck::pod_read_unaligned(&b[..16])
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn put(out: &mut [f32], v: __m512) {
    let values: [f32; 16] = bytemuck::cast(v);
    out[..16].copy_from_slice(&values);
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn splat(n: i32) -> __m512i {
    _mm512_set1_epi32(n)
}

/// Unsigned bytes as f32 lanes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn float(v: __m512i) -> __m512 {
    _mm512_cvtepi32_ps(v)
}

/// `d * f(nibble)` for 16 bytes of nibbles: the low ones into `low`, the
/// high ones into `high` (ggml's Q4_0 packing), `offset` subtracted first.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn nibbles_times(qs: &[u8], d: f32, offset: i32, low: &mut [f32], high: &mut [f32]) {
    let x = _mm512_cvtepu8_epi32(bytes16(qs));
    let d = _mm512_set1_ps(d);
    let lo = _mm512_sub_epi32(_mm512_and_si512(x, splat(0x0f)), splat(offset));
    let hi = _mm512_sub_epi32(_mm512_srli_epi32::<4>(x), splat(offset));
    put(low, _mm512_mul_ps(d, float(lo)));
    put(high, _mm512_mul_ps(d, float(hi)));
}

/// Q4_0 (`d * (q - 8)`), block by block.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn q4_0(blocks: &[u8], out: &mut [f32]) -> bool {
    for (b, o) in blocks.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
        let (low, high) = o.split_at_mut(16);
        nibbles_times(&b[2..18], f16_at(b, 0), 8, low, high);
    }
    true
}

/// Q8_0 (`q * d`), block by block.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn q8_0(blocks: &[u8], out: &mut [f32]) -> bool {
    for (b, o) in blocks.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
        let d = _mm512_set1_ps(f16_at(b, 0));
        for (q, o) in b[2..34].chunks_exact(16).zip(o.chunks_exact_mut(16)) {
            let q = float(_mm512_cvtepi8_epi32(bytes16(q)));
            put(o, _mm512_mul_ps(q, d));
        }
    }
    true
}

/// Q4_K: four runs of 64, the low then the high nibbles of 32 bytes, each
/// half its sub-block's `dl * q - ml`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn q4_k(blocks: &[u8], out: &mut [f32], scales: super::KScales) -> bool {
    for (b, o) in blocks.chunks_exact(144).zip(out.chunks_exact_mut(256)) {
        let (dl, ml) = scales(b);
        for (c, (run, q)) in o
            .chunks_exact_mut(64)
            .zip(b[16..].chunks_exact(32))
            .enumerate()
        {
            let (lo, hi) = (2 * c, 2 * c + 1);
            let (dlo, mlo) = (_mm512_set1_ps(dl[lo]), _mm512_set1_ps(ml[lo]));
            let (dhi, mhi) = (_mm512_set1_ps(dl[hi]), _mm512_set1_ps(ml[hi]));
            let (low, high) = run.split_at_mut(32);
            for (half, q) in q.chunks_exact(16).enumerate() {
                let x = _mm512_cvtepu8_epi32(bytes16(q));
                let a = float(_mm512_and_si512(x, splat(0x0f)));
                let h = float(_mm512_srli_epi32::<4>(x));
                let at = 16 * half;
                put(&mut low[at..], _mm512_sub_ps(_mm512_mul_ps(dlo, a), mlo));
                put(&mut high[at..], _mm512_sub_ps(_mm512_mul_ps(dhi, h), mhi));
            }
        }
    }
    true
}

/// Q6_K: two halves of 128, each from 64 bytes of low nibbles and 32 of
/// high bit pairs, four runs of 32; element `e` of a half is
/// `dl[e / 16] * (code - 32)`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn q6_k(blocks: &[u8], out: &mut [f32]) -> bool {
    for (b, o) in blocks.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
        let d = f16_at(b, 208);
        let dl: [f32; 16] = std::array::from_fn(|i| d * (b[192 + i] as i8) as f32);
        for (h, half) in o.chunks_exact_mut(128).enumerate() {
            let (ql, qh) = (&b[64 * h..64 * h + 64], &b[128 + 32 * h..128 + 32 * h + 32]);
            for side in 0..2 {
                let at = 16 * side;
                let a = _mm512_cvtepu8_epi32(bytes16(&ql[at..]));
                let c = _mm512_cvtepu8_epi32(bytes16(&ql[32 + at..]));
                let hb = _mm512_cvtepu8_epi32(bytes16(&qh[at..]));
                let two = |v: __m512i| _mm512_slli_epi32::<4>(_mm512_and_si512(v, splat(3)));
                let codes = [
                    _mm512_or_si512(_mm512_and_si512(a, splat(0x0f)), two(hb)),
                    _mm512_or_si512(
                        _mm512_and_si512(c, splat(0x0f)),
                        two(_mm512_srli_epi32::<2>(hb)),
                    ),
                    _mm512_or_si512(_mm512_srli_epi32::<4>(a), two(_mm512_srli_epi32::<4>(hb))),
                    _mm512_or_si512(_mm512_srli_epi32::<4>(c), two(_mm512_srli_epi32::<6>(hb))),
                ];
                for (r, code) in codes.into_iter().enumerate() {
                    let scale = _mm512_set1_ps(dl[8 * h + 2 * r + side]);
                    let q = float(_mm512_sub_epi32(code, splat(32)));
                    put(&mut half[32 * r + at..], _mm512_mul_ps(scale, q));
                }
            }
        }
    }
    true
}
