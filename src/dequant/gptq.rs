//! GPTQ (AutoGPTQ, GPTQModel): `qweight` packs `32 / bits` input rows per
//! int32 along the input dimension, low bits first; `qzeros` packs the
//! zero points the same way along the output dimension; `scales` is F16
//! (or F32/BF16), one row per group; `g_idx` names each input column's
//! group (act-order), else column `k` is in group `k / group_size`.
//!
//! The library computes `scales[g] * (q - zeros[g])` in the scales' dtype,
//! with `zeros` the stored value plus one in the v1 checkpoint format
//! (masked to `bits` first, then incremented: a stored 15 is 16, as
//! AutoGPTQ's and GPTQModel's dequantizing forward and
//! `general_qlinear_converter` compute; only their exllama repacking masks
//! after the increment), as stored in `gptq_v2`. `q - z` and its product by an
//! F16/BF16 scale are exact in f32, so one rounding to the scales' dtype is
//! what torch's half-precision multiply yields.
//!
//! The library's weight is `[in, out]`; the model's is `[out, in]`: rows
//! here are output features, as the unquantized model names and lays out
//! `...proj.weight`.

use crate::Dtype;

/// One GPTQ weight's packing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packing {
    /// Bits per code: 2, 4 or 8.
    pub bits: u32,
    /// Added to each stored zero point (1 in the v1 format, 0 in v2).
    pub zero_offset: u32,
}

impl Packing {
    /// Codes per int32.
    pub(crate) fn per_word(self) -> usize {
        (32 / self.bits) as usize
    }

    fn code(self, word: u32, slot: usize) -> u32 {
        (word >> (self.bits as usize * slot)) & ((1u32 << self.bits) - 1)
    }
}

/// The words and scales one piece of output rows `[n0, n0 + nb)` needs.
pub(crate) struct Piece<'a> {
    /// The first output row.
    pub n0: usize,
    /// Output rows in the piece (`nb`).
    pub rows: usize,
    /// `[K / per_word][nb]`: from each packed row, the words of columns `n0..n0 + nb`.
    pub qweight: &'a [u32],
    /// `[groups][zero_words]`: from each group, the zero words from `n0 / per_word` on.
    pub zeros: &'a [u32],
    /// Zero words per group in `zeros`.
    pub zero_words: usize,
    /// `[groups][nb]`: the scales of columns `n0..n0 + nb`.
    pub scales: &'a [f32],
    /// The group of each input column (`K` entries, each below the groups).
    pub groups: &'a [u32],
    /// [`crate::cast::simd::int4_runs`] of `groups`: made once a weight.
    pub runs: &'a [u32],
}

/// Dequantizes output rows `[n0, n0 + nb)` into `out` (`nb * K` values,
/// row-major), rounding each product as `scale_dtype` stores it: the
/// reference the tests hold `rows_into` to.
#[cfg(test)]
pub(crate) fn rows(p: &Piece, packing: Packing, scale_dtype: Dtype, out: &mut [f32]) {
    let k_len = p.groups.len();
    let mut rows = Rows::new(p, packing, scale_dtype, p.rows);
    for (i, out_row) in out.chunks_exact_mut(k_len.max(1)).enumerate() {
        rows.row(i, out_row);
    }
}

/// Output rows a step of [`rows_into`] holds as `f32`: 32 KiB, in L1.
const STEP: usize = 8192;

/// [`rows`] from the piece's row `first` on, as many as `out` holds,
/// stored as `to` straight into `out` (`K` elements of `to` a row), a few
/// rows at a time through `scratch`, so that the `f32`s never leave the
/// cache: the same bytes as [`rows`] then [`super::store_f32`]. 4-bit
/// rows go 8 at a time on the vector path (one load of 8 rows' words,
/// side by side in the packed matrix, instead of a strided load per row
/// and word).
pub(crate) fn rows_into(
    p: &Piece,
    first: usize,
    packing: Packing,
    scale_dtype: Dtype,
    to: Dtype,
    scratch: &mut Vec<f32>,
    out: &mut [u8],
) {
    let k_len = p.groups.len().max(1);
    let width = (to.bits() / 8) as usize;
    let row_bytes = k_len * width;
    let end = first + out.len() / row_bytes;
    let mut rows = Rows::new(p, packing, scale_dtype, p.rows);
    let mut i = first;
    while i < end {
        let at = (i - first) * row_bytes;
        if i + 8 <= end && rows.tile(i, to, &mut out[at..at + 8 * row_bytes]) {
            i += 8;
            continue;
        }
        let per = (STEP / k_len).clamp(1, end - i);
        scratch.clear();
        scratch.resize(per * k_len, 0.0);
        for (j, out_row) in scratch.chunks_exact_mut(k_len).enumerate() {
            rows.row(i + j, out_row);
        }
        super::store_f32(scratch, to, &mut out[at..at + per * row_bytes]);
        i += per;
    }
}

/// One piece's rows, made one at a time: the per-row tables it reuses.
struct Rows<'a> {
    p: &'a Piece<'a>,
    packing: Packing,
    scale_dtype: Dtype,
    /// Output rows in the piece.
    nb: usize,
    first_word: usize,
    levels: usize,
    /// Whether each group's `levels` values are computed once and looked up.
    tabled: bool,
    per_group: Vec<(f32, f32)>,
    table: Vec<f32>,
    zeros: Vec<f32>,
    scales: Vec<f32>,
    /// A tile's zero points and scales, `[group][8 rows]`.
    tile_zeros: Vec<f32>,
    tile_scales: Vec<f32>,
}

impl<'a> Rows<'a> {
    fn new(p: &'a Piece<'a>, packing: Packing, scale_dtype: Dtype, nb: usize) -> Self {
        let k_len = p.groups.len();
        let groups = p.scales.len() / nb.max(1);
        // Each group of a row has 2^bits possible values: when they are fewer
        // than the row's codes, each is computed and rounded once, then looked up.
        let levels = 1usize << packing.bits;
        let tabled = groups * levels <= k_len;
        Rows {
            p,
            packing,
            scale_dtype,
            nb,
            first_word: p.n0 / packing.per_word(),
            levels,
            tabled,
            per_group: vec![(0f32, 0f32); groups],
            table: vec![0f32; if tabled { groups * levels } else { 0 }],
            zeros: Vec::new(),
            scales: Vec::new(),
            tile_zeros: Vec::new(),
            tile_scales: Vec::new(),
        }
    }

    /// Rows `i..i + 8` of the piece stored as `to` into `out` (their
    /// bytes), straight from the vector kernel's registers: false, with
    /// nothing written, off the 4-bit vector path.
    fn tile(&mut self, i: usize, to: Dtype, out: &mut [u8]) -> bool {
        let (p, packing, nb) = (self.p, self.packing, self.nb);
        let k_len = p.groups.len();
        if packing.bits != 4
            || k_len < 8
            || crate::cast::simd::isa() == crate::cast::simd::Isa::Scalar
        {
            return false;
        }
        let per = packing.per_word();
        let groups = self.per_group.len();
        self.tile_zeros.clear();
        self.tile_zeros.resize(groups * 8, 0.0);
        self.tile_scales.clear();
        for g in 0..groups {
            let at = g * nb + i;
            self.tile_scales.extend_from_slice(&p.scales[at..at + 8]);
        }
        let n = p.n0 + i;
        let zero_word = n / per - self.first_word;
        // Rows from a multiple of 8: their zero points are one word's 8
        // codes in each group (no division a row).
        let slots: [usize; 8] = std::array::from_fn(|j| (n % per + j) % per);
        let words: [usize; 8] = std::array::from_fn(|j| (n + j) / per - n / per + zero_word);
        for (g, zeros) in self.tile_zeros.chunks_exact_mut(8).enumerate() {
            let group = &p.zeros[g * p.zero_words..];
            for (j, z) in zeros.iter_mut().enumerate() {
                let stored = packing.code(group[words[j]], slots[j]);
                *z = (stored + packing.zero_offset) as f32;
            }
        }
        let runs = p.runs;
        let tile = crate::cast::simd::Int4Tile {
            words: &p.qweight[i..],
            stride: nb,
            groups: p.groups,
            zeros: &self.tile_zeros,
            scales: &self.tile_scales,
            runs,
        };
        let done = crate::cast::simd::int4_rows8(&tile, self.scale_dtype, to, out);
        if done == 0 {
            return false;
        }
        // A row's last columns short of a word: as the reference.
        let width = (to.bits() / 8) as usize;
        for j in 0..8 {
            for k in done..k_len {
                let word = p.qweight[k / per * nb + i + j];
                let q = packing.code(word, k % per);
                let g = p.groups[k] as usize;
                let (z, scale) = (self.tile_zeros[g * 8 + j], self.tile_scales[g * 8 + j]);
                let v = super::arith::stored_as(self.scale_dtype, (q as f32 - z) * scale);
                let at = (j * k_len + k) * width;
                super::store_f32(&[v], to, &mut out[at..at + width]);
            }
        }
        true
    }

    /// Row `i` of the piece (output row `n0 + i`) into `out_row` (`K` values).
    fn row(&mut self, i: usize, out_row: &mut [f32]) {
        let (p, packing, nb) = (self.p, self.packing, self.nb);
        let k_len = p.groups.len();
        let per = packing.per_word();
        let n = p.n0 + i;
        let (zero_word, zero_slot) = (n / per - self.first_word, n % per);
        for (g, zs) in self.per_group.iter_mut().enumerate() {
            let stored = packing.code(p.zeros[g * p.zero_words + zero_word], zero_slot);
            *zs = ((stored + packing.zero_offset) as f32, p.scales[g * nb + i]);
        }
        let scale_dtype = self.scale_dtype;
        let value = |q: u32, (z, scale): (f32, f32)| {
            super::arith::stored_as(scale_dtype, (q as f32 - z) * scale)
        };
        // 4-bit rows on the vector path of this thread: its whole words.
        let done = match packing.bits {
            4 => {
                self.zeros.clear();
                self.scales.clear();
                self.zeros.extend(self.per_group.iter().map(|zs| zs.0));
                self.scales.extend(self.per_group.iter().map(|zs| zs.1));
                let words = &p.qweight[i..];
                crate::cast::simd::int4_row(
                    words,
                    nb,
                    p.groups,
                    &self.zeros,
                    &self.scales,
                    scale_dtype,
                    out_row,
                )
            }
            _ => 0,
        };
        if done == k_len {
            return;
        }
        let (levels, tabled) = (self.levels, self.tabled);
        if tabled {
            for (slots, &zs) in self.table.chunks_exact_mut(levels).zip(&self.per_group) {
                for (q, t) in slots.iter_mut().enumerate() {
                    *t = value(q as u32, zs);
                }
            }
        }
        // A packed word at a time: no division per code.
        let words = out_row.chunks_mut(per).zip(p.groups.chunks(per));
        for (w, (outs, gs)) in words.enumerate().skip(done / per) {
            let word = p.qweight[w * nb + i];
            for (slot, (o, &g)) in outs.iter_mut().zip(gs).enumerate() {
                let q = packing.code(word, slot);
                *o = match tabled {
                    true => self.table[g as usize * levels + q as usize],
                    false => value(q, self.per_group[g as usize]),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Random words, zero points, scales of any bits (NaNs, infinities
        /// and subnormals among them), groups in any order (act-order) or
        /// in runs, rows that end in part of a word: every path bit for
        /// bit the reference, v1 and v2, each scale dtype.
        #[test]
        fn four_bit_rows_on_every_path(
            words in proptest::collection::vec(any::<u32>(), 6 * 3),
            zeros in proptest::collection::vec(any::<u32>(), 4),
            scale_bits in proptest::collection::vec(any::<u32>(), 4 * 3),
            order in proptest::collection::vec(0u32..4, 43),
            act_order in any::<bool>(),
            v1 in any::<bool>(),
            n0 in 0usize..2,
        ) {
            use crate::cast::simd::{with_isa, Isa};
            // K = 43 input columns (5 words and 3 columns), N = 3 output
            // rows from row n0 (zeros word 0 holds rows 0..8), 4 groups.
            let k_len = 43;
            let groups: Vec<u32> = match act_order {
                true => order,
                false => (0..k_len as u32).map(|k| k / 11).collect(),
            };
            let packing = Packing { bits: 4, zero_offset: u32::from(v1) };
            // Every fifth scale a plain one, so most values are numbers.
            let scales: Vec<f32> = scale_bits
                .iter()
                .enumerate()
                .map(|(i, &b)| if i % 5 == 0 { f32::from_bits(b) } else { (b % 4096) as f32 / 64.0 - 32.0 })
                .collect();
            let runs = crate::cast::simd::int4_runs(&groups);
            let p = piece((n0, 3), &words, &zeros, &scales, &groups, &runs);
            for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32] {
                let run = |isa| {
                    let mut out = vec![0f32; 3 * k_len];
                    with_isa(isa, || rows(&p, packing, dtype, &mut out));
                    out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                };
                let want = run(Isa::Scalar);
                for isa in Isa::available() {
                    prop_assert!(run(isa) == want, "{:?} {}", isa, dtype);
                }
                // Stored straight as each output dtype: the bytes of the
                // reference's values stored after.
                let values: Vec<f32> = want.iter().map(|&b| f32::from_bits(b)).collect();
                for to in [Dtype::F32, Dtype::BF16, Dtype::F16] {
                    let width = (to.bits() / 8) as usize;
                    let mut stored = vec![0u8; values.len() * width];
                    crate::dequant::store_f32(&values, to, &mut stored);
                    for isa in Isa::available() {
                        let mut got = vec![0u8; values.len() * width];
                        let mut scratch = Vec::new();
                        with_isa(isa, || rows_into(&p, 0, packing, dtype, to, &mut scratch, &mut got));
                        prop_assert!(got == stored, "{:?} {} -> {}", isa, dtype, to);
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Pieces of 8 rows and more (the vector path's tiles of 8 rows,
        /// the rest row by row), rows of over 1024 columns
        /// ending in part of a word, groups in runs or in any order, from
        /// any first row (zero words shared across tiles): every path's
        /// bytes those of the reference's values stored after.
        #[test]
        fn tiles_of_eight_rows_store_what_the_rows_are(
            seed in 1u64..u64::MAX,
            nb in 8usize..21,
            n0 in 0usize..12,
            wide in any::<bool>(),
            act_order in any::<bool>(),
            v1 in any::<bool>(),
            split in 0usize..21,
        ) {
            let mut next = crate::dequant::xorshift(seed);
            let k_len: usize = if wide { 1024 + 8 * 3 + 5 } else { 43 };
            let n_groups = 5;
            let groups: Vec<u32> = (0..k_len as u32)
                .map(|k| match act_order {
                    true => (next() % n_groups as u64) as u32,
                    // Groups of whole words every third case, else
                    // across words.
                    false if seed % 3 == 0 => k / 8 * 8 * n_groups as u32 / k_len as u32,
                    false => k * n_groups as u32 / k_len as u32,
                })
                .collect();
            let words_per_row = k_len.div_ceil(8);
            let qweight: Vec<u32> = (0..words_per_row * nb).map(|_| next() as u32).collect();
            let zero_words = (n0 + nb - 1) / 8 - n0 / 8 + 1;
            let zeros: Vec<u32> = (0..n_groups * zero_words).map(|_| next() as u32).collect();
            // Every other case an infinity or a NaN among the scales (the
            // tiles' path with the NaN patches; finite ones take the other).
            let scales: Vec<f32> = (0..n_groups * nb)
                .map(|i| match i % 7 {
                    0 => f32::from_bits(next() as u32),
                    3 if seed % 2 == 0 => [f32::INFINITY, f32::NAN][(next() % 2) as usize],
                    _ => (next() % 4096) as f32 / 64.0 - 32.0,
                })
                .collect();
            let runs = crate::cast::simd::int4_runs(&groups);
            let p = piece((n0, nb), &qweight, &zeros, &scales, &groups, &runs);
            let packing = Packing { bits: 4, zero_offset: u32::from(v1) };
            // From the first row, and from a later one on: those rows' bytes.
            for first in [0, split % nb] {
                let mismatch = first_mismatch(&p, packing, first);
                prop_assert!(mismatch.is_none(), "{:?}", mismatch);
            }
        }
    }

    /// A piece of 4-bit words: rows `n0..n0 + rows` over these lists, its
    /// zero words those that cover its rows, `runs` its groups' runs.
    fn piece<'a>(
        (n0, rows): (usize, usize),
        qweight: &'a [u32],
        zeros: &'a [u32],
        scales: &'a [f32],
        groups: &'a [u32],
        runs: &'a [u32],
    ) -> Piece<'a> {
        Piece {
            n0,
            rows,
            qweight,
            zeros,
            zero_words: (n0 + rows - 1) / 8 - n0 / 8 + 1,
            scales,
            groups,
            runs,
        }
    }

    /// Every path's bytes of the piece's rows from `first` on (`rows_into`)
    /// against the reference's values stored after, for each scales' and
    /// output dtype: the first that differ, named.
    fn first_mismatch(p: &Piece, packing: Packing, first: usize) -> Option<String> {
        use crate::cast::simd::{with_isa, Isa};
        let k_len = p.groups.len();
        for dtype in [Dtype::F16, Dtype::BF16, Dtype::F32] {
            let mut values = vec![0f32; p.rows * k_len];
            with_isa(Isa::Scalar, || rows(p, packing, dtype, &mut values));
            for to in [Dtype::F32, Dtype::BF16, Dtype::F16] {
                let width = (to.bits() / 8) as usize;
                let mut want = vec![0u8; values.len() * width];
                crate::dequant::store_f32(&values, to, &mut want);
                let want = &want[first * k_len * width..];
                for isa in Isa::available() {
                    let mut got = vec![0u8; want.len()];
                    let mut scratch = Vec::new();
                    with_isa(isa, || {
                        rows_into(p, first, packing, dtype, to, &mut scratch, &mut got)
                    });
                    if got != want {
                        return Some(format!("{isa:?} {dtype} -> {to} from row {first}"));
                    }
                }
            }
        }
        None
    }

    /// Groups of 128 columns (whole words, as without act-order),
    /// 19 rows from row 5 (two tiles and 3 rows), a row ending in part of
    /// a word, scales finite or not: every path's bytes those of the
    /// reference's values stored after, each scales' and output dtype.
    #[test]
    fn tiles_of_whole_word_groups_store_what_the_rows_are() {
        let (k_len, nb, n0) = (1029usize, 19usize, 5usize);
        let mut next = crate::dequant::xorshift(0x51_7cc1_b727_220a);
        let groups: Vec<u32> = (0..k_len as u32).map(|k| k / 128).collect();
        let n_groups = k_len.div_ceil(128);
        let qweight: Vec<u32> = (0..k_len.div_ceil(8) * nb).map(|_| next() as u32).collect();
        let zero_words = (n0 + nb - 1) / 8 - n0 / 8 + 1;
        let zeros: Vec<u32> = (0..n_groups * zero_words).map(|_| next() as u32).collect();
        for special in [None, Some(f32::INFINITY), Some(f32::NAN)] {
            let mut scales: Vec<f32> = (0..n_groups * nb)
                .map(|_| (next() % 4096) as f32 / 64.0 - 32.0)
                .collect();
            if let Some(x) = special {
                scales[n_groups * 9 + 2] = x;
            }
            let runs = crate::cast::simd::int4_runs(&groups);
            let p = piece((n0, nb), &qweight, &zeros, &scales, &groups, &runs);
            let packing = Packing {
                bits: 4,
                zero_offset: 1,
            };
            let mismatch = first_mismatch(&p, packing, 0);
            assert!(mismatch.is_none(), "{mismatch:?}, {special:?}");
        }
    }

    /// The tiles' lookup (64 columns a step, each 32 in one group): groups
    /// of 16 to 128 columns and one for the row (some blocks of 32 in two
    /// groups, which are computed), blocks whose groups come back out of
    /// order (act-order in runs of 32), rows ending in words short of a
    /// step and in part of a word, zero points from a row of 8 or across
    /// two words, scales finite or not: every path's bytes those of the
    /// reference's values stored after.
    #[test]
    fn tiles_look_up_blocks_of_one_group() {
        let mut next = crate::dequant::xorshift(0x6c0c_2b1d_93e5_a7f1);
        let nb = 16;
        for (k_len, n0) in [(512usize, 8usize), (64 * 3 + 8 * 3 + 5, 3)] {
            let blocks = k_len.div_ceil(32) as u32;
            let runs: Vec<Vec<u32>> = vec![
                (0..k_len as u32).map(|k| k / 16).collect(),
                (0..k_len as u32).map(|k| k / 32).collect(),
                (0..k_len as u32).map(|k| k / 48).collect(),
                (0..k_len as u32).map(|k| k / 64).collect(),
                (0..k_len as u32).map(|k| k / 128).collect(),
                vec![0; k_len],
                // Blocks of 32 in groups 2, 0, 2, 1, 0, 2, ...
                (0..k_len as u32)
                    .map(|k| [2, 0, 2, 1, 0][(k / 32) as usize % 5])
                    .collect(),
            ];
            for groups in runs {
                let n_groups = *groups.iter().max().unwrap() as usize + 1;
                assert!(n_groups <= blocks as usize * 2);
                let qweight: Vec<u32> =
                    (0..k_len.div_ceil(8) * nb).map(|_| next() as u32).collect();
                let zero_words = (n0 + nb - 1) / 8 - n0 / 8 + 1;
                let zeros: Vec<u32> = (0..n_groups * zero_words).map(|_| next() as u32).collect();
                for special in [None, Some(f32::NAN), Some(f32::NEG_INFINITY)] {
                    let mut scales: Vec<f32> = (0..n_groups * nb)
                        .map(|_| (next() % 4096) as f32 / 64.0 - 32.0)
                        .collect();
                    if let Some(x) = special {
                        scales[nb * (n_groups - 1) + 9] = x;
                    }
                    let runs = crate::cast::simd::int4_runs(&groups);
                    let p = piece((n0, nb), &qweight, &zeros, &scales, &groups, &runs);
                    for v1 in [false, true] {
                        let packing = Packing {
                            bits: 4,
                            zero_offset: u32::from(v1),
                        };
                        for first in [0, 8] {
                            let mismatch = first_mismatch(&p, packing, first);
                            assert!(mismatch.is_none(), "{mismatch:?}, K {k_len}, {special:?}");
                        }
                    }
                }
            }
        }
    }

    /// Rows longer than a step's share (K = 4096: 2 rows a step, 3 steps
    /// for 5 rows from row 3): each step's rows are its own, as stored after.
    #[test]
    fn steps_of_rows_store_what_the_rows_are() {
        let (k_len, nb, n0) = (4096usize, 5usize, 3usize);
        let mut x = 0x9e37_79b9u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let qweight: Vec<u32> = (0..k_len / 8 * nb).map(|_| next()).collect();
        let groups: Vec<u32> = (0..k_len as u32).map(|k| k / 128).collect();
        let zeros: Vec<u32> = (0..32).map(|_| next()).collect();
        let scales: Vec<f32> = (0..32 * nb)
            .map(|_| (next() % 1000) as f32 / 997.0)
            .collect();
        let runs = crate::cast::simd::int4_runs(&groups);
        let p = piece((n0, nb), &qweight, &zeros, &scales, &groups, &runs);
        let packing = Packing {
            bits: 4,
            zero_offset: 1,
        };
        let mut values = vec![0f32; nb * k_len];
        rows(&p, packing, Dtype::F16, &mut values);
        let mut want = vec![0u8; nb * k_len * 2];
        crate::dequant::store_f32(&values, Dtype::BF16, &mut want);
        let mut got = vec![0u8; want.len()];
        rows_into(
            &p,
            0,
            packing,
            Dtype::F16,
            Dtype::BF16,
            &mut Vec::new(),
            &mut got,
        );
        assert!(got == want);
        // Row 4 of the piece (its third step) is not row 0's.
        assert_ne!(got[..2 * k_len], got[4 * 2 * k_len..]);
    }

    #[test]
    fn unpacks_along_the_input_dimension_with_the_v1_offset() {
        // K = 8 input columns, N = 2 outputs, one group. Column 0's codes are
        // 0..8 (low nibble first); column 1's are all 15.
        let col0 = (0..8u32).fold(0, |w, k| w | (k << (4 * k)));
        let qweight = [col0, u32::MAX];
        // Stored zeros 7 (column 0) and 15 (column 1): v1 reads 8 and 16.
        let zeros = [7 | (15 << 4)];
        let scales = [0.5f32, 2.0];
        let groups = [0u32; 8];
        let runs = crate::cast::simd::int4_runs(&groups);
        let p = piece((0, 2), &qweight, &zeros, &scales, &groups, &runs);
        let mut out = [0f32; 16];
        let v1 = Packing {
            bits: 4,
            zero_offset: 1,
        };
        rows(&p, v1, Dtype::F16, &mut out);
        assert_eq!(&out[..8], &[-4.0, -3.5, -3.0, -2.5, -2.0, -1.5, -1.0, -0.5]);
        assert_eq!(&out[8..], &[-2.0; 8]);
        let v2 = Packing {
            bits: 4,
            zero_offset: 0,
        };
        rows(&p, v2, Dtype::F16, &mut out);
        assert_eq!(out[0], -3.5);
        assert_eq!(out[8], 0.0);
        assert_eq!(out[9], 0.0);
    }
}
