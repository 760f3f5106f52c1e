//! The AVX2 (+F16C) kernels: 8 lanes of 32 bits. The lane primitives
//! below, then the kernels [`lane_kernels!`](super::lanes) writes over
//! them, each mirroring a reference function of [`super::super::scalar`]
//! lane by lane; the comments say where the hardware's own conversion is
//! used and which lanes are patched.

use std::arch::x86_64::*;

use super::Done;
use crate::Dtype;

/// 32-bit lanes in a vector.
pub(super) const LANES: usize = 8;
/// A vector of [`LANES`] 32-bit lanes.
pub(super) type V = __m256i;
/// A lane mask: a compare's all-ones lanes.
pub(super) type M = __m256i;
/// [`LANES`] 16-bit values.
pub(super) type H = __m128i;

primitives! { "avx2,f16c";
    /// `n` in every 32-bit lane.
    fn splat(n: u32) -> V { _mm256_set1_epi32(n as i32) }
    fn splatf(x: f32) -> V { _mm256_castps_si256(_mm256_set1_ps(x)) }
    fn and(a: V, b: V) -> V { _mm256_and_si256(a, b) }
    fn or(a: V, b: V) -> V { _mm256_or_si256(a, b) }
    fn add(a: V, b: V) -> V { _mm256_add_epi32(a, b) }
    fn sub(a: V, b: V) -> V { _mm256_sub_epi32(a, b) }
    fn srli<const N: i32>(v: V) -> V { _mm256_srli_epi32::<N>(v) }
    fn slli<const N: i32>(v: V) -> V { _mm256_slli_epi32::<N>(v) }

    /// Each lane shifted right by its lane of `n`.
    fn srlv(v: V, n: V) -> V { _mm256_srlv_epi32(v, n) }

    /// `a > b`, lanes below 2^31 (signed and unsigned agree there).
    fn gt(a: V, b: V) -> M { _mm256_cmpgt_epi32(a, b) }
    fn eq(a: V, b: V) -> M { _mm256_cmpeq_epi32(a, b) }

    /// `yes` where `m` is set, else `no`.
    fn blend(m: M, no: V, yes: V) -> V { _mm256_blendv_epi8(no, yes, m) }

    /// The lanes of `a` not in `b`.
    fn but_not(a: M, b: M) -> M { _mm256_andnot_si256(b, a) }

    /// Lanes set in `m`.
    fn count(m: M) -> u64 { u64::from(_mm256_movemask_ps(_mm256_castsi256_ps(m)).count_ones()) }
    fn load(b: &[u8]) -> V { bytemuck::pod_read_unaligned(&b[..32]) }
    fn store(out: &mut [u8], v: V) { out[..32].copy_from_slice(bytemuck::bytes_of(&v)); }
    fn load_h(b: &[u8]) -> H { bytemuck::pod_read_unaligned(&b[..16]) }
    fn store_h(out: &mut [u8], v: H) { out[..16].copy_from_slice(bytemuck::bytes_of(&v)); }

    /// 16-bit values zero-extended into lanes.
    fn widen16(h: H) -> V { _mm256_cvtepu16_epi32(h) }

    /// Lanes below 2^16 as 16-bit values.
    fn narrow16(v: V) -> H {
        _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
    }

    /// Two vectors of lanes below 2^16 as 16 `u16`s, in order.
    fn pack(a: V, b: V) -> V {
        // packus interleaves 128-bit halves: a0 b0 a1 b1; put them back.
        _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(a, b))
    }

    /// `a`'s 16-bit values then `b`'s.
    fn join(a: H, b: H) -> V { _mm256_set_m128i(b, a) }

    /// [`LANES`] bytes in the low half of a register.
    fn bytes(b: &[u8]) -> __m128i {
        _mm_cvtsi64_si128(bytemuck::pod_read_unaligned::<i64>(&b[..8]))
    }

    /// [`LANES`] unsigned bytes as lanes.
    fn widen8(b: &[u8; LANES]) -> V { _mm256_cvtepu8_epi32(bytes(b)) }

    /// [`LANES`] unsigned bytes (in the low half of `b`) as lanes.
    fn u8s(b: __m128i) -> V { _mm256_cvtepu8_epi32(b) }

    /// [`LANES`] signed bytes (in the low half of `b`) as lanes.
    fn i8s(b: __m128i) -> V { _mm256_cvtepi8_epi32(b) }

    /// `i32` lanes as `f32` bits.
    fn cvtf(v: V) -> V { _mm256_castps_si256(_mm256_cvtepi32_ps(v)) }

    fn mulf(a: V, b: V) -> V {
        let (a, b) = (_mm256_castsi256_ps(a), _mm256_castsi256_ps(b));
        _mm256_castps_si256(_mm256_mul_ps(a, b))
    }

    fn subf(a: V, b: V) -> V {
        let (a, b) = (_mm256_castsi256_ps(a), _mm256_castsi256_ps(b));
        _mm256_castps_si256(_mm256_sub_ps(a, b))
    }

    /// Whether a lane of `f32`s is NaN.
    fn has_nan(v: V) -> bool {
        let f = _mm256_castsi256_ps(v);
        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(f, f)) != 0
    }

    /// F16C's rounding of each `f32` lane to F16 bits.
    fn cvtps_ph_h(v: V) -> H {
        _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_castsi256_ps(v))
    }

    /// F16C's widening of F16 bits to `f32` bits.
    fn cvtph_ps(h: H) -> V { _mm256_castps_si256(_mm256_cvtph_ps(h)) }

    /// `2 x LANES` E4M3 codes as `f32` lanes, each exactly 2^-8 times the
    /// code's value (NaN codes, 0x7f and 0xff, are not told apart: callers
    /// have none). Why: shifted into 16-bit lanes an E4M3 code is the F16 of
    /// 2^-8 times its value (sign on top, the 4-bit exponent and 3-bit
    /// mantissa where F16's low exponent bits and high mantissa bits are;
    /// subnormals too, F16's being 2^8 times smaller in the same steps), and
    /// F16C widens it exactly: 16 codes in 8 instructions, where decoding
    /// 8 lanes of 32 bits takes 11.
    fn e4m3_over_256(codes: &[u8; 2 * LANES]) -> (V, V) {
        let c = _mm256_cvtepu8_epi16(load_h(codes));
        let sign = _mm256_and_si256(_mm256_slli_epi16::<8>(c), _mm256_set1_epi16(i16::MIN));
        let magnitude = _mm256_and_si256(_mm256_slli_epi16::<7>(c), _mm256_set1_epi16(0x3f80));
        let h = _mm256_or_si256(sign, magnitude);
        let (low, high) = (_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        (cvtph_ps(low), cvtph_ps(high))
    }
}

/// The 16 entries of a code book: its low and high halves.
pub(super) type Book = (__m256, __m256);

primitives! { "avx2,f16c";
    fn book16(book: &[f32; 16]) -> Book {
        let half = |h: &[f32]| -> __m256 { bytemuck::pod_read_unaligned(bytemuck::cast_slice(h)) };
        (half(&book[..8]), half(&book[8..]))
    }

    /// `book[i]` for each lane's `i` (0 to 15): the low and high halves of
    /// the book permuted by the low 3 bits, chosen by bit 3.
    fn look_up(book: &Book, i: V) -> V {
        let a = _mm256_permutevar8x32_ps(book.0, i);
        let b = _mm256_permutevar8x32_ps(book.1, i);
        let m = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(i));
        _mm256_castps_si256(_mm256_blendv_ps(a, b, m))
    }

    /// 16 unsigned bytes as two vectors of lanes, in order.
    fn u8_parts(b: __m128i) -> [V; 2] { [u8s(b), u8s(_mm_srli_si128::<8>(b))] }
}

lane_kernels!("avx2,f16c");
book_kernels!("avx2,f16c");

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
