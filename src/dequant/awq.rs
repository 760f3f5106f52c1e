//! AutoAWQ GEMM: `qweight` `[in, out / 8]` packs eight output columns per
//! int32 in the order `[0, 2, 4, 6, 1, 3, 5, 7]` (column `j` of a word is in
//! nibble `[0, 4, 1, 5, 2, 6, 3, 7][j]`), `qzeros` `[groups, out / 8]` the
//! same way, `scales` `[groups, out]` F16. The library computes
//! `(q - z) * s` in the scales' dtype (no zero offset); the difference and
//! product are exact in f32, so one rounding to that dtype is what it
//! yields. Rows here are output features (the model's `[out, in]`).

use crate::Dtype;

/// The nibble holding logical column `j` of a packed word.
const NIBBLE_OF: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];

/// The words and scales one piece of output rows `[n0, n0 + nb)` needs.
pub(crate) struct Piece<'a> {
    /// The first output row.
    pub n0: usize,
    /// Words per row in `qweight` and `zeros`, from word `n0 / 8` on.
    pub words: usize,
    /// `[K][words]`.
    pub qweight: &'a [u32],
    /// `[groups][words]`.
    pub zeros: &'a [u32],
    /// `[groups][nb]`.
    pub scales: &'a [f32],
    /// Input columns per group.
    pub group_size: usize,
    /// Input columns.
    pub k_len: usize,
}

fn code(word: u32, column: usize) -> u32 {
    (word >> (4 * NIBBLE_OF[column % 8])) & 0xf
}

/// Dequantizes output rows `[n0, n0 + nb)` into `out` (`nb * K` values).
/// A row's whole runs of 8 columns on the vector path of this thread
/// (bit-identical), the rest as below, the reference.
pub(crate) fn rows(p: &Piece, scale_dtype: Dtype, out: &mut [f32]) {
    let nb = out.len() / p.k_len.max(1);
    let first_word = p.n0 / 8;
    let groups = p.k_len.div_ceil(p.group_size.max(1));
    let (mut zeros, mut scales) = (Vec::new(), Vec::new());
    for (i, out_row) in out.chunks_exact_mut(p.k_len).enumerate() {
        let n = p.n0 + i;
        let w = n / 8 - first_word;
        zeros.clear();
        scales.clear();
        zeros.extend((0..groups).map(|g| code(p.zeros[g * p.words + w], n) as f32));
        scales.extend((0..groups).map(|g| p.scales[g * nb + i]));
        let shift = 4 * NIBBLE_OF[n % 8] as u32;
        let words = &p.qweight[w..];
        let row = crate::cast::simd::AwqRow {
            words,
            stride: p.words,
            shift,
            group_size: p.group_size,
            zeros: &zeros,
            scales: &scales,
        };
        let done = crate::cast::simd::awq_row(&row, scale_dtype, out_row);
        for (k, o) in out_row.iter_mut().enumerate().skip(done) {
            let g = k / p.group_size;
            let q = code(p.qweight[k * p.words + w], n);
            let z = code(p.zeros[g * p.words + w], n);
            let v = (q as f32 - z as f32) * p.scales[g * nb + i];
            *o = super::arith::stored_as(scale_dtype, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Random words and zero points, scales of any bits (NaNs,
        /// infinities, subnormals among them), groups of any size, rows
        /// that end in part of a run of 8, each of a word's 8 columns:
        /// every path bit for bit the reference.
        #[test]
        fn rows_on_every_path(
            words in proptest::collection::vec(any::<u32>(), 43 * 2),
            zeros in proptest::collection::vec(any::<u32>(), 7 * 2),
            scale_bits in proptest::collection::vec(any::<u32>(), 7 * 11),
            group_size in 7usize..44,
            n0 in 0usize..6,
        ) {
            use crate::cast::simd::{with_isa, Isa};
            // K = 43 input columns, 2 words (16 output columns) a row, 11
            // output rows from n0.
            let k_len = 43;
            let scales: Vec<f32> = scale_bits
                .iter()
                .enumerate()
                .map(|(i, &b)| if i % 5 == 0 { f32::from_bits(b) } else { (b % 4096) as f32 / 64.0 - 32.0 })
                .collect();
            let p = Piece {
                n0,
                words: 2,
                qweight: &words,
                zeros: &zeros,
                scales: &scales,
                group_size,
                k_len,
            };
            for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32] {
                let run = |isa| {
                    let mut out = vec![0f32; 11 * k_len];
                    with_isa(isa, || rows(&p, dtype, &mut out));
                    out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                };
                let want = run(Isa::Scalar);
                for isa in Isa::available() {
                    prop_assert!(run(isa) == want, "{:?} {}", isa, dtype);
                }
            }
        }
    }

    #[test]
    fn unpacks_in_awq_order() {
        // One input row, 8 output columns: nibble i holds the value i, so
        // column j reads NIBBLE_OF[j].
        let word = (0..8u32).fold(0, |w, i| w | (i << (4 * i)));
        let p = Piece {
            n0: 0,
            words: 1,
            qweight: &[word],
            zeros: &[0],
            scales: &[1.0; 8],
            group_size: 1,
            k_len: 1,
        };
        let mut out = [0f32; 8];
        rows(&p, Dtype::F16, &mut out);
        assert_eq!(out, [0., 4., 1., 5., 2., 6., 3., 7.]);
    }
}
