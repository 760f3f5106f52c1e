//! bitsandbytes LLM.int8 weights: `weight` int8 `[out, in]` and `SCB`, one
//! f32 absmax per row. The library (`int8_vectorwise_dequant`) computes
//! `A * SCB[row] * 7.874015718698502e-3` in f32, left to right, each product
//! rounded to f32: so do we (the first product is not exact in f32 in
//! general, so the order matters).

/// The reciprocal of 127 as the library multiplies by it: its Python float,
/// cast to f32 (an f32 tensor times a Python float multiplies in f32).
const INV_127: f32 = 7.874_015_718_698_502e-3_f64 as f32;

/// Dequantizes rows of `cols` int8 codes, `scb[i]` the absmax of row `i`.
pub(crate) fn int8_rows(codes: &[u8], cols: usize, scb: &[f32], out: &mut [f32]) {
    for ((row, o), &s) in codes
        .chunks_exact(cols)
        .zip(out.chunks_exact_mut(cols))
        .zip(scb)
    {
        for (&c, v) in row.iter().zip(o) {
            *v = f32::from(c as i8) * s * INV_127;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_each_row_by_its_absmax_over_127() {
        let mut out = [0f32; 4];
        int8_rows(&[127, 0x81, 127, 1], 2, &[1.0, 127.0], &mut out);
        assert_eq!(out[0], 127.0 * INV_127);
        assert_eq!(out[1], -127.0 * INV_127);
        assert_eq!(out[2], 127.0 * 127.0 * INV_127);
        assert_eq!(out[3], 127.0 * INV_127);
    }
}
