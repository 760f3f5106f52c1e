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
/// `cols` columns.
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
        for (c, (&code, o)) in row.iter().zip(out_row.iter_mut()).enumerate() {
            let v = super::arith::e4m3_to_f32(code) * srow[c / cb];
            *o = super::arith::stored_as(s.dtype, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
