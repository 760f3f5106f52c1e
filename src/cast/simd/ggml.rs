//! The GGUF block kernels written once over the vector width
//! ([`ggml_kernels!`]), expanded by `ggml2` (AVX2, 8 codes at a time) and
//! `ggml512` (AVX-512, 16) over their instruction set's lane primitives
//! (see [`super::lanes`]). Each element is the reference's
//! (`dequant::ggml`) product and difference, in its order, each rounded
//! once; block scales are decoded with the reference's scalar code.

use super::super::scalar::f16_to_f32;

/// The f16 at `at`, as f32 (exact).
pub(super) fn f16_at(block: &[u8], at: usize) -> f32 {
    f32::from_bits(f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]])))
}

/// Expands the width-independent GGUF kernels with
/// `#[target_feature(enable = $feat)]`, over the lane primitives in scope.
macro_rules! ggml_kernels {
    ($feat:literal) => {
        use super::ggml::f16_at;

        /// `LANES` `f32` lanes into `out`.
        #[inline]
        #[target_feature(enable = $feat)]
        fn put(out: &mut [f32], v: V) {
            store(bytemuck::cast_slice_mut(&mut out[..LANES]), v);
        }

        /// `d * (nibble - offset)` for `LANES` bytes of nibbles: the low
        /// ones into `low`, the high ones into `high` (ggml's Q4_0 packing).
        #[inline]
        #[target_feature(enable = $feat)]
        fn nibbles_times(qs: &[u8], d: f32, offset: u32, low: &mut [f32], high: &mut [f32]) {
            let x = u8s(bytes(qs));
            let d = splatf(d);
            let lo = sub(and(x, splat(0x0f)), splat(offset));
            let hi = sub(srli::<4>(x), splat(offset));
            put(low, mulf(d, cvtf(lo)));
            put(high, mulf(d, cvtf(hi)));
        }

        /// Q4_0 (`d * (q - 8)`), block by block.
        #[target_feature(enable = $feat)]
        pub(super) fn q4_0(blocks: &[u8], out: &mut [f32]) -> bool {
            for (b, o) in blocks.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
                let (low, high) = o.split_at_mut(16);
                let d = f16_at(b, 0);
                for at in (0..16).step_by(LANES) {
                    nibbles_times(&b[2 + at..], d, 8, &mut low[at..], &mut high[at..]);
                }
            }
            true
        }

        /// Q8_0 (`q * d`), block by block.
        #[target_feature(enable = $feat)]
        pub(super) fn q8_0(blocks: &[u8], out: &mut [f32]) -> bool {
            for (b, o) in blocks.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
                let d = splatf(f16_at(b, 0));
                for (q, o) in b[2..34].chunks_exact(LANES).zip(o.chunks_exact_mut(LANES)) {
                    put(o, mulf(cvtf(i8s(bytes(q))), d));
                }
            }
            true
        }

        /// Q4_K: four runs of 64, the low then the high nibbles of 32
        /// bytes, each half its sub-block's `dl * q - ml`.
        #[target_feature(enable = $feat)]
        pub(super) fn q4_k(blocks: &[u8], out: &mut [f32], scales: super::KScales) -> bool {
            for (b, o) in blocks.chunks_exact(144).zip(out.chunks_exact_mut(256)) {
                let (dl, ml) = scales(b);
                let runs = o.chunks_exact_mut(64).zip(b[16..].chunks_exact(32));
                for (c, (run, q)) in runs.enumerate() {
                    let (lo, hi) = (2 * c, 2 * c + 1);
                    let (dlo, mlo) = (splatf(dl[lo]), splatf(ml[lo]));
                    let (dhi, mhi) = (splatf(dl[hi]), splatf(ml[hi]));
                    let (low, high) = run.split_at_mut(32);
                    for (part, q) in q.chunks_exact(LANES).enumerate() {
                        let x = u8s(bytes(q));
                        let a = cvtf(and(x, splat(0x0f)));
                        let h = cvtf(srli::<4>(x));
                        let at = LANES * part;
                        put(&mut low[at..], subf(mulf(dlo, a), mlo));
                        put(&mut high[at..], subf(mulf(dhi, h), mhi));
                    }
                }
            }
            true
        }

        /// Q5_K: Q4_K's four runs of 64, each nibble given its fifth bit
        /// from `qh` (bit `2c` of byte `l` for the low nibbles of run `c`,
        /// bit `2c + 1` for the high ones), then its sub-block's
        /// `dl * q - ml`.
        #[target_feature(enable = $feat)]
        pub(super) fn q5_k(blocks: &[u8], out: &mut [f32], scales: super::KScales) -> bool {
            for (b, o) in blocks.chunks_exact(176).zip(out.chunks_exact_mut(256)) {
                let (dl, ml) = scales(b);
                let (qh, qs) = (&b[16..48], &b[48..176]);
                for (c, (run, q)) in o.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
                    let (lo, hi) = (2 * c, 2 * c + 1);
                    let (dlo, mlo) = (splatf(dl[lo]), splatf(ml[lo]));
                    let (dhi, mhi) = (splatf(dl[hi]), splatf(ml[hi]));
                    // The fifth bits of this run, shifted to bit 4.
                    let fifth =
                        |h: V, bit: usize| slli::<4>(and(srlv(h, splat(bit as u32)), splat(1)));
                    let (low, high) = run.split_at_mut(32);
                    let parts = q.chunks_exact(LANES).zip(qh.chunks_exact(LANES));
                    for (part, (q, h)) in parts.enumerate() {
                        let x = u8s(bytes(q));
                        let h = u8s(bytes(h));
                        let a = cvtf(or(and(x, splat(0x0f)), fifth(h, lo)));
                        let g = cvtf(or(srli::<4>(x), fifth(h, hi)));
                        let at = LANES * part;
                        put(&mut low[at..], subf(mulf(dlo, a), mlo));
                        put(&mut high[at..], subf(mulf(dhi, g), mhi));
                    }
                }
            }
            true
        }

        /// Q6_K: two halves of 128, each from 64 bytes of low nibbles and
        /// 32 of high bit pairs, four runs of 32; element `e` of a half is
        /// `dl[e / 16] * (code - 32)`.
        #[target_feature(enable = $feat)]
        pub(super) fn q6_k(blocks: &[u8], out: &mut [f32]) -> bool {
            for (b, o) in blocks.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
                let d = f16_at(b, 208);
                let dl: [f32; 16] = std::array::from_fn(|i| d * (b[192 + i] as i8) as f32);
                for (h, half) in o.chunks_exact_mut(128).enumerate() {
                    let (ql, qh) = (&b[64 * h..64 * h + 64], &b[128 + 32 * h..128 + 32 * h + 32]);
                    for at in (0..32).step_by(LANES) {
                        let side = at / 16;
                        let a = u8s(bytes(&ql[at..]));
                        let c = u8s(bytes(&ql[32 + at..]));
                        let hb = u8s(bytes(&qh[at..]));
                        let two = |v: V| slli::<4>(and(v, splat(3)));
                        let codes = [
                            or(and(a, splat(0x0f)), two(hb)),
                            or(and(c, splat(0x0f)), two(srli::<2>(hb))),
                            or(srli::<4>(a), two(srli::<4>(hb))),
                            or(srli::<4>(c), two(srli::<6>(hb))),
                        ];
                        for (r, code) in codes.into_iter().enumerate() {
                            let scale = splatf(dl[8 * h + 2 * r + side]);
                            let q = cvtf(sub(code, splat(32)));
                            put(&mut half[32 * r + at..], mulf(scale, q));
                        }
                    }
                }
            }
            true
        }
    };
}
