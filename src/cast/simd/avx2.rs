//! The AVX2 (+F16C) kernels: 8 lanes of 32 bits. Each mirrors a reference
//! function of [`super::super::scalar`] lane by lane; the comments say
//! where the hardware's own conversion is used and which lanes are patched.

use std::arch::x86_64::*;

use super::Done;
use crate::Dtype;

/// `n` in every 32-bit lane.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn splat(n: u32) -> __m256i {
    _mm256_set1_epi32(n as i32)
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn load(b: &[u8]) -> __m256i {
    bytemuck::pod_read_unaligned(&b[..32])
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn load_half(b: &[u8]) -> __m128i {
    bytemuck::pod_read_unaligned(&b[..16])
}

#[inline]
#[target_feature(enable = "avx2,f16c")]
fn store(out: &mut [u8], v: __m256i) {
    out[..32].copy_from_slice(bytemuck::bytes_of(&v));
}

/// Lanes set in `m` (a compare's all-ones lanes).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn count(m: __m256i) -> u64 {
    u64::from(_mm256_movemask_ps(_mm256_castsi256_ps(m)).count_ones())
}

/// Two vectors of 8 values below 2^16 as 16 `u16`s, in order.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn pack(a: __m256i, b: __m256i) -> __m256i {
    // packus interleaves 128-bit halves: a0 b0 a1 b1; put them back.
    _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(a, b))
}

/// [`f32_to_bf16`](super::super::scalar::f32_to_bf16) of each lane (in the
/// low 16 bits), and the lanes that overflowed to infinity.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn bf16_lanes(x: __m256i) -> (__m256i, __m256i) {
    let abs = _mm256_and_si256(x, splat(0x7fff_ffff));
    let nan = _mm256_cmpgt_epi32(abs, splat(0x7f80_0000));
    let odd = _mm256_and_si256(_mm256_srli_epi32::<16>(x), splat(1));
    let bias = _mm256_add_epi32(splat(0x7fff), odd);
    let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(x, bias));
    let sign = _mm256_srli_epi32::<16>(_mm256_and_si256(x, splat(0x8000_0000)));
    let quiet = _mm256_or_si256(sign, splat(0x7fc0));
    let h = _mm256_blendv_epi8(rounded, quiet, nan);
    let inf_out = _mm256_cmpeq_epi32(_mm256_and_si256(h, splat(0x7fff)), splat(0x7f80));
    let inf_in = _mm256_cmpeq_epi32(abs, splat(0x7f80_0000));
    (h, _mm256_andnot_si256(inf_in, inf_out))
}

/// [`f32_to_f16`](super::super::scalar::f32_to_f16) of each lane: F16C
/// rounds every number to nearest even exactly as the reference does;
/// NaN lanes (which F16C quiets) are rebuilt as numpy does, keeping the
/// payload's top bits.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn f16_lanes(x: __m256i) -> (__m256i, __m256i) {
    let abs = _mm256_and_si256(x, splat(0x7fff_ffff));
    let hw = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_castsi256_ps(x));
    let hw = _mm256_cvtepu16_epi32(hw);
    let nan = _mm256_cmpgt_epi32(abs, splat(0x7f80_0000));
    let payload = _mm256_and_si256(_mm256_srli_epi32::<13>(abs), splat(0x3ff));
    let empty = _mm256_and_si256(_mm256_cmpeq_epi32(payload, splat(0)), splat(1));
    let sign = _mm256_srli_epi32::<16>(_mm256_and_si256(x, splat(0x8000_0000)));
    let nan_bits = _mm256_or_si256(
        _mm256_or_si256(sign, splat(0x7c00)),
        _mm256_or_si256(payload, empty),
    );
    let h = _mm256_blendv_epi8(hw, nan_bits, nan);
    let inf_out = _mm256_cmpeq_epi32(_mm256_and_si256(h, splat(0x7fff)), splat(0x7c00));
    let inf_in = _mm256_cmpeq_epi32(abs, splat(0x7f80_0000));
    (h, _mm256_andnot_si256(inf_in, inf_out))
}

/// [`f32_to_bf16`](super::super::scalar::f32_to_bf16) of each lane, in
/// its low 16 bits.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn bf16_bits(x: __m256i) -> __m256i {
    bf16_lanes(x).0
}

/// [`f32_to_f16`](super::super::scalar::f32_to_f16) of each lane, in its
/// low 16 bits.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn f16_bits(x: __m256i) -> __m256i {
    f16_lanes(x).0
}

/// F16 bits (zero-extended lanes) to F32 bits: F16C is exact for every
/// number; NaN lanes (which F16C quiets) keep their payload, as numpy does.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn f16_widen(h: __m128i) -> __m256i {
    let hw = _mm256_castps_si256(_mm256_cvtph_ps(h));
    let x = _mm256_cvtepu16_epi32(h);
    let a = _mm256_and_si256(x, splat(0x7fff));
    let nan = _mm256_cmpgt_epi32(a, splat(0x7c00));
    let sign = _mm256_slli_epi32::<16>(_mm256_and_si256(x, splat(0x8000)));
    let special = _mm256_or_si256(
        _mm256_or_si256(sign, _mm256_slli_epi32::<13>(a)),
        splat(0x7f80_0000),
    );
    _mm256_blendv_epi8(hw, special, nan)
}

#[target_feature(enable = "avx2,f16c")]
pub(super) fn f32_to_bf16(input: &[u8], output: &mut [u8]) -> Done {
    narrow_f32::<false>(input, output)
}

#[target_feature(enable = "avx2,f16c")]
pub(super) fn f32_to_f16(input: &[u8], output: &mut [u8]) -> Done {
    narrow_f32::<true>(input, output)
}

/// 16 F32s at a time to 16 F16s (`F16`) or BF16s.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn narrow_f32<const F16: bool>(input: &[u8], output: &mut [u8]) -> Done {
    let lanes = |x| if F16 { f16_lanes(x) } else { bf16_lanes(x) };
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(64).zip(output.chunks_exact_mut(32)) {
        let (a, over_a) = lanes(load(i));
        let (b, over_b) = lanes(load(&i[32..]));
        store(o, pack(a, b));
        done.overflowed += count(over_a) + count(over_b);
        done.elems += 16;
    }
    done
}

#[target_feature(enable = "avx2,f16c")]
pub(super) fn bf16_to_f32(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(16).zip(output.chunks_exact_mut(32)) {
        store(
            o,
            _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(load_half(i))),
        );
        done.elems += 8;
    }
    done
}

#[target_feature(enable = "avx2,f16c")]
pub(super) fn f16_to_f32(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(16).zip(output.chunks_exact_mut(32)) {
        store(o, f16_widen(load_half(i)));
        done.elems += 8;
    }
    done
}

/// [`bf16_to_f16`](super::super::scalar::bf16_to_f16): the BF16 is an exact
/// F32, rounded by F16C; NaN lanes become a quiet NaN of their sign.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn bf16_f16_lanes(h: __m128i) -> (__m256i, __m256i) {
    let x = _mm256_cvtepu16_epi32(h);
    let f = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(x));
    let hw = _mm256_cvtepu16_epi32(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(f));
    let a = _mm256_and_si256(x, splat(0x7fff));
    let nan = _mm256_cmpgt_epi32(a, splat(0x7f80));
    let quiet = _mm256_or_si256(_mm256_and_si256(x, splat(0x8000)), splat(0x7e00));
    let out = _mm256_blendv_epi8(hw, quiet, nan);
    let inf_out = _mm256_cmpeq_epi32(_mm256_and_si256(out, splat(0x7fff)), splat(0x7c00));
    let inf_in = _mm256_cmpeq_epi32(a, splat(0x7f80));
    (out, _mm256_andnot_si256(inf_in, inf_out))
}

#[target_feature(enable = "avx2,f16c")]
pub(super) fn bf16_to_f16(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(32).zip(output.chunks_exact_mut(32)) {
        let (a, over_a) = bf16_f16_lanes(load_half(i));
        let (b, over_b) = bf16_f16_lanes(load_half(&i[16..]));
        store(o, pack(a, b));
        done.overflowed += count(over_a) + count(over_b);
        done.elems += 16;
    }
    done
}

/// F16 to F32 (exact: F16C, whose quieting of NaNs the BF16 rounding's
/// squash makes moot), then to BF16.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn f16_to_bf16(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    for (i, o) in input.chunks_exact(32).zip(output.chunks_exact_mut(32)) {
        let wide = |h| _mm256_castps_si256(_mm256_cvtph_ps(h));
        let (a, _) = bf16_lanes(wide(load_half(i)));
        let (b, _) = bf16_lanes(wide(load_half(&i[16..])));
        store(o, pack(a, b));
        done.elems += 16;
    }
    done
}

/// `vcvtpd2ps` rounds as the reference's `as f32` (`cvtsd2ss`) does, NaNs
/// included; overflows are the infinities out less the infinities in.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn f64_to_f32(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    let abs64 = _mm256_set1_epi64x(0x7fff_ffff_ffff_ffff);
    let inf64 = _mm256_set1_epi64x(0x7ff0_0000_0000_0000);
    for (i, o) in input.chunks_exact(64).zip(output.chunks_exact_mut(32)) {
        let (a, b) = (load(i), load(&i[32..]));
        let lo = _mm256_cvtpd_ps(_mm256_castsi256_pd(a));
        let hi = _mm256_cvtpd_ps(_mm256_castsi256_pd(b));
        let f = _mm256_castps_si256(_mm256_set_m128(hi, lo));
        store(o, f);
        let inf_out =
            _mm256_cmpeq_epi32(_mm256_and_si256(f, splat(0x7fff_ffff)), splat(0x7f80_0000));
        let inf_in = |v| {
            let m = _mm256_cmpeq_epi64(_mm256_and_si256(v, abs64), inf64);
            u64::from(_mm256_movemask_pd(_mm256_castsi256_pd(m)).count_ones())
        };
        done.overflowed += count(inf_out) - inf_in(a) - inf_in(b);
        done.elems += 8;
    }
    done
}

/// E4M3 codes to their F32 values, as the reference's table has them:
/// `S.EEEE.MMM` is `2^(E-7) * 1.MMM` (the bits moved into place and
/// rebiased), `E = 0` is `MMM * 2^-9` (exact in F32), `S.1111.111` the
/// positive quiet NaN.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn e4m3_lanes(codes: __m128i) -> __m256i {
    let c = _mm256_cvtepu8_epi32(codes);
    let m = _mm256_and_si256(c, splat(0x7f));
    let normal = _mm256_add_epi32(_mm256_slli_epi32::<20>(m), splat(120 << 23));
    let small = _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(1.0 / 512.0));
    let subnormal = _mm256_cmpgt_epi32(splat(8), m);
    let magnitude = _mm256_blendv_epi8(normal, _mm256_castps_si256(small), subnormal);
    let sign = _mm256_slli_epi32::<24>(_mm256_and_si256(c, splat(0x80)));
    let nan = _mm256_cmpeq_epi32(m, splat(0x7f));
    let value = _mm256_or_si256(magnitude, sign);
    _mm256_blendv_epi8(value, splat(0x7fc0_0000), nan)
}

/// Eight 32-bit lanes below 2^16 as eight `u16`s.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn narrow(v: __m256i) -> __m128i {
    _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
}

/// `f32` lanes as a tensor of the scales' dtype (`ROUND`: 0 F32, 1 BF16,
/// 2 F16) stores them: rounded to it and widened back.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn stored_as<const ROUND: u8>(v: __m256i) -> __m256i {
    match ROUND {
        1 => _mm256_slli_epi32::<16>(bf16_lanes(v).0),
        2 => {
            let f = _mm256_castsi256_ps(v);
            match _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(f, f)) {
                // No NaN: F16C rounds every number to nearest even and
                // widens it back exactly, as `f16_lanes` and `f16_widen` do.
                0 => _mm256_castps_si256(_mm256_cvtph_ps(_mm256_cvtps_ph::<
                    _MM_FROUND_TO_NEAREST_INT,
                >(f))),
                _ => f16_widen(narrow(f16_lanes(v).0)),
            }
        }
        _ => v,
    }
}

/// 8 codes times `scale`, rounded as `ROUND` says, as `f32` bits.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn e4m3_lanes_times<const ROUND: u8>(codes: [u8; 8], scale: __m256) -> __m256i {
    let codes = _mm_cvtsi64_si128(i64::from_le_bytes(codes));
    let v = _mm256_mul_ps(_mm256_castsi256_ps(e4m3_lanes(codes)), scale);
    stored_as::<ROUND>(_mm256_castps_si256(v))
}

/// 8 codes times `scale`, rounded as `ROUND` says.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn e4m3_times<const ROUND: u8>(codes: [u8; 8], scale: __m256) -> [f32; 8] {
    bytemuck::cast(e4m3_lanes_times::<ROUND>(codes, scale))
}

/// 8 codes times `scale`, rounded as `ROUND` says, then stored as `OUT`
/// (0 F32, 1 BF16, 2 F16) stores them: 32 or 16 little-endian bytes.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn e4m3_times_as<const ROUND: u8, const OUT: u8>(codes: [u8; 8], scale: __m256) -> [u8; 32] {
    let v = e4m3_lanes_times::<ROUND>(codes, scale);
    let half = match OUT {
        1 => narrow(bf16_lanes(v).0),
        2 => narrow(f16_lanes(v).0),
        _ => return bytemuck::cast(v),
    };
    let mut out = [0u8; 32];
    out[..16].copy_from_slice(bytemuck::bytes_of(&half));
    out
}

/// [`e4m3_blocks`] stored as `OUT` says straight into bytes: each `f32`
/// product (rounded as the scales' dtype, `ROUND`) goes from the register
/// it was made in to its one cast, as the reference's `rows` then
/// `store_f32` round it, with no `f32` buffer between them.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn e4m3_blocks_as<const ROUND: u8, const OUT: u8>(
    codes: &[u8],
    scales: &[f32],
    block: usize,
    out: &mut [u8],
) {
    let width = if OUT == 0 { 4 } else { 2 };
    let blocks = codes
        .chunks(block)
        .zip(out.chunks_mut(block * width))
        .zip(scales);
    for ((codes, out), &scale) in blocks {
        let scale = _mm256_set1_ps(scale);
        let mut c = codes.chunks_exact(8);
        let mut o = out.chunks_exact_mut(8 * width);
        for (c, o) in (&mut c).zip(&mut o) {
            let c: [u8; 8] = c.try_into().expect("chunks_exact gives 8");
            o.copy_from_slice(&e4m3_times_as::<ROUND, OUT>(c, scale)[..8 * width]);
        }
        let (c, o) = (c.remainder(), o.into_remainder());
        if !c.is_empty() {
            let mut padded = [0u8; 8];
            padded[..c.len()].copy_from_slice(c);
            let bytes = e4m3_times_as::<ROUND, OUT>(padded, scale);
            o.copy_from_slice(&bytes[..o.len()]);
        }
    }
}

#[target_feature(enable = "avx2,f16c")]
pub(super) fn e4m3_row_as(
    codes: &[u8],
    scales: &[f32],
    block: usize,
    dtype: Dtype,
    to: Dtype,
    out: &mut [u8],
) -> bool {
    macro_rules! by_output {
        ($round:literal) => {
            match to {
                Dtype::F32 => e4m3_blocks_as::<$round, 0>(codes, scales, block, out),
                Dtype::BF16 => e4m3_blocks_as::<$round, 1>(codes, scales, block, out),
                Dtype::F16 => e4m3_blocks_as::<$round, 2>(codes, scales, block, out),
                _ => return false,
            }
        };
    }
    match dtype {
        Dtype::F32 => by_output!(0),
        Dtype::BF16 => by_output!(1),
        Dtype::F16 => by_output!(2),
        _ => return false,
    }
    true
}

/// One weight row of E4M3 codes in blocks of `block` columns, block `j`
/// times `scales[j]`: the reference's `rows` for one row. Whole runs of 8
/// as fixed-size loads and stores; a block's last few codes padded.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn e4m3_blocks<const ROUND: u8>(codes: &[u8], scales: &[f32], block: usize, out: &mut [f32]) {
    let blocks = codes.chunks(block).zip(out.chunks_mut(block)).zip(scales);
    for ((codes, out), &scale) in blocks {
        let scale = _mm256_set1_ps(scale);
        let mut c = codes.chunks_exact(8);
        let mut o = out.chunks_exact_mut(8);
        for (c, o) in (&mut c).zip(&mut o) {
            let c: [u8; 8] = c.try_into().expect("chunks_exact gives 8");
            o.copy_from_slice(&e4m3_times::<ROUND>(c, scale));
        }
        let (c, o) = (c.remainder(), o.into_remainder());
        if !c.is_empty() {
            let mut padded = [0u8; 8];
            padded[..c.len()].copy_from_slice(c);
            let values = e4m3_times::<ROUND>(padded, scale);
            o.copy_from_slice(&values[..o.len()]);
        }
    }
}

#[target_feature(enable = "avx2,f16c")]
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
