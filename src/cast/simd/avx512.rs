//! The AVX-512 (F, BW, DQ, VL, with F16C) kernels: 16 lanes of 32 bits,
//! the AVX2 kernels' arithmetic with mask registers for the selects.

use std::arch::x86_64::*;

use super::Done;
use crate::Dtype;

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn splat(n: u32) -> __m512i {
    _mm512_set1_epi32(n as i32)
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn load(b: &[u8]) -> __m512i {
    bytemuck::pod_read_unaligned(&b[..64])
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn load_half(b: &[u8]) -> __m256i {
    bytemuck::pod_read_unaligned(&b[..32])
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn store(out: &mut [u8], v: __m512i) {
    out[..64].copy_from_slice(bytemuck::bytes_of(&v));
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn store_half(out: &mut [u8], v: __m256i) {
    out[..32].copy_from_slice(bytemuck::bytes_of(&v));
}

/// [`f32_to_bf16`](super::super::scalar::f32_to_bf16) of each lane, and
/// the lanes that overflowed to infinity.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn bf16_lanes(x: __m512i) -> (__m512i, __mmask16) {
    let abs = _mm512_and_si512(x, splat(0x7fff_ffff));
    let nan = _mm512_cmpgt_epu32_mask(abs, splat(0x7f80_0000));
    let odd = _mm512_and_si512(_mm512_srli_epi32::<16>(x), splat(1));
    let bias = _mm512_add_epi32(splat(0x7fff), odd);
    let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(x, bias));
    let sign = _mm512_srli_epi32::<16>(_mm512_and_si512(x, splat(0x8000_0000)));
    let quiet = _mm512_or_si512(sign, splat(0x7fc0));
    let h = _mm512_mask_blend_epi32(nan, rounded, quiet);
    let inf_out = _mm512_cmpeq_epi32_mask(_mm512_and_si512(h, splat(0x7fff)), splat(0x7f80));
    let finite_in = _mm512_cmpneq_epi32_mask(abs, splat(0x7f80_0000));
    (h, inf_out & finite_in)
}

/// [`f32_to_f16`](super::super::scalar::f32_to_f16) of each lane: the
/// hardware's rounding, NaN lanes rebuilt as numpy does.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn f16_lanes(x: __m512i) -> (__m512i, __mmask16) {
    let abs = _mm512_and_si512(x, splat(0x7fff_ffff));
    let hw = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm512_castsi512_ps(x));
    let hw = _mm512_cvtepu16_epi32(hw);
    let nan = _mm512_cmpgt_epu32_mask(abs, splat(0x7f80_0000));
    let payload = _mm512_and_si512(_mm512_srli_epi32::<13>(abs), splat(0x3ff));
    let empty = _mm512_cmpeq_epi32_mask(payload, splat(0));
    let payload = _mm512_mask_blend_epi32(empty, payload, splat(1));
    let sign = _mm512_srli_epi32::<16>(_mm512_and_si512(x, splat(0x8000_0000)));
    let nan_bits = _mm512_or_si512(_mm512_or_si512(sign, splat(0x7c00)), payload);
    let h = _mm512_mask_blend_epi32(nan, hw, nan_bits);
    let inf_out = _mm512_cmpeq_epi32_mask(_mm512_and_si512(h, splat(0x7fff)), splat(0x7c00));
    let finite_in = _mm512_cmpneq_epi32_mask(abs, splat(0x7f80_0000));
    (h, inf_out & finite_in)
}

/// F16 bits to F32 bits: the hardware's, NaN payloads kept.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn f16_widen(h: __m256i) -> __m512i {
    let hw = _mm512_castps_si512(_mm512_cvtph_ps(h));
    let x = _mm512_cvtepu16_epi32(h);
    let a = _mm512_and_si512(x, splat(0x7fff));
    let nan = _mm512_cmpgt_epu32_mask(a, splat(0x7c00));
    let sign = _mm512_slli_epi32::<16>(_mm512_and_si512(x, splat(0x8000)));
    let special = _mm512_or_si512(
        _mm512_or_si512(sign, _mm512_slli_epi32::<13>(a)),
        splat(0x7f80_0000),
    );
    _mm512_mask_blend_epi32(nan, hw, special)
}

fn count(m: __mmask16) -> u64 {
    u64::from(m.count_ones())
}

/// 16 F32s at a time to 16 F16s (`F16`) or BF16s.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn narrow_f32<const F16: bool>(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(64).zip(output.chunks_exact_mut(32)) {
        let x = load(i);
        let (h, over) = if F16 { f16_lanes(x) } else { bf16_lanes(x) };
        store_half(o, _mm512_cvtepi32_epi16(h));
        done.overflowed += count(over);
        done.elems += 16;
    }
    done
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn f32_to_bf16(input: &[u8], output: &mut [u8]) -> Done {
    narrow_f32::<false>(input, output)
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn f32_to_f16(input: &[u8], output: &mut [u8]) -> Done {
    narrow_f32::<true>(input, output)
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn bf16_to_f32(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(32).zip(output.chunks_exact_mut(64)) {
        store(
            o,
            _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(load_half(i))),
        );
        done.elems += 16;
    }
    done
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn f16_to_f32(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(32).zip(output.chunks_exact_mut(64)) {
        store(o, f16_widen(load_half(i)));
        done.elems += 16;
    }
    done
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn bf16_to_f16(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(32).zip(output.chunks_exact_mut(32)) {
        let x = _mm512_cvtepu16_epi32(load_half(i));
        let f = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(x));
        let hw = _mm512_cvtepu16_epi32(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(f));
        let a = _mm512_and_si512(x, splat(0x7fff));
        let nan = _mm512_cmpgt_epu32_mask(a, splat(0x7f80));
        let quiet = _mm512_or_si512(_mm512_and_si512(x, splat(0x8000)), splat(0x7e00));
        let h = _mm512_mask_blend_epi32(nan, hw, quiet);
        let inf_out = _mm512_cmpeq_epi32_mask(_mm512_and_si512(h, splat(0x7fff)), splat(0x7c00));
        let finite_in = _mm512_cmpneq_epi32_mask(a, splat(0x7f80));
        store_half(o, _mm512_cvtepi32_epi16(h));
        done.overflowed += count(inf_out & finite_in);
        done.elems += 16;
    }
    done
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn f16_to_bf16(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(32).zip(output.chunks_exact_mut(32)) {
        let f = _mm512_castps_si512(_mm512_cvtph_ps(load_half(i)));
        let (h, _) = bf16_lanes(f);
        store_half(o, _mm512_cvtepi32_epi16(h));
        done.elems += 16;
    }
    done
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn f64_to_f32(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    let abs64 = _mm512_set1_epi64(0x7fff_ffff_ffff_ffff);
    let inf64 = _mm512_set1_epi64(0x7ff0_0000_0000_0000);
    for (i, o) in input.chunks_exact(64).zip(output.chunks_exact_mut(32)) {
        let d = load(i);
        let f = _mm256_castps_si256(_mm512_cvtpd_ps(_mm512_castsi512_pd(d)));
        store_half(o, f);
        let abs = _mm256_and_si256(f, _mm256_set1_epi32(0x7fff_ffff));
        let inf_out = _mm256_cmpeq_epi32_mask(abs, _mm256_set1_epi32(0x7f80_0000));
        let inf_in = _mm512_cmpeq_epi64_mask(_mm512_and_si512(d, abs64), inf64);
        done.overflowed += u64::from(inf_out.count_ones() - inf_in.count_ones());
        done.elems += 8;
    }
    done
}

/// E4M3 codes to their F32 values, as the reference's table has them:
/// `S.EEEE.MMM` is `2^(E-7) * 1.MMM` (the bits moved into place and
/// rebiased), `E = 0` is `MMM * 2^-9` (exact in F32), `S.1111.111` the
/// positive quiet NaN.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn e4m3_lanes(codes: __m128i) -> __m512i {
    let c = _mm512_cvtepu8_epi32(codes);
    let m = _mm512_and_si512(c, splat(0x7f));
    let normal = _mm512_add_epi32(_mm512_slli_epi32::<20>(m), splat(120 << 23));
    let small = _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(1.0 / 512.0));
    let subnormal = _mm512_cmplt_epu32_mask(m, splat(8));
    let magnitude = _mm512_mask_blend_epi32(subnormal, normal, _mm512_castps_si512(small));
    let sign = _mm512_slli_epi32::<24>(_mm512_and_si512(c, splat(0x80)));
    let nan = _mm512_cmpeq_epi32_mask(m, splat(0x7f));
    let value = _mm512_or_si512(magnitude, sign);
    _mm512_mask_blend_epi32(nan, value, splat(0x7fc0_0000))
}

/// `f32` lanes as a tensor of the scales' dtype (`ROUND`: 0 F32, 1 BF16,
/// 2 F16) stores them: rounded to it and widened back.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn stored_as<const ROUND: u8>(v: __m512i) -> __m512i {
    match ROUND {
        1 => _mm512_slli_epi32::<16>(bf16_lanes(v).0),
        2 => f16_widen(_mm512_cvtepi32_epi16(f16_lanes(v).0)),
        _ => v,
    }
}

/// 16 codes times `scale`, rounded as `ROUND` says.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn e4m3_times<const ROUND: u8>(codes: [u8; 16], scale: __m512) -> [f32; 16] {
    let codes: __m128i = bytemuck::cast(codes);
    let v = _mm512_mul_ps(_mm512_castsi512_ps(e4m3_lanes(codes)), scale);
    bytemuck::cast(stored_as::<ROUND>(_mm512_castps_si512(v)))
}

/// One weight row of E4M3 codes in blocks of `block` columns, block `j`
/// times `scales[j]`: the reference's `rows` for one row. Whole runs of 16
/// as fixed-size loads and stores; a block's last few codes padded.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
fn e4m3_blocks<const ROUND: u8>(codes: &[u8], scales: &[f32], block: usize, out: &mut [f32]) {
    let blocks = codes.chunks(block).zip(out.chunks_mut(block)).zip(scales);
    for ((codes, out), &scale) in blocks {
        let scale = _mm512_set1_ps(scale);
        let mut c = codes.chunks_exact(16);
        let mut o = out.chunks_exact_mut(16);
        for (c, o) in (&mut c).zip(&mut o) {
            let c: [u8; 16] = c.try_into().expect("chunks_exact gives 16");
            o.copy_from_slice(&e4m3_times::<ROUND>(c, scale));
        }
        let (c, o) = (c.remainder(), o.into_remainder());
        if !c.is_empty() {
            let mut padded = [0u8; 16];
            padded[..c.len()].copy_from_slice(c);
            let values = e4m3_times::<ROUND>(padded, scale);
            o.copy_from_slice(&values[..o.len()]);
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn e4m3_row(
    codes: &[u8],
    scales: &[f32],
    block: usize,
    dtype: Dtype,
    out: &mut [f32],
) -> bool {
    match dtype {
        Dtype::F32 => e4m3_blocks::<0>(codes, scales, block, out),
        Dtype::BF16 => e4m3_blocks::<1>(codes, scales, block, out),
        Dtype::F16 => e4m3_blocks::<2>(codes, scales, block, out),
        _ => return false,
    }
    true
}
