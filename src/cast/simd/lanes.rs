//! The cast and FP8 kernels written once over the vector width: each
//! instruction-set file (`avx2`, `avx512`) defines the same small set of
//! lane primitives over its own types and expands [`lane_kernels!`] once.
//!
//! The primitives an expansion needs in scope (`LANES` 32-bit lanes):
//!
//! - types `V` (a vector of `LANES` 32-bit lanes), `M` (a lane mask: a
//!   compare's all-ones lanes on AVX2, a mask register on AVX-512) and
//!   `H` (`LANES` 16-bit values), and the constant `LANES`;
//! - `splat`, `and`, `or`, `add`, `srli::<N>`, `slli::<N>`, `gt`, `eq`
//!   (unsigned compares, whose operands here are all below 2^31, where
//!   signed and unsigned agree), `blend(m, no, yes)`, `but_not(a, b)`
//!   (lanes of `a` not in `b`), `count`;
//! - `load(&[u8]) -> V`, `store(&mut [u8], V)`, `load_h`, `store_h`
//!   (`LANES * 2` bytes), `widen16(H) -> V` (zero-extended),
//!   `narrow16(V) -> H` (lanes below 2^16), `join(H, H) -> V`, `pack(a, b) -> V` (the
//!   `2 * LANES` low halves of `a` then `b`, in order), `bytes(&[u8; LANES])`
//!   and `widen8` (codes to lanes, zero-extended);
//! - `mulf`, `cvtf` (i32 to f32), `splatf`, `has_nan`, `cvtps_ph_h` (F16C's
//!   rounding of each lane to `H`), `cvtph_ps` (F16C's widening) and
//!   `e4m3_over_256` (`2 * LANES` E4M3 codes as F16 bits, 2^-8 x each value,
//!   widened to two `V`s of f32).
//!
//! Every body is the same arithmetic at either width, so the bits are the
//! same; only the number of lanes and how a select is made differ.

/// Declares each function `pub(super)`, inlined and compiled with
/// `#[target_feature(enable = $feat)]`: the primitives, most of them one
/// line, which the two attributes would otherwise outweigh.
macro_rules! primitives {
    ($feat:literal; $($(#[$doc:meta])* fn $name:ident $(<const $c:ident: $ct:ty>)?
        ($($arg:ident: $ty:ty),*) $(-> $ret:ty)? $body:block)*) => {$(
        $(#[$doc])*
        #[inline]
        #[target_feature(enable = $feat)]
        pub(super) fn $name $(<const $c: $ct>)? ($($arg: $ty),*) $(-> $ret)? $body
    )*};
}

/// Expands the width-independent kernels with `#[target_feature(enable =
/// $feat)]`, over the primitives in scope.
macro_rules! lane_kernels {
    ($feat:literal) => {
        /// F16C's rounding of each `f32` lane to F16 bits, zero-extended.
        #[inline]
        #[target_feature(enable = $feat)]
        fn cvtps_ph(v: V) -> V {
            widen16(cvtps_ph_h(v))
        }

        /// [`f32_to_bf16`](crate::cast::scalar::f32_to_bf16) of each lane
        /// (in its low 16 bits), and the lanes that overflowed to infinity.
        #[inline]
        #[target_feature(enable = $feat)]
        pub(super) fn bf16_lanes(x: V) -> (V, M) {
            let abs = and(x, splat(0x7fff_ffff));
            let nan = gt(abs, splat(0x7f80_0000));
            let odd = and(srli::<16>(x), splat(1));
            let bias = add(splat(0x7fff), odd);
            let rounded = srli::<16>(add(x, bias));
            let sign = srli::<16>(and(x, splat(0x8000_0000)));
            let quiet = or(sign, splat(0x7fc0));
            let h = blend(nan, rounded, quiet);
            let inf_out = eq(and(h, splat(0x7fff)), splat(0x7f80));
            let inf_in = eq(abs, splat(0x7f80_0000));
            (h, but_not(inf_out, inf_in))
        }

        /// [`f32_to_f16`](crate::cast::scalar::f32_to_f16) of each lane:
        /// F16C rounds every number to nearest even exactly as the
        /// reference does; NaN lanes (which F16C quiets) are rebuilt as
        /// numpy does, keeping the payload's top bits.
        #[inline]
        #[target_feature(enable = $feat)]
        pub(super) fn f16_lanes(x: V) -> (V, M) {
            let abs = and(x, splat(0x7fff_ffff));
            let hw = cvtps_ph(x);
            let nan = gt(abs, splat(0x7f80_0000));
            let payload = and(srli::<13>(abs), splat(0x3ff));
            let empty = blend(eq(payload, splat(0)), splat(0), splat(1));
            let sign = srli::<16>(and(x, splat(0x8000_0000)));
            let nan_bits = or(or(sign, splat(0x7c00)), or(payload, empty));
            let h = blend(nan, hw, nan_bits);
            let inf_out = eq(and(h, splat(0x7fff)), splat(0x7c00));
            let inf_in = eq(abs, splat(0x7f80_0000));
            (h, but_not(inf_out, inf_in))
        }

        /// F16 bits to F32 bits: F16C is exact for every number; NaN lanes
        /// (which F16C quiets) keep their payload, as numpy does.
        #[inline]
        #[target_feature(enable = $feat)]
        fn f16_widen(h: H) -> V {
            let hw = cvtph_ps(h);
            let x = widen16(h);
            let a = and(x, splat(0x7fff));
            let nan = gt(a, splat(0x7c00));
            let sign = slli::<16>(and(x, splat(0x8000)));
            let special = or(or(sign, slli::<13>(a)), splat(0x7f80_0000));
            blend(nan, hw, special)
        }

        #[target_feature(enable = $feat)]
        pub(super) fn f32_to_bf16(input: &[u8], output: &mut [u8]) -> Done {
            narrow_f32::<false>(input, output)
        }

        #[target_feature(enable = $feat)]
        pub(super) fn f32_to_f16(input: &[u8], output: &mut [u8]) -> Done {
            narrow_f32::<true>(input, output)
        }

        /// `2 * LANES` F32s at a time to F16s (`F16`) or BF16s.
        #[inline]
        #[target_feature(enable = $feat)]
        fn narrow_f32<const F16: bool>(input: &[u8], output: &mut [u8]) -> Done {
            let lanes = |x| if F16 { f16_lanes(x) } else { bf16_lanes(x) };
            let mut done = Done::default();
            for (i, o) in input
                .chunks_exact(8 * LANES)
                .zip(output.chunks_exact_mut(4 * LANES))
            {
                let (a, over_a) = lanes(load(i));
                let (b, over_b) = lanes(load(&i[4 * LANES..]));
                store(o, pack(a, b));
                done.overflowed += count(over_a) + count(over_b);
                done.elems += 2 * LANES;
            }
            done
        }

        #[target_feature(enable = $feat)]
        pub(super) fn bf16_to_f32(input: &[u8], output: &mut [u8]) -> Done {
            let mut done = Done::default();
            for (i, o) in input
                .chunks_exact(2 * LANES)
                .zip(output.chunks_exact_mut(4 * LANES))
            {
                store(o, slli::<16>(widen16(load_h(i))));
                done.elems += LANES;
            }
            done
        }

        #[target_feature(enable = $feat)]
        pub(super) fn f16_to_f32(input: &[u8], output: &mut [u8]) -> Done {
            let mut done = Done::default();
            for (i, o) in input
                .chunks_exact(2 * LANES)
                .zip(output.chunks_exact_mut(4 * LANES))
            {
                store(o, f16_widen(load_h(i)));
                done.elems += LANES;
            }
            done
        }

        /// [`bf16_to_f16`](crate::cast::scalar::bf16_to_f16): the BF16 is
        /// an exact F32, rounded by F16C; NaN lanes become a quiet NaN of
        /// their sign.
        #[inline]
        #[target_feature(enable = $feat)]
        fn bf16_f16_lanes(h: H) -> (V, M) {
            let x = widen16(h);
            let hw = cvtps_ph(slli::<16>(x));
            let a = and(x, splat(0x7fff));
            let nan = gt(a, splat(0x7f80));
            let quiet = or(and(x, splat(0x8000)), splat(0x7e00));
            let out = blend(nan, hw, quiet);
            let inf_out = eq(and(out, splat(0x7fff)), splat(0x7c00));
            let inf_in = eq(a, splat(0x7f80));
            (out, but_not(inf_out, inf_in))
        }

        #[target_feature(enable = $feat)]
        pub(super) fn bf16_to_f16(input: &[u8], output: &mut [u8]) -> Done {
            let mut done = Done::default();
            for (i, o) in input
                .chunks_exact(4 * LANES)
                .zip(output.chunks_exact_mut(4 * LANES))
            {
                let (a, over_a) = bf16_f16_lanes(load_h(i));
                let (b, over_b) = bf16_f16_lanes(load_h(&i[2 * LANES..]));
                store(o, pack(a, b));
                done.overflowed += count(over_a) + count(over_b);
                done.elems += 2 * LANES;
            }
            done
        }

        /// F16 to F32 (exact: F16C, whose quieting of NaNs the BF16
        /// rounding's squash makes moot), then to BF16.
        #[target_feature(enable = $feat)]
        pub(super) fn f16_to_bf16(input: &[u8], output: &mut [u8]) -> Done {
            let mut done = Done::default();
            for (i, o) in input
                .chunks_exact(4 * LANES)
                .zip(output.chunks_exact_mut(4 * LANES))
            {
                let (a, _) = bf16_lanes(cvtph_ps(load_h(i)));
                let (b, _) = bf16_lanes(cvtph_ps(load_h(&i[2 * LANES..])));
                store(o, pack(a, b));
                done.elems += 2 * LANES;
            }
            done
        }

        /// E4M3 codes to their F32 values, as the reference's table has
        /// them: `S.EEEE.MMM` is `2^(E-7) * 1.MMM` (the bits moved into
        /// place and rebiased), `E = 0` is `MMM * 2^-9` (exact in F32);
        /// `S.1111.111` (NaN) some number, and the NaN lanes.
        #[inline]
        #[target_feature(enable = $feat)]
        fn e4m3_lanes(codes: &[u8; LANES]) -> (V, M) {
            let c = widen8(codes);
            let m = and(c, splat(0x7f));
            let normal = add(slli::<20>(m), splat(120 << 23));
            let small = mulf(cvtf(m), splatf(1.0 / 512.0));
            let subnormal = gt(splat(8), m);
            let magnitude = blend(subnormal, normal, small);
            let sign = slli::<24>(and(c, splat(0x80)));
            (or(magnitude, sign), eq(m, splat(0x7f)))
        }

        /// [`f32_to_bf16`](crate::cast::scalar::f32_to_bf16) of lanes known
        /// not to be NaN: the rounding alone.
        #[inline]
        #[target_feature(enable = $feat)]
        fn bf16_not_nan(x: V) -> V {
            let odd = and(srli::<16>(x), splat(1));
            srli::<16>(add(x, add(odd, splat(0x7fff))))
        }

        /// `f32` lanes as a tensor of the scales' dtype (`ROUND`: 0 F32,
        /// 1 BF16, 2 F16) stores them: rounded to it and widened back.
        #[allow(dead_code)] // on AVX-512: the AVX2-only kernels (quant2, pack4) take them
        #[inline]
        #[target_feature(enable = $feat)]
        pub(super) fn stored_as<const ROUND: u8>(v: V) -> V {
            rounded::<ROUND, false>(v)
        }

        /// [`stored_as`], of lanes known not to be NaN if `CLEAN`.
        #[inline]
        #[target_feature(enable = $feat)]
        pub(super) fn rounded<const ROUND: u8, const CLEAN: bool>(v: V) -> V {
            match ROUND {
                1 if CLEAN => slli::<16>(bf16_not_nan(v)),
                1 => slli::<16>(bf16_lanes(v).0),
                2 => match CLEAN || !has_nan(v) {
                    // No NaN: F16C rounds every number to nearest even and
                    // widens it back exactly, as `f16_lanes` and
                    // `f16_widen` do.
                    true => cvtph_ps(cvtps_ph_h(v)),
                    false => f16_widen(narrow16(f16_lanes(v).0)),
                },
                _ => v,
            }
        }

        /// `LANES` codes times `scale`, rounded as `ROUND` says, as `f32`
        /// bits.
        #[inline]
        #[target_feature(enable = $feat)]
        fn e4m3_times<const ROUND: u8, const CLEAN: bool>(codes: &[u8; LANES], scale: V) -> V {
            let (value, nan) = e4m3_lanes(codes);
            let product = mulf(value, scale);
            if CLEAN {
                return rounded::<ROUND, true>(product);
            }
            // A NaN code's product is the code's NaN (the positive quiet
            // one), whatever the scale, as the reference
            // (`arith::e4m3_times`) has it: no NaN of two operands is left
            // to the order the compiler gives a product's operands.
            rounded::<ROUND, false>(blend(nan, product, splat(0x7fc0_0000)))
        }

        /// `v` (rounded as `R` says: 0 F32, 1 BF16, 2 F16; a NaN lane a
        /// quiet one, as products are; none if `CLEAN`) stored as `O` says
        /// into `out`'s first `LANES` elements, as `store_f32` stores it: a
        /// value already of the output's dtype is its bits; without NaN,
        /// F16C's rounding, or BF16's without the NaN lanes' patch.
        #[inline]
        #[target_feature(enable = $feat)]
        pub(super) fn put_rounded<const R: u8, const O: u8, const CLEAN: bool>(
            v: V,
            out: &mut [u8],
        ) {
            match O {
                0 => store(out, v),
                // F16C narrows an F16 value back exactly, a quiet NaN
                // keeping its payload as `f16_lanes` does.
                2 if R == 2 || CLEAN => store_h(out, cvtps_ph_h(v)),
                _ => store_h(out, narrow16(half_lanes::<R, O, CLEAN>(v))),
            }
        }

        /// [`put_rounded`] of `a` then `b` (`2 * LANES` elements), the
        /// 16-bit values packed into one store.
        #[inline]
        #[target_feature(enable = $feat)]
        pub(super) fn put_rounded2<const R: u8, const O: u8, const CLEAN: bool>(
            a: V,
            b: V,
            out: &mut [u8],
        ) {
            match O {
                0 => {
                    store(out, a);
                    store(&mut out[4 * LANES..], b);
                }
                2 if R == 2 || CLEAN => store(out, join(cvtps_ph_h(a), cvtps_ph_h(b))),
                _ => store(
                    out,
                    pack(half_lanes::<R, O, CLEAN>(a), half_lanes::<R, O, CLEAN>(b)),
                ),
            }
        }

        /// [`put_rounded`]'s 16-bit values (`O` 1 or 2), in the lanes' low
        /// halves (the high ones zero).
        #[inline]
        #[target_feature(enable = $feat)]
        pub(super) fn half_lanes<const R: u8, const O: u8, const CLEAN: bool>(v: V) -> V {
            match O {
                1 if R == 1 => srli::<16>(v),
                1 if CLEAN => bf16_not_nan(v),
                1 => bf16_lanes(v).0,
                _ if R == 2 || CLEAN => cvtps_ph(v),
                _ => f16_lanes(v).0,
            }
        }

        /// `LANES` codes times `scale`, rounded as `ROUND` says, then
        /// stored as `OUT` (0 F32, 1 BF16, 2 F16) stores them into `out`
        /// (`LANES` elements or fewer).
        #[inline]
        #[target_feature(enable = $feat)]
        fn e4m3_put<const ROUND: u8, const OUT: u8, const CLEAN: bool>(
            codes: &[u8; LANES],
            scale: V,
            out: &mut [u8],
        ) {
            let v = e4m3_times::<ROUND, CLEAN>(codes, scale);
            if out.len() == LANES * if OUT == 0 { 4 } else { 2 } {
                put_rounded::<ROUND, OUT, CLEAN>(v, out);
            } else {
                let mut whole = [0u8; 4 * LANES];
                put_rounded::<ROUND, OUT, CLEAN>(v, &mut whole);
                let n = out.len();
                out.copy_from_slice(&whole[..n]);
            }
        }

        /// One weight row of E4M3 codes in blocks of `block` columns, block
        /// `j` times `scales[j]`, stored as `OUT` says straight into bytes:
        /// each `f32` product (rounded as the scales' dtype, `ROUND`) goes
        /// from the register it was made in to its one cast, as the
        /// reference's `rows` then `store_f32` round it. Whole runs of
        /// `LANES` as fixed-size loads and stores; only a block shorter than
        /// `LANES` padded.
        #[inline]
        #[target_feature(enable = $feat)]
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
                // No NaN code and a finite scale: no product is NaN (an
                // infinity needs a code of 0 to make one), so the lanes
                // skip the NaN patches. Real weights have no NaN codes.
                // The scale times 2^8 finite too: clean blocks decode their
                // codes as F16 bits, 2^-8 times their values (see
                // `e4m3_over_256`), and take the scale 2^8 times larger.
                // (Folded as bytes: a fold of `bool`s is widened to 32-bit
                // lanes.)
                let nan_code = codes
                    .iter()
                    .fold(0u8, |a, &c| a | u8::from(c | 0x80 == 0xff))
                    != 0;
                let scaled = scale * 256.0;
                let (s, s256) = (splatf(scale), splatf(scaled));
                match scaled.is_finite() && !nan_code {
                    true => e4m3_block::<ROUND, OUT, true>(codes, s, s256, out),
                    false => e4m3_block::<ROUND, OUT, false>(codes, s, s256, out),
                }
            }
        }

        /// One block of [`e4m3_blocks_as`]: whole runs of `LANES`, then the
        /// block's last `LANES` codes again (a block shorter than that padded).
        #[inline]
        #[target_feature(enable = $feat)]
        fn e4m3_block<const ROUND: u8, const OUT: u8, const CLEAN: bool>(
            codes: &[u8],
            scale: V,
            scale_256: V,
            out: &mut [u8],
        ) {
            let width = if OUT == 0 { 4 } else { 2 };
            // Two vectors a store, then one, then the last few codes.
            let mut c2 = codes.chunks_exact(2 * LANES);
            let mut o2 = out.chunks_exact_mut(2 * LANES * width);
            for (c, o) in (&mut c2).zip(&mut o2) {
                let (a, b) = match CLEAN {
                    // Decoded two vectors at once in 16-bit lanes: the
                    // same products (2^-8 x code times 2^8 x scale is the
                    // one real number, rounded once), a third of the work.
                    true => {
                        let (a, b) = e4m3_over_256(c.try_into().expect("2 x LANES codes"));
                        (
                            rounded::<ROUND, true>(mulf(a, scale_256)),
                            rounded::<ROUND, true>(mulf(b, scale_256)),
                        )
                    }
                    false => {
                        let (a, b) = c.split_at(LANES);
                        (
                            e4m3_times::<ROUND, CLEAN>(a.try_into().expect("LANES codes"), scale),
                            e4m3_times::<ROUND, CLEAN>(b.try_into().expect("LANES codes"), scale),
                        )
                    }
                };
                put_rounded2::<ROUND, OUT, CLEAN>(a, b, o);
            }
            let mut c = c2.remainder().chunks_exact(LANES);
            let mut o = o2.into_remainder().chunks_exact_mut(LANES * width);
            for (c, o) in (&mut c).zip(&mut o) {
                let c: &[u8; LANES] = c.try_into().expect("chunks_exact gives LANES");
                e4m3_put::<ROUND, OUT, CLEAN>(c, scale, o);
            }
            let (c, n) = (c.remainder(), codes.len());
            if c.is_empty() {
                return;
            }
            // A block of a vector or more ends with its last vector of
            // codes, over some just made: those are made again, the same
            // bytes (one block, one scale), and no padding is copied in or
            // out (a row of 341 columns has a tail of 5 in every row).
            if n >= LANES {
                let last: &[u8; LANES] = codes[n - LANES..].try_into().expect("LANES codes");
                e4m3_put::<ROUND, OUT, CLEAN>(last, scale, &mut out[(n - LANES) * width..]);
                return;
            }
            let mut padded = [0u8; LANES];
            padded[..c.len()].copy_from_slice(c);
            e4m3_put::<ROUND, OUT, CLEAN>(&padded, scale, o.into_remainder());
        }

        #[target_feature(enable = $feat)]
        pub(super) fn e4m3_row_as(
            codes: &[u8],
            scales: &[f32],
            block: usize,
            dtype: Dtype,
            to: Dtype,
            out: &mut [u8],
        ) -> bool {
            by_dtypes!(
                dtype,
                to,
                e4m3_blocks_as(codes, scales, block, out),
                return false
            );
            true
        }

        /// [`e4m3_row_as`] into `f32`s: the reference's `rows` for one row.
        #[target_feature(enable = $feat)]
        pub(super) fn e4m3_row(
            codes: &[u8],
            scales: &[f32],
            block: usize,
            dtype: Dtype,
            out: &mut [f32],
        ) -> bool {
            e4m3_row_as(
                codes,
                scales,
                block,
                dtype,
                Dtype::F32,
                bytemuck::cast_slice_mut(out),
            )
        }
    };
}
