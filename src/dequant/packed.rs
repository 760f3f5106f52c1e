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

/// Unpacks `out.len()` codes of `bits` bits from a row's `words`, from
/// element `first` on: element `i` is field `i` minus `2^(bits-1)`.
pub(crate) fn unpack_row(words: &[u32], bits: u32, first: usize, out: &mut [i8]) {
    let offset = 1i32 << (bits - 1);
    for (i, o) in (first..).zip(out.iter_mut()) {
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

/// A run of rows' codes.
#[derive(Clone, Copy)]
pub(crate) enum Codes<'a> {
    /// One code an element (`int-quantized`), `rows * cols`.
    Unpacked(&'a [i8]),
    /// As packed (`pack-quantized`): `per_row` words a row, `bits` a code.
    Packed {
        words: &'a [u32],
        per_row: usize,
        bits: u32,
    },
}

/// The codes, zero points and scales of a run of whole rows.
pub(crate) struct Rows<'a> {
    pub codes: Codes<'a>,
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

impl Rows<'_> {
    fn count(&self) -> usize {
        self.scales.len() / self.groups.max(1)
    }

    /// Rows `[r0, r1)` of these.
    fn sub(&self, r0: usize, r1: usize) -> Rows<'_> {
        let codes = match self.codes {
            Codes::Unpacked(c) => Codes::Unpacked(&c[r0 * self.cols..r1 * self.cols]),
            Codes::Packed {
                words,
                per_row,
                bits,
            } => Codes::Packed {
                words: &words[r0 * per_row..r1 * per_row],
                per_row,
                bits,
            },
        };
        let g = self.groups;
        Rows {
            codes,
            scales: &self.scales[r0 * g..r1 * g],
            zeros: self.zeros.map(|z| &z[r0 * g..r1 * g]),
            ..*self
        }
    }
}

/// `(code - zero) * scale` in `p.dtype`, for every element.
pub(crate) fn rows(p: &Rows, out: &mut [f32]) {
    let (mut shifted, mut unpacked) = (Vec::new(), Vec::new());
    for (r, o) in out.chunks_exact_mut(p.cols.max(1)).enumerate() {
        let done = vector_row(p, r, Dtype::F32, bytemuck::cast_slice_mut(o), &mut shifted);
        row_rest(p, r, done, &mut unpacked, &mut o[done..]);
    }
}

/// Row `r`'s whole words on the vector path of this thread (4-bit packed
/// codes only), stored as `to` (F32 or the scales' dtype) into `out`:
/// the columns done (0 where there is no such path).
fn vector_row(p: &Rows, r: usize, to: Dtype, out: &mut [u8], shifted: &mut Vec<f32>) -> usize {
    let Codes::Packed {
        words,
        per_row,
        bits: 4,
    } = p.codes
    else {
        return 0;
    };
    // The kernel takes the unsigned nibble `q`: `q - (zero + 8)` is the
    // same exact integer as `(q - 8) - zero`, the code minus its zero.
    let zeros = p.zeros.map(|z| &z[r * p.groups..(r + 1) * p.groups]);
    shifted.clear();
    shifted.extend((0..p.groups).map(|g| zeros.map_or(0.0, |z| f32::from(z[g])) + 8.0));
    let words = &words[r * per_row..(r + 1) * per_row];
    let scales = &p.scales[r * p.groups..(r + 1) * p.groups];
    let row = crate::cast::simd::Pack4Row {
        words,
        group_of: p.group_of,
        zeros: shifted,
        scales,
    };
    crate::cast::simd::pack4_row_as(&row, p.dtype, to, out)
}

/// Columns `[first, cols)` of row `r` by the reference, into `out`.
fn row_rest(p: &Rows, r: usize, first: usize, unpacked: &mut Vec<i8>, out: &mut [f32]) {
    let scales = &p.scales[r * p.groups..(r + 1) * p.groups];
    let zeros = p.zeros.map(|z| &z[r * p.groups..(r + 1) * p.groups]);
    let codes = match p.codes {
        Codes::Unpacked(c) => &c[r * p.cols + first..(r + 1) * p.cols],
        Codes::Packed {
            words,
            per_row,
            bits,
        } => {
            unpacked.clear();
            unpacked.resize(p.cols - first, 0);
            unpack_row(
                &words[r * per_row..(r + 1) * per_row],
                bits,
                first,
                unpacked,
            );
            unpacked
        }
    };
    for ((&c, v), &g) in codes.iter().zip(out).zip(&p.group_of[first..]) {
        let g = g as usize;
        let z = zeros.map_or(0.0, |z| f32::from(z[g]));
        *v = super::arith::stored_as(p.dtype, (f32::from(c) - z) * scales[g]);
    }
}

/// Values computed and stored at a time: their `f32`s stay in cache.
const STEP: usize = 8192;

/// [`rows`] stored as `to` into `out`: the bytes of `rows` then
/// [`super::store_f32`]. Stored as the scales' dtype or F32, a row's whole
/// words go from the vector path straight into `out` (the value rounded
/// as the scales' dtype is the output); else a few rows at a time through
/// `scratch`, without a piece-sized `f32` buffer.
pub(crate) fn rows_into(p: &Rows, to: Dtype, scratch: &mut Vec<f32>, out: &mut [u8]) {
    let width = (to.bits() / 8) as usize;
    let total = p.count();
    if to == p.dtype || to == Dtype::F32 {
        let mut shifted = Vec::new();
        let mut unpacked = Vec::new();
        for r in 0..total {
            let o = &mut out[r * p.cols * width..(r + 1) * p.cols * width];
            let done = vector_row(p, r, to, o, &mut shifted);
            scratch.clear();
            scratch.resize(p.cols - done, 0.0);
            row_rest(p, r, done, &mut unpacked, scratch);
            super::store_f32(scratch, to, &mut o[done * width..]);
        }
        return;
    }
    let per = (STEP / p.cols.max(1)).max(1);
    for r0 in (0..total).step_by(per) {
        let r1 = (r0 + per).min(total);
        scratch.clear();
        scratch.resize((r1 - r0) * p.cols, 0.0);
        rows(&p.sub(r0, r1), scratch);
        let at = r0 * p.cols * width;
        super::store_f32(scratch, to, &mut out[at..at + scratch.len() * width]);
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

    use crate::dequant::xorshift as rng;

    /// A scale of `dtype` from random bits: any value the dtype holds
    /// (NaNs, infinities, subnormals among them), or a plain number.
    fn scale_of(dtype: Dtype, bits: u32, plain: bool) -> f32 {
        let v = match dtype {
            Dtype::F16 => f32::from_bits(crate::cast::f16_to_f32(bits as u16)),
            Dtype::BF16 => f32::from_bits(crate::cast::bf16_to_f32(bits as u16)),
            _ => f32::from_bits(bits),
        };
        match plain {
            true => crate::dequant::arith::stored_as(dtype, (bits % 4096) as f32 / 64.0 - 32.0),
            false => v,
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Random packed rows of any width and length (rows ending in part
        /// of a word), groups in runs of any size or in any order (`g_idx`),
        /// with or without zero points, each scale dtype, stored as each
        /// output dtype: every path gives the bytes of the reference (the
        /// scalar path), which gives those of the codes unpacked first by
        /// the plain bit reading.
        #[test]
        fn packed_rows_on_every_path_as_the_plain_reading(
            bits in proptest::sample::select(vec![4u32, 4, 4, 2, 3, 8]),
            rows_n in 1usize..6,
            cols in 1usize..90,
            group_size in 1usize..40,
            act_order in proptest::prelude::any::<bool>(),
            asymmetric in proptest::prelude::any::<bool>(),
            seed in proptest::prelude::any::<u64>(),
        ) {
            use crate::cast::simd::{with_isa, Isa};
            let mut next = rng(seed | 1);
            let groups = cols.div_ceil(group_size);
            let group_of: Vec<u32> = match act_order {
                true => (0..cols).map(|_| (next() % groups as u64) as u32).collect(),
                false => (0..cols).map(|k| (k / group_size) as u32).collect(),
            };
            let per_row = (cols * bits as usize).div_ceil(32);
            let words: Vec<u32> = (0..rows_n * per_row).map(|_| next() as u32).collect();
            let half = 1i64 << (bits - 1);
            let zeros: Vec<i8> = (0..rows_n * groups)
                .map(|_| ((next() % (2 * half as u64)) as i64 - half) as i8)
                .collect();
            let unpacked: Vec<i8> = words
                .chunks_exact(per_row)
                .flat_map(|row| {
                    let mut out = vec![0i8; cols];
                    unpack_row(row, bits, 0, &mut out);
                    out
                })
                .collect();
            for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32] {
                let scales: Vec<f32> = (0..rows_n * groups)
                    .map(|i| scale_of(dtype, next() as u32, i % 5 != 0))
                    .collect();
                let p = Rows {
                    codes: Codes::Packed { words: &words, per_row, bits },
                    cols,
                    scales: &scales,
                    zeros: asymmetric.then_some(&zeros[..]),
                    groups,
                    group_of: &group_of,
                    dtype,
                };
                let plain = Rows { codes: Codes::Unpacked(&unpacked), ..p };
                for to in [Dtype::F32, Dtype::F16, Dtype::BF16] {
                    let run = |isa, p: &Rows| {
                        let width = (to.bits() / 8) as usize;
                        let mut out = vec![0u8; rows_n * cols * width];
                        with_isa(isa, || rows_into(p, to, &mut Vec::new(), &mut out));
                        out
                    };
                    let want = run(Isa::Scalar, &plain);
                    for isa in Isa::available() {
                        proptest::prop_assert!(
                            run(isa, &p) == want,
                            "{:?}, {} bits, {} scales, to {}", isa, bits, dtype, to
                        );
                    }
                }
            }
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
                unpack_row(&words, bits, 0, &mut out);
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
    fn rows_into_stores_what_rows_then_store_f32_does() {
        // 300 rows of 61 columns: steps of 134 rows, the last shorter.
        let (rows_n, cols, bits) = (300usize, 61usize, 4u32);
        let mut next = rng(11);
        let per_row = (cols * 4).div_ceil(32);
        let words: Vec<u32> = (0..rows_n * per_row).map(|_| next() as u32).collect();
        let group_of: Vec<u32> = (0..cols as u32).map(|k| k / 16).collect();
        let scales: Vec<f32> = (0..rows_n * 4).map(|i| 0.5 + i as f32 / 7.0).collect();
        let zeros: Vec<i8> = (0..rows_n * 4).map(|i| (i % 16) as i8 - 8).collect();
        let p = Rows {
            codes: Codes::Packed {
                words: &words,
                per_row,
                bits,
            },
            cols,
            scales: &scales,
            zeros: Some(&zeros),
            groups: 4,
            group_of: &group_of,
            dtype: Dtype::F16,
        };
        let mut values = vec![0f32; rows_n * cols];
        rows(&p, &mut values);
        for to in [Dtype::BF16, Dtype::F16, Dtype::F32] {
            let width = (to.bits() / 8) as usize;
            let mut want = vec![0u8; rows_n * cols * width];
            crate::dequant::store_f32(&values, to, &mut want);
            let mut got = vec![0u8; rows_n * cols * width];
            rows_into(&p, to, &mut Vec::new(), &mut got);
            assert!(got == want, "{to}");
        }
    }

    #[test]
    fn computes_in_the_scales_dtype() {
        // (7 - -3) * 0.1 in BF16: 10 * bf16(0.1) rounded to BF16.
        let s = crate::dequant::arith::stored_as(Dtype::BF16, 0.1);
        let p = Rows {
            codes: Codes::Unpacked(&[7, -8]),
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
