//! The code-book kernels written once over the vector width
//! ([`book_kernels!`], expanded in `avx2` and `avx512`): bitsandbytes
//! NF4/FP4, whole absmax blocks at a time, each value looked up in the
//! 16-entry book (two 8-lane permutes and a select on AVX2, one 16-lane
//! permute on AVX-512), times the block's absmax, rounded as the
//! library's dtype stores it (`dequant::bnb::four_bit`), then stored as
//! the output dtype from the register it was made in, as `store_f32`
//! would store it. Lookups are exact, so only the arithmetic around them
//! needs care, and it is the reference's.
//!
//! Beyond [`super::lanes`]' primitives, an expansion needs `Book` (the 16
//! entries as the path looks them up), `book16`, `look_up(&Book, V)` and
//! `u8_parts` (16 bytes as `16 / LANES` vectors of lanes, in order).

/// Expands the code-book kernels with `#[target_feature(enable = $feat)]`.
macro_rules! book_kernels {
    ($feat:literal) => {
        /// The 16 codes of 8 bytes in element order (each byte's high
        /// nibble first, as bitsandbytes packs them), a code a byte.
        #[inline]
        #[target_feature(enable = $feat)]
        fn nibbles_high_first(b: &[u8]) -> __m128i {
            let x = _mm_cvtsi64_si128(bytemuck::pod_read_unaligned::<i64>(&b[..8]));
            let low = _mm_and_si128(x, _mm_set1_epi8(0x0f));
            let high = _mm_and_si128(_mm_srli_epi16::<4>(x), _mm_set1_epi8(0x0f));
            _mm_unpacklo_epi8(high, low)
        }

        /// Whole blocks of `blocksize` elements (a multiple of 16) from
        /// `packed`'s first byte, block `j` times `absmax[j]`: `book[q] *
        /// absmax` rounded as `R` says (0 F32, 1 BF16, 2 F16), stored as
        /// `O` says. Returns the elements done.
        #[inline]
        #[target_feature(enable = $feat)]
        fn four_bit_blocks<const R: u8, const O: u8>(
            book: &[f32; 16],
            packed: &[u8],
            absmax: &[f32],
            blocksize: usize,
            out: &mut [u8],
        ) -> usize {
            let width = if O == 0 { 4 } else { 2 };
            let book = book16(book);
            let mut done = 0;
            let blocks = packed
                .chunks_exact(blocksize / 2)
                .zip(out.chunks_exact_mut(blocksize * width))
                .zip(absmax);
            for ((p, o), &a) in blocks {
                // A finite absmax makes no NaN (the books hold none): the
                // lanes skip the NaN patches.
                match a.is_finite() {
                    true => four_bit_block::<R, O, true>(&book, p, splatf(a), o),
                    false => four_bit_block::<R, O, false>(&book, p, splatf(a), o),
                }
                done += blocksize;
            }
            done
        }

        /// One block of [`four_bit_blocks`], its products known not to be
        /// NaN if `CLEAN`.
        #[inline]
        #[target_feature(enable = $feat)]
        fn four_bit_block<const R: u8, const O: u8, const CLEAN: bool>(
            book: &Book,
            packed: &[u8],
            scale: V,
            out: &mut [u8],
        ) {
            let width = if O == 0 { 4 } else { 2 };
            // 32 codes at a time, two vectors a store; then 16.
            let mut p32 = packed.chunks_exact(16);
            let mut o32 = out.chunks_exact_mut(32 * width);
            for (b, o) in (&mut p32).zip(&mut o32) {
                let low = u8_parts(nibbles_high_first(b));
                let high = u8_parts(nibbles_high_first(&b[8..]));
                let mut v = [splat(0); 32 / LANES];
                for (v, q) in v.iter_mut().zip(low.into_iter().chain(high)) {
                    *v = rounded::<R, CLEAN>(mulf(look_up(book, q), scale));
                }
                for (j, pair) in v.chunks_exact(2).enumerate() {
                    put_rounded2::<R, O, CLEAN>(pair[0], pair[1], &mut o[j * 2 * LANES * width..]);
                }
            }
            let rest = p32.remainder().chunks_exact(8);
            for (b, o) in rest.zip(o32.into_remainder().chunks_exact_mut(16 * width)) {
                let codes = u8_parts(nibbles_high_first(b));
                for (j, q) in codes.into_iter().enumerate() {
                    let v = rounded::<R, CLEAN>(mulf(look_up(book, q), scale));
                    put_rounded::<R, O, CLEAN>(v, &mut o[j * LANES * width..]);
                }
            }
        }

        /// bitsandbytes 4-bit, whole blocks of `blocksize` elements from
        /// `packed`'s first byte (high nibble first), block `j` scaled by
        /// `absmax[j]`: each value rounded as `dtype` stores it, stored as
        /// `to` into `out`. Returns the elements done (0 unless
        /// `blocksize` is a multiple of 16).
        #[target_feature(enable = $feat)]
        pub(super) fn four_bit_as(
            book: &[f32; 16],
            packed: &[u8],
            absmax: &[f32],
            blocksize: usize,
            dtype: Dtype,
            to: Dtype,
            out: &mut [u8],
        ) -> usize {
            if blocksize == 0 || blocksize % 16 != 0 {
                return 0;
            }
            by_dtypes!(
                dtype,
                to,
                four_bit_blocks(book, packed, absmax, blocksize, out),
                0
            )
        }
    };
}
