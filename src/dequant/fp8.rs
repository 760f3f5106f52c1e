//! FP8 (E4M3) weights with block, group, channel or tensor scales:
//! DeepSeek-V3's `weight_scale_inv` (`weight_dequant`: the code widened to
//! f32, times the f32 scale of its 128x128 block) and compressed-tensors'
//! `weight_scale` (the code widened to the scale's dtype, times the scale,
//! in that dtype).

use crate::Dtype;

/// How the scales tile the weight: each scale covers `rows` x `cols` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tiling {
    /// Weight rows per scale row.
    pub rows: u64,
    /// Weight columns per scale column.
    pub cols: u64,
}

/// The scales one piece of rows needs.
#[derive(Clone, Copy)]
pub(crate) struct Scales<'a> {
    /// Scale rows from `r0 / tiling.rows` on, `cols` each.
    pub values: &'a [f32],
    /// Values per scale row.
    pub cols: usize,
    /// How they tile the weight.
    pub tiling: Tiling,
    /// Their dtype: each product is rounded as it stores it.
    pub dtype: Dtype,
}

/// Dequantizes weight rows `[r0, r0 + codes.len() / cols)` of a weight of
/// `cols` columns: a row at a time on the vector path of this thread, if
/// there is one (bit-identical), else as below, the reference.
pub(crate) fn rows(codes: &[u8], cols: usize, r0: u64, s: &Scales, out: &mut [f32]) {
    let (tiling, scales, scale_cols) = (s.tiling, s.values, s.cols);
    let first_scale_row = r0 / tiling.rows;
    let cb = tiling.cols as usize;
    for (i, (row, out_row)) in codes
        .chunks_exact(cols)
        .zip(out.chunks_exact_mut(cols))
        .enumerate()
    {
        let sr = ((r0 + i as u64) / tiling.rows - first_scale_row) as usize;
        let srow = &scales[sr * scale_cols..(sr + 1) * scale_cols];
        if crate::cast::simd::e4m3_row(row, srow, cb, s.dtype, out_row) {
            continue;
        }
        // A block of columns at a time: one scale each, no division per code.
        let blocks = row.chunks(cb).zip(out_row.chunks_mut(cb)).zip(srow);
        for ((codes, outs), &scale) in blocks {
            for (&code, o) in codes.iter().zip(outs) {
                let v = super::arith::e4m3_times(code, scale);
                *o = super::arith::stored_as(s.dtype, v);
            }
        }
    }
}

/// Values a step of [`rows_into`] holds as `f32`: 32 KiB, in the core's
/// fastest cache between the product and the store.
const STEP: usize = 8192;

/// [`rows`], stored as `to` (F32, F16 or BF16) straight into `out`, a few
/// rows at a time through `scratch`, so that the `f32`s never leave the
/// cache: the same bytes as [`rows`] then [`super::store_f32`] of it all.
pub(crate) fn rows_into(
    codes: &[u8],
    cols: usize,
    r0: u64,
    s: &Scales,
    to: Dtype,
    scratch: &mut Vec<f32>,
    out: &mut [u8],
) {
    let width = (to.bits() / 8) as usize;
    if rows_as(codes, cols, r0, s, to, &mut out[..codes.len() * width]) {
        return;
    }
    let per = (STEP / cols.max(1)).max(1);
    let first_scale_row = r0 / s.tiling.rows;
    let pieces = codes
        .chunks(per * cols)
        .zip(out.chunks_mut(per * cols * width));
    for (k, (codes, out)) in pieces.enumerate() {
        let r = r0 + (k * per) as u64;
        // Scale rows from the step's own first row on (a single per-tensor
        // scale covers every row: its row is always 0).
        let skip = (r / s.tiling.rows - first_scale_row) as usize * s.cols;
        let step = Scales {
            values: &s.values[skip.min(s.values.len())..],
            ..*s
        };
        scratch.clear();
        scratch.resize(codes.len(), 0.0);
        rows(codes, cols, r, &step, scratch);
        super::store_f32(scratch, to, out);
    }
}

/// [`rows_into`] on the vector path of this thread, a row at a time, each
/// product cast to `to` from the register it was made in: false (nothing
/// written) where there is none.
fn rows_as(codes: &[u8], cols: usize, r0: u64, s: &Scales, to: Dtype, out: &mut [u8]) -> bool {
    let width = (to.bits() / 8) as usize;
    let first_scale_row = r0 / s.tiling.rows;
    let cb = s.tiling.cols as usize;
    let rows = codes
        .chunks_exact(cols.max(1))
        .zip(out.chunks_exact_mut(cols.max(1) * width));
    for (i, (row, out_row)) in rows.enumerate() {
        let sr = ((r0 + i as u64) / s.tiling.rows - first_scale_row) as usize;
        let srow = &s.values[sr * s.cols..(sr + 1) * s.cols];
        // The path is the thread's: the first row decides for every row.
        if !crate::cast::simd::e4m3_row_as(row, srow, cb, s.dtype, to, out_row) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scales of one row of `blocks` blocks of `block` columns each.
    fn one_row(values: &[f32], blocks: usize, block: usize, dtype: Dtype) -> Scales<'_> {
        let tiling = Tiling {
            rows: 1,
            cols: block as u64,
        };
        Scales {
            values,
            cols: blocks,
            tiling,
            dtype,
        }
    }

    /// `n` scales taken in turn from the bit patterns `all`, from its `first`.
    fn scales_in_turn(all: &[u32], first: usize, n: usize) -> Vec<f32> {
        (0..n)
            .map(|j| f32::from_bits(all[(first + j) % all.len()]))
            .collect()
    }

    /// Each scale dtype with each output dtype.
    fn dtype_pairs() -> impl Iterator<Item = (Dtype, Dtype)> {
        const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::BF16, Dtype::F16];
        DTYPES.into_iter().flat_map(|d| DTYPES.map(|t| (d, t)))
    }

    /// Asserts that `rows_into` writes `want` on every path this machine has.
    fn rows_into_on_every_path(
        codes: &[u8],
        cols: usize,
        s: &Scales,
        to: Dtype,
        want: &[u8],
        what: &str,
    ) {
        use crate::cast::simd::{with_isa, Isa};
        for isa in Isa::available() {
            let mut got = vec![0u8; want.len()];
            with_isa(isa, || {
                rows_into(codes, cols, 0, s, to, &mut Vec::new(), &mut got)
            });
            assert!(got == want, "{isa:?} {what}");
        }
    }

    #[test]
    fn each_code_takes_its_blocks_scale() {
        // 3 rows x 4 columns, blocks of 2x2: scales [[1, 2], [4, 8]].
        let codes = [0x38u8; 12];
        let scales = [1.0f32, 2.0, 4.0, 8.0];
        let mut out = [0f32; 12];
        let tiling = Tiling { rows: 2, cols: 2 };
        let s = |values| Scales {
            values,
            cols: 2,
            tiling,
            dtype: Dtype::F32,
        };
        rows(&codes, 4, 0, &s(&scales), &mut out);
        assert_eq!(out, [1., 1., 2., 2., 1., 1., 2., 2., 4., 4., 8., 8.]);
        // From row 2 on, only the second scale row is needed.
        let mut out = [0f32; 4];
        rows(&codes[8..], 4, 2, &s(&scales[2..]), &mut out);
        assert_eq!(out, [4., 4., 8., 8.]);
    }

    /// Scales that reach every corner of the product: zeros of both signs,
    /// subnormals, ones, values whose products round to the scales' dtype,
    /// overflow to infinity, infinities and NaNs (quiet, signalling, signed).
    const SCALES: [u32; 16] = [
        0x0000_0000,
        0x8000_0000,
        0x0000_0001,
        0x8040_0000,
        0x3f80_0000,
        0xbf80_0000,
        0x3f80_0001,
        0x3fab_cdef,
        0x1234_5678,
        0x7f7f_ffff,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0xffc0_0001,
        0x7f80_0001,
        0x4b80_0000,
    ];

    /// Every code in every position of a row, under every scale, for the
    /// three scale dtypes and blocks that leave tails: the vector paths
    /// against the reference, bit for bit.
    #[test]
    fn every_code_under_every_scale_on_every_path() {
        use crate::cast::simd::{with_isa, Isa};
        let cols: usize = 259; // 256 codes and 3 more: tails of every kind
        let codes: Vec<u8> = (0..cols).map(|i| (i * 7) as u8).collect();
        let codes = [
            codes.clone(),
            codes.iter().map(|c| c.wrapping_add(1)).collect(),
        ]
        .concat();
        for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
            for block in [1, 3, 8, 16, 17, 128, 259] {
                let blocks = cols.div_ceil(block);
                // Each block its scale, the scales taken in turn.
                let values = scales_in_turn(&SCALES, 0, 2 * blocks);
                let s = one_row(&values, blocks, block, dtype);
                let run = |isa| {
                    let mut out = vec![0f32; 2 * cols];
                    with_isa(isa, || rows(&codes, cols, 0, &s, &mut out));
                    out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                };
                let want = run(Isa::Scalar);
                for isa in Isa::available() {
                    assert_eq!(run(isa), want, "{isa:?}, {dtype}, blocks of {block}");
                }
            }
        }
    }

    #[test]
    fn every_code_times_every_scale_pattern_class() {
        // All 256 codes, one block each scale, many scales: the reference
        // table against each path, row by row.
        use crate::cast::simd::{with_isa, Isa};
        let codes: Vec<u8> = (0..=255).collect();
        let extra: Vec<u32> = (0..240u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
        for scale in SCALES.iter().chain(&extra) {
            for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
                let values = [f32::from_bits(*scale)];
                let s = one_row(&values, 1, 256, dtype);
                let run = |isa| {
                    let mut out = vec![0f32; 256];
                    with_isa(isa, || rows(&codes, 256, 0, &s, &mut out));
                    out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                };
                let want = run(Isa::Scalar);
                for (c, w) in want.iter().enumerate() {
                    let v = crate::dequant::arith::e4m3_times(c as u8, values[0]);
                    let r = crate::dequant::arith::stored_as(dtype, v).to_bits();
                    assert_eq!(*w, r, "the reference itself, code {c:#x}");
                }
                for isa in Isa::available() {
                    assert_eq!(run(isa), want, "{isa:?} {dtype} scale {scale:#x}");
                }
            }
        }
    }

    /// The products cast straight to the output dtype: every code, under
    /// every scale (the corner cases and 240 more), in blocks that leave
    /// tails, each scale dtype into each output dtype, on every path,
    /// bit for bit the reference's product then its one cast.
    #[test]
    fn every_code_under_every_scale_cast_once_on_every_path() {
        use crate::cast::simd::{with_isa, Isa};
        let cols: usize = 259;
        let codes: Vec<u8> = (0..2 * cols).map(|i| (i * 7 + i / cols) as u8).collect();
        let extra: Vec<u32> = (0..240u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
        let all: Vec<u32> = SCALES.iter().chain(&extra).copied().collect();
        for block in [1, 3, 8, 17, 128, 259] {
            let blocks = cols.div_ceil(block);
            for first in (0..all.len()).step_by(2 * blocks.min(all.len() / 2)) {
                let values = scales_in_turn(&all, first, 2 * blocks);
                for (dtype, to) in dtype_pairs() {
                    let s = one_row(&values, blocks, block, dtype);
                    let width = (to.bits() / 8) as usize;
                    let mut want = vec![0u8; codes.len() * width];
                    with_isa(Isa::Scalar, || {
                        let mut values = vec![0f32; codes.len()];
                        rows(&codes, cols, 0, &s, &mut values);
                        crate::dequant::store_f32(&values, to, &mut want);
                    });
                    let what = format!("blocks of {block} {dtype} -> {to}");
                    rows_into_on_every_path(&codes, cols, &s, to, &want, &what);
                }
            }
        }
    }

    /// Blocks without a NaN code under a scale whose 2^8 multiple is
    /// finite decode two vectors of codes at once as F16 bits (2^-8 of the
    /// code's value) times the scale times 2^8: every other code in each
    /// lane of that step, under the corner scales (subnormal, the largest
    /// whose 2^8 multiple is finite, those whose multiple is not: the
    /// other path) and 240 more, each scale dtype into each output dtype,
    /// bit for bit the reference.
    #[test]
    fn clean_blocks_decode_two_vectors_at_once_as_the_reference() {
        let not_nan: Vec<u8> = (0..=255u8).filter(|c| c & 0x7f != 0x7f).collect();
        let cols: usize = 512 + 3; // whole steps of 2 x 16 lanes, then tails
        let codes: Vec<u8> = (0..2 * cols)
            .map(|i| not_nan[(i * 37 + i / cols) % not_nan.len()])
            .collect();
        let corner = [
            0x0000_0001,
            0x8000_0001,
            0x7b7f_ffff,
            0x7b80_0000,
            0xfb80_0000,
        ];
        let extra = (0..240u32).map(|i| i.wrapping_mul(0x9e37_79b9));
        let all: Vec<u32> = SCALES.iter().copied().chain(corner).chain(extra).collect();
        for block in [64, 128, cols] {
            let blocks = cols.div_ceil(block);
            for first in 0..all.len() {
                let values = scales_in_turn(&all, first, 2 * blocks);
                for (dtype, to) in dtype_pairs() {
                    let s = one_row(&values, blocks, block, dtype);
                    let width = (to.bits() / 8) as usize;
                    let mut want = vec![0u8; codes.len() * width];
                    let mut reference = vec![0f32; codes.len()];
                    for (i, (c, v)) in codes.iter().zip(&mut reference).enumerate() {
                        let scale = values[(i / cols) * blocks + (i % cols) / block];
                        let product = crate::dequant::arith::e4m3_times(*c, scale);
                        *v = crate::dequant::arith::stored_as(dtype, product);
                    }
                    crate::dequant::store_f32(&reference, to, &mut want);
                    let what = format!("blocks of {block} {dtype} -> {to}, scales from {first}");
                    rows_into_on_every_path(&codes, cols, &s, to, &want, &what);
                }
            }
        }
    }

    #[test]
    fn rows_into_stores_what_rows_then_store_f32_does() {
        use crate::cast::simd::{with_isa, Isa};
        // 40 rows of 1000 codes: steps of 8 rows, from row 3 of the weight;
        // tiles of 16 x 128, per-channel, per-tensor.
        let (rows_n, cols, r0) = (40usize, 1000usize, 3u64);
        let codes: Vec<u8> = (0..rows_n * cols).map(|i| (i * 31 + i / 7) as u8).collect();
        let scale = |i: usize| f32::from_bits(0x3f80_0000 + (i as u32).wrapping_mul(0x0123_4567));
        let tilings = [(16u64, 128u64, 8usize), (1, 1000, 1), (43, 1000, 1)];
        for (tr, tc, scols) in tilings {
            let srows = (r0 as usize + rows_n - 1) / tr as usize - r0 as usize / tr as usize + 1;
            let values: Vec<f32> = (0..srows * scols).map(scale).collect();
            for (dtype, to) in [
                (Dtype::F32, Dtype::BF16),
                (Dtype::BF16, Dtype::F16),
                (Dtype::F16, Dtype::F32),
            ] {
                let s = Scales {
                    values: &values,
                    cols: scols,
                    tiling: Tiling { rows: tr, cols: tc },
                    dtype,
                };
                let width = (to.bits() / 8) as usize;
                for isa in Isa::available() {
                    with_isa(isa, || {
                        let mut all = vec![0f32; codes.len()];
                        rows(&codes, cols, r0, &s, &mut all);
                        let mut want = vec![0u8; codes.len() * width];
                        crate::dequant::store_f32(&all, to, &mut want);
                        let mut got = vec![0u8; codes.len() * width];
                        rows_into(&codes, cols, r0, &s, to, &mut Vec::new(), &mut got);
                        assert!(got == want, "{isa:?} tiles {tr}x{tc} {dtype} -> {to}");
                    });
                }
            }
        }
    }
}
