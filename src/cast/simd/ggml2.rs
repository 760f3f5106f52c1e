//! The GGUF block kernels on AVX2: 8 codes at a time, the
//! [`ggml_kernels!`](super::ggml) bodies over the AVX2 lane primitives,
//! and IQ4_XS (its table lookup is AVX2's `vpshufb` on 16 bytes).

use std::arch::x86_64::*;

use super::avx2::*;

ggml_kernels!("avx2,f16c");

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
            let dl = splatf(d * ((l | (h << 4)) as i32 - 32) as f32);
            let x: __m128i = bytemuck::pod_read_unaligned(&q[..16]);
            let nib = _mm_set1_epi8(0x0f);
            let lo = _mm_shuffle_epi8(table, _mm_and_si128(x, nib));
            let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16::<4>(x), nib));
            for (at, v) in [(0, lo), (8, _mm_srli_si128::<8>(lo))] {
                put(&mut sub[at..], mulf(dl, cvtf(i8s(v))));
            }
            for (at, v) in [(16, hi), (24, _mm_srli_si128::<8>(hi))] {
                put(&mut sub[at..], mulf(dl, cvtf(i8s(v))));
            }
        }
    }
    true
}
