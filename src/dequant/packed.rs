//! compressed-tensors integer weights: `pack-quantized` (1- to 8-bit codes
//! packed densely into I32 words, zero points packed the same way down the
//! rows) and `int-quantized` / `naive-quantized` (one I8 code an element).
//!
//! The library (`PackedQuantizationCompressor.decompress`,
//! `unpack_from_int32`, `forward_helpers._dequantize`) reads element `i` of
//! a row from bits `[i * b, i * b + b)` of the row's little-endian word
//! stream, minus `2^(b-1)`; then computes `(code - zero) * scale` in the
//! scale's dtype: the code and zero widened (exact), their difference
//! exact, the product rounded once to the scale's dtype.

use crate::Dtype;

/// Bits `[bit, bit + bits)` of the little-endian stream `words`, as an
/// unsigned value (`bits` at most 8).
fn field(words: &[u32], bit: u64, bits: u32) -> u32 {
    let w = (bit / 32) as usize;
    let off = (bit % 32) as u32;
    let mut v = words[w] >> off;
    if off + bits > 32 {
        v |= words[w + 1] << (32 - off);
    }
    v & ((1u32 << bits) - 1)
}

/// Unpacks `out.len()` codes of `bits` bits from a row's `words`: element
/// `i` is field `i` minus `2^(bits-1)`.
pub(crate) fn unpack_row(words: &[u32], bits: u32, out: &mut [i8]) {
    let offset = 1i32 << (bits - 1);
    for (i, o) in out.iter_mut().enumerate() {
        *o = (field(words, i as u64 * u64::from(bits), bits) as i32 - offset) as i8;
    }
}

/// Unpacks the zero points of rows `[r0, r0 + rows)` from zero points
/// packed down the rows: `packed` holds word rows from `r0 * bits / 32` on,
/// `cols` words each; row `r`'s zero point of group `g` is field `r` of
/// column `g`'s words. `out` is `rows * cols`, row after row.
pub(crate) fn unpack_zeros(packed: &[u32], cols: usize, bits: u32, r0: u64, out: &mut [i8]) {
    let offset = 1i32 << (bits - 1);
    let first_word = r0 * u64::from(bits) / 32;
    let rows = out.len() / cols.max(1);
    let mut column = Vec::new();
    for g in 0..cols {
        column.clear();
        column.extend(packed.iter().skip(g).step_by(cols.max(1)).copied());
        for r in 0..rows {
            let bit = (r0 + r as u64) * u64::from(bits) - first_word * 32;
            out[r * cols + g] = (field(&column, bit, bits) as i32 - offset) as i8;
        }
    }
}

/// The codes, zero points and scales of a run of whole rows.
pub(crate) struct Rows<'a> {
    /// `rows * cols` codes.
    pub codes: &'a [i8],
    /// Columns per row.
    pub cols: usize,
    /// `rows * groups` scales (decoded), row after row.
    pub scales: &'a [f32],
    /// `rows * groups` zero points, or none (symmetric).
    pub zeros: Option<&'a [i8]>,
    /// Scales (and zero points) per row.
    pub groups: usize,
    /// Each column's group.
    pub group_of: &'a [u32],
    /// The scales' dtype: the library computes in it.
    pub dtype: Dtype,
}

/// `(code - zero) * scale` in `p.dtype`, for every element.
pub(crate) fn rows(p: &Rows, out: &mut [f32]) {
    for (r, (codes, o)) in p
        .codes
        .chunks_exact(p.cols)
        .zip(out.chunks_exact_mut(p.cols))
        .enumerate()
    {
        let scales = &p.scales[r * p.groups..(r + 1) * p.groups];
        let zeros = p.zeros.map(|z| &z[r * p.groups..(r + 1) * p.groups]);
        for ((&c, v), &g) in codes.iter().zip(o).zip(p.group_of) {
            let g = g as usize;
            let z = zeros.map_or(0.0, |z| f32::from(z[g]));
            *v = super::arith::stored_as(p.dtype, (f32::from(c) - z) * scales[g]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain packer: codes (already offset to unsigned) bit by bit.
    fn pack(values: &[u32], bits: u32) -> Vec<u32> {
        let mut words = vec![0u32; (values.len() * bits as usize).div_ceil(32)];
        for (i, &v) in values.iter().enumerate() {
            for b in 0..bits as usize {
                let bit = i * bits as usize + b;
                words[bit / 32] |= ((v >> b) & 1) << (bit % 32);
            }
        }
        words
    }

    fn rng(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    #[test]
    fn unpacks_every_width_as_a_plain_bit_reading() {
        let mut next = rng(0x5eed);
        for bits in 1..=8u32 {
            for _ in 0..20 {
                let n = 1 + (next() % 100) as usize;
                let values: Vec<u32> = (0..n)
                    .map(|_| (next() as u32) & ((1 << bits) - 1))
                    .collect();
                let words = pack(&values, bits);
                let mut out = vec![0i8; n];
                unpack_row(&words, bits, &mut out);
                let want: Vec<i8> = values
                    .iter()
                    .map(|&v| (v as i32 - (1 << (bits - 1))) as i8)
                    .collect();
                assert_eq!(out, want, "{bits} bits");
            }
        }
    }

    #[test]
    fn zero_points_are_packed_down_the_rows() {
        let mut next = rng(7);
        for bits in [2u32, 3, 4, 8] {
            let (rows, cols) = (37usize, 3usize);
            let zp: Vec<u32> = (0..rows * cols)
                .map(|_| (next() as u32) & ((1 << bits) - 1))
                .collect();
            // Column g's stream: zp[0][g], zp[1][g], ...; word rows x cols.
            let columns: Vec<Vec<u32>> = (0..cols)
                .map(|g| {
                    pack(
                        &(0..rows).map(|r| zp[r * cols + g]).collect::<Vec<_>>(),
                        bits,
                    )
                })
                .collect();
            let word_rows = columns[0].len();
            let packed: Vec<u32> = (0..word_rows)
                .flat_map(|w| columns.iter().map(move |c| c[w]))
                .collect();
            for r0 in [0u64, 5, 16, 36] {
                let n = rows - r0 as usize;
                let w0 = (r0 * u64::from(bits) / 32) as usize;
                let mut out = vec![0i8; n * cols];
                unpack_zeros(&packed[w0 * cols..], cols, bits, r0, &mut out);
                for r in 0..n {
                    for g in 0..cols {
                        let want = zp[(r0 as usize + r) * cols + g] as i32 - (1 << (bits - 1));
                        assert_eq!(
                            i32::from(out[r * cols + g]),
                            want,
                            "{bits} bits, row {}",
                            r0 as usize + r
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn computes_in_the_scales_dtype() {
        // (7 - -3) * 0.1 in BF16: 10 * bf16(0.1) rounded to BF16.
        let s = crate::dequant::arith::stored_as(Dtype::BF16, 0.1);
        let p = Rows {
            codes: &[7, -8],
            cols: 2,
            scales: &[s],
            zeros: Some(&[-3]),
            groups: 1,
            group_of: &[0, 0],
            dtype: Dtype::BF16,
        };
        let mut out = [0f32; 2];
        rows(&p, &mut out);
        assert_eq!(
            out[0],
            crate::dequant::arith::stored_as(Dtype::BF16, 10.0 * s)
        );
        assert_eq!(
            out[1],
            crate::dequant::arith::stored_as(Dtype::BF16, -5.0 * s)
        );
    }
}
