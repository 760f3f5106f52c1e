//! The AVX-512 (F, BW, DQ, VL, with F16C) kernels: 16 lanes of 32 bits,
//! the AVX2 kernels' arithmetic (the same [`lane_kernels!`](super::lanes)
//! bodies) with mask registers for the selects.

use std::arch::x86_64::*;

use super::Done;
use crate::Dtype;

/// 32-bit lanes in a vector.
pub(super) const LANES: usize = 16;
/// A vector of [`LANES`] 32-bit lanes.
pub(super) type V = __m512i;
/// A lane mask: a mask register.
pub(super) type M = __mmask16;
/// [`LANES`] 16-bit values.
pub(super) type H = __m256i;

primitives! { "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c";
    /// `n` in every 32-bit lane.
    fn splat(n: u32) -> V { _mm512_set1_epi32(n as i32) }
    fn splatf(x: f32) -> V { _mm512_castps_si512(_mm512_set1_ps(x)) }
    fn and(a: V, b: V) -> V { _mm512_and_si512(a, b) }
    fn or(a: V, b: V) -> V { _mm512_or_si512(a, b) }
    fn add(a: V, b: V) -> V { _mm512_add_epi32(a, b) }
    fn sub(a: V, b: V) -> V { _mm512_sub_epi32(a, b) }
    fn srli<const N: u32>(v: V) -> V { _mm512_srli_epi32::<N>(v) }
    fn slli<const N: u32>(v: V) -> V { _mm512_slli_epi32::<N>(v) }

    /// Each lane shifted right by its lane of `n`.
    fn srlv(v: V, n: V) -> V { _mm512_srlv_epi32(v, n) }
    fn gt(a: V, b: V) -> M { _mm512_cmpgt_epu32_mask(a, b) }
    fn eq(a: V, b: V) -> M { _mm512_cmpeq_epi32_mask(a, b) }

    /// `yes` where `m` is set, else `no`.
    fn blend(m: M, no: V, yes: V) -> V { _mm512_mask_blend_epi32(m, no, yes) }

    /// The lanes of `a` not in `b`.
    fn but_not(a: M, b: M) -> M { a & !b }

    /// Lanes set in `m`.
    fn count(m: M) -> u64 { u64::from(m.count_ones()) }
    fn load(b: &[u8]) -> V { bytemuck::pod_read_unaligned(&b[..64]) }
    fn store(out: &mut [u8], v: V) { out[..64].copy_from_slice(bytemuck::bytes_of(&v)); }
    fn load_h(b: &[u8]) -> H { bytemuck::pod_read_unaligned(&b[..32]) }
    fn store_h(out: &mut [u8], v: H) { out[..32].copy_from_slice(bytemuck::bytes_of(&v)); }

    /// 16-bit values zero-extended into lanes.
    fn widen16(h: H) -> V { _mm512_cvtepu16_epi32(h) }

    /// Lanes below 2^16 as 16-bit values.
    fn narrow16(v: V) -> H { _mm512_cvtepi32_epi16(v) }

    /// Two vectors of lanes below 2^16 as 32 `u16`s, in order.
    fn pack(a: V, b: V) -> V {
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(narrow16(a)), narrow16(b))
    }

    /// `a`'s 16-bit values then `b`'s.
    fn join(a: H, b: H) -> V { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b) }

    /// [`LANES`] bytes in a register.
    fn bytes(b: &[u8]) -> __m128i { bytemuck::pod_read_unaligned(&b[..16]) }

    /// [`LANES`] unsigned bytes as lanes.
    fn widen8(b: &[u8; LANES]) -> V { _mm512_cvtepu8_epi32(bytes(b)) }

    /// [`LANES`] unsigned bytes as lanes.
    fn u8s(b: __m128i) -> V { _mm512_cvtepu8_epi32(b) }

    /// [`LANES`] signed bytes as lanes.
    fn i8s(b: __m128i) -> V { _mm512_cvtepi8_epi32(b) }

    /// `i32` lanes as `f32` bits.
    fn cvtf(v: V) -> V { _mm512_castps_si512(_mm512_cvtepi32_ps(v)) }

    fn mulf(a: V, b: V) -> V {
        _mm512_castps_si512(_mm512_mul_ps(
            _mm512_castsi512_ps(a),
            _mm512_castsi512_ps(b),
        ))
    }

    fn subf(a: V, b: V) -> V {
        _mm512_castps_si512(_mm512_sub_ps(
            _mm512_castsi512_ps(a),
            _mm512_castsi512_ps(b),
        ))
    }

    /// Whether a lane of `f32`s is NaN.
    fn has_nan(v: V) -> bool {
        _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(_mm512_castsi512_ps(v), _mm512_castsi512_ps(v)) != 0
    }

    /// F16C's rounding of each `f32` lane to F16 bits.
    fn cvtps_ph_h(v: V) -> H {
        _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm512_castsi512_ps(v))
    }

    /// F16C's widening of F16 bits to `f32` bits.
    fn cvtph_ps(h: H) -> V { _mm512_castps_si512(_mm512_cvtph_ps(h)) }

    /// `2 x LANES` E4M3 codes as `f32` lanes, each exactly 2^-8 times the
    /// code's value: the AVX2 kernel's `e4m3_over_256`, in 512-bit registers.
    fn e4m3_over_256(codes: &[u8; 2 * LANES]) -> (V, V) {
        let c = _mm512_cvtepu8_epi16(load_h(codes));
        let sign = _mm512_and_si512(_mm512_slli_epi16::<8>(c), _mm512_set1_epi16(i16::MIN));
        let magnitude = _mm512_and_si512(_mm512_slli_epi16::<7>(c), _mm512_set1_epi16(0x3f80));
        let h = _mm512_or_si512(sign, magnitude);
        let (low, high) = (_mm512_castsi512_si256(h), _mm512_extracti64x4_epi64::<1>(h));
        (cvtph_ps(low), cvtph_ps(high))
    }
}

/// The 16 entries of a code book, one register.
pub(super) type Book = __m512;

primitives! { "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c";
    fn book16(book: &[f32; 16]) -> Book { bytemuck::cast(*book) }

    /// `book[i]` for each lane's `i` (0 to 15): one permute.
    fn look_up(book: &Book, i: V) -> V { _mm512_castps_si512(_mm512_permutexvar_ps(i, *book)) }

    /// 16 unsigned bytes as one vector of lanes.
    fn u8_parts(b: __m128i) -> [V; 1] { [u8s(b)] }
}

lane_kernels!("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c");
book_kernels!("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c");

#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c")]
pub(super) fn f64_to_f32(input: &[u8], output: &mut [u8]) -> Done {
    let mut done = Done::default();
    let abs64 = _mm512_set1_epi64(0x7fff_ffff_ffff_ffff);
    let inf64 = _mm512_set1_epi64(0x7ff0_0000_0000_0000);
    for (i, o) in input.chunks_exact(64).zip(output.chunks_exact_mut(32)) {
        let d = load(i);
        let f = _mm256_castps_si256(_mm512_cvtpd_ps(_mm512_castsi512_pd(d)));
        store_h(o, f);
        let abs = _mm256_and_si256(f, _mm256_set1_epi32(0x7fff_ffff));
        let inf_out = _mm256_cmpeq_epi32_mask(abs, _mm256_set1_epi32(0x7f80_0000));
        let inf_in = _mm512_cmpeq_epi64_mask(_mm512_and_si512(d, abs64), inf64);
        done.overflowed += u64::from(inf_out.count_ones() - inf_in.count_ones());
        done.elems += 8;
    }
    done
}
