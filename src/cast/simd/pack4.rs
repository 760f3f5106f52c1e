//! compressed-tensors `pack-quantized` 4-bit rows on AVX2, stored straight
//! as the output dtype: 8 codes a word (low nibble first, as GPTQ's
//! `quant2::int4_row` reads them), each `(q - zero) * scale` in the
//! reference's order (`dequant::packed::rows`), rounded once as the scales'
//! dtype stores it. Where the output dtype is the scales' (or F32), that
//! rounded value is already the output: its bits are taken as they are,
//! with no second pass over an `f32` buffer.
//!
//! Groups come in runs in most checkpoints (`k / group_size`): 8 columns of
//! one group take its zero point and scale broadcast; others (`g_idx`,
//! a group's edge) are looked up lane by lane, each index checked.

use std::arch::x86_64::*;

use super::avx2::{put_rounded, stored_as};
use super::Pack4Row as Row;
use crate::Dtype;

/// One 4-bit row: column `k` is nibble `k` of `words` (unsigned), in group
/// `group_of[k]`; each value `(q - zeros[g]) * scales[g]` rounded as
/// `dtype` stores it, written as `to` (little-endian) into `out`. `to`
/// must be F32 or `dtype`; else nothing is done. Whole words; returns the
/// columns done.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn pack4_row_as(row: &Row, dtype: Dtype, to: Dtype, out: &mut [u8]) -> usize {
    // The rounded value is the output's bits only as F32 or as itself.
    if to != Dtype::F32 && to != dtype {
        return 0;
    }
    by_dtypes!(dtype, to, row_as(row, out), 0)
}

/// `zeros[g]` and `scales[g]` for 8 columns of groups `g`: broadcast when
/// all 8 are one group, else looked up lane by lane (GPTQ's `int4_row`
/// takes them so too).
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn group_values(zeros: &[f32], scales: &[f32], g: &[u32]) -> (__m256, __m256) {
    let g: [u32; 8] = g.try_into().expect("8 groups");
    let lanes: __m256i = bytemuck::cast(g);
    let first = _mm256_set1_epi32(g[0] as i32);
    let same = _mm256_movemask_epi8(_mm256_cmpeq_epi32(lanes, first)) == -1;
    if same {
        let g = g[0] as usize;
        return (_mm256_set1_ps(zeros[g]), _mm256_set1_ps(scales[g]));
    }
    let z: [f32; 8] = g.map(|g| zeros[g as usize]);
    let s: [f32; 8] = g.map(|g| scales[g as usize]);
    (bytemuck::cast(z), bytemuck::cast(s))
}

/// `ROUND`: the scales' dtype (0 F32, 1 BF16, 2 F16); `OUT`: the output's
/// (0 F32, else `ROUND`'s).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn row_as<const ROUND: u8, const OUT: u8>(r: &Row, out: &mut [u8]) -> usize {
    let width = if OUT == 0 { 4 } else { 2 };
    let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    let mut done = 0;
    let chunks = r
        .group_of
        .chunks_exact(8)
        .zip(out.chunks_exact_mut(8 * width))
        .zip(r.words);
    for ((g, o), &word) in chunks {
        let q = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(word as i32), shifts),
            _mm256_set1_epi32(0xf),
        );
        let (z, s) = group_values(r.zeros, r.scales, g);
        let v = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(q), z), s);
        let v = stored_as::<ROUND>(_mm256_castps_si256(v));
        // Where the output is the scales' dtype, the rounded value's bits.
        put_rounded::<ROUND, OUT, false>(v, o);
        done += 8;
    }
    done
}
