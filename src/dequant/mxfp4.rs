//! MXFP4 as gpt-oss ships its MoE experts: `*_blocks` (U8 `[experts, rows,
//! blocks, 16]`, two E2M1 codes a byte, low nibble first, 32 codes a block)
//! and `*_scales` (one E8M0 exponent a block, U8 or `F8_E8M0`).
//!
//! transformers dequantizes them with `convert_moe_packed_tensors`: the code
//! from a BF16 table (code 8 is -0.0), `torch.ldexp` by `scale - 127` (a
//! BF16 tensor times `2.0 ** exponent`, an f32, the product rounded into
//! the BF16 output), then `.transpose(1, 2)`: expert `e`'s `[rows, blocks *
//! 32]` becomes `[blocks * 32, rows]`. Every product is exact in BF16 or
//! overflows to infinity, so the kernel is a table lookup per scale.
//! Scale 0xFF is NaN in the OCP MX spec (transformers makes it 2^128, an
//! infinity): refused by the reader, never decoded.

/// The E2M1 code book, as transformers' `FP4_VALUES`.
const FP4_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Codes per block.
pub(crate) const BLOCK: usize = 32;

/// Bytes per block.
pub(crate) const BLOCK_BYTES: usize = BLOCK / 2;

use super::arith::e8m0_to_f32;

/// For each scale byte, the sixteen codes' values: `code * 2^(e - 127)` in
/// f32, rounded to BF16 (exact, or an infinity past BF16's range).
pub(crate) struct Table(Box<[[f32; 16]; 256]>);

impl Table {
    /// Every scale's row of the table.
    pub(crate) fn new() -> Self {
        let mut t = Box::new([[0f32; 16]; 256]);
        for (e, row) in t.iter_mut().enumerate() {
            // transformers' 2.0 ** (e - 127) in f32: 2^128 is infinity.
            let factor = match e {
                255 => f32::INFINITY,
                _ => e8m0_to_f32(e as u8),
            };
            for (v, code) in row.iter_mut().zip(FP4_VALUES) {
                *v = super::arith::stored_as(crate::Dtype::BF16, code * factor);
            }
        }
        Table(t)
    }
}

/// A band of one expert's blocks: block columns `[g0, g0 + width)` of
/// every one of its `rows` rows.
pub(crate) struct Band<'a> {
    /// `rows * width * 16` bytes, row after row.
    pub blocks: &'a [u8],
    /// `width * rows` scale bytes, block column after block column (the
    /// vector kernel loads 16 rows' scales of a block as one vector).
    pub scales: &'a [u8],
    /// Block columns in the band.
    pub width: usize,
    /// The expert's rows: the output's columns.
    pub rows: usize,
}

/// Writes output rows `[k0, k0 + out.len() / band.rows)` of the expert's
/// transposed weight, `k` counted from the band's first code column: output
/// row `k`, column `r` is code `k` of source row `r`.
pub(crate) fn transposed_rows(band: &Band, table: &Table, k0: usize, out: &mut [f32]) {
    let rows = band.rows;
    // Whole tiles of 8 x 8 on the vector path of this thread.
    let (blocks, scales, width) = (band.blocks, band.scales, band.width);
    if crate::cast::simd::mxfp4_transposed(blocks, scales, width, rows, k0, &table.0, out) {
        return;
    }
    let row_bytes = band.width * BLOCK_BYTES;
    let count = out.len() / rows.max(1);
    // A tile of TILE source rows at a time: each output row's TILE values
    // are one cache line of writes, and the tile's source bytes stay cached
    // from one output row to the next.
    const TILE: usize = 16;
    for rb in (0..rows).step_by(TILE) {
        let re = (rb + TILE).min(rows);
        for i in 0..count {
            let k = k0 + i;
            let (byte, shift, block) = (k / 2, (k % 2) * 4, k / BLOCK);
            let o = &mut out[i * rows + rb..i * rows + re];
            for (v, r) in o.iter_mut().zip(rb..re) {
                let nibble = (band.blocks[r * row_bytes + byte] >> shift) & 0xf;
                let scale = band.scales[block * rows + r];
                *v = table.0[usize::from(scale)][usize::from(nibble)];
            }
        }
    }
}

/// [`transposed_rows`] stored as `to` (F32, BF16 or F16) into `out`: on
/// the vector path straight from the registers, in one call (it loads each
/// row's block once for all the output rows); else 8 output rows at a
/// time through `scratch`, which stays small. The same bytes as
/// [`transposed_rows`] then [`super::store_f32`].
pub(crate) fn transposed_rows_into(
    band: &Band,
    table: &Table,
    k0: usize,
    to: crate::Dtype,
    scratch: &mut Vec<f32>,
    out: &mut [u8],
) {
    let (blocks, scales, width, rows) = (band.blocks, band.scales, band.width, band.rows);
    if crate::cast::simd::mxfp4_transposed_as(blocks, scales, width, rows, k0, to, out) {
        return;
    }
    let row_bytes = rows * (to.bits() / 8) as usize;
    let count = out.len() / row_bytes.max(1);
    for i in (0..count).step_by(8) {
        let n = (count - i).min(8);
        scratch.clear();
        scratch.resize(n * rows, 0.0);
        transposed_rows(band, table, k0 + i, scratch);
        super::store_f32(scratch, to, &mut out[i * row_bytes..(i + n) * row_bytes]);
    }
}

/// compressed-tensors' `mxfp4-pack-quantized` (`MXFP4PackedCompressor`):
/// rows of `cols` codes packed two a byte, low nibble first, an E8M0 scale
/// per 32 along the row, no transpose. The library decodes the scale as
/// `2.0 ** (e - 127)` in BF16 and multiplies in BF16: the same exact values
/// as [`Table`] holds.
pub(crate) fn packed_rows(
    packed: &[u8],
    scales: &[u8],
    cols: usize,
    table: &Table,
    out: &mut [f32],
) {
    let per_row = cols / BLOCK;
    for ((row, srow), o) in packed
        .chunks_exact(cols / 2)
        .zip(scales.chunks_exact(per_row.max(1)))
        .zip(out.chunks_exact_mut(cols))
    {
        // Whole runs of 8 on the vector path of this thread, the rest here.
        let done = crate::cast::simd::mxfp4_row(row, srow, &table.0, o);
        for (c, v) in o.iter_mut().enumerate().skip(done) {
            let nibble = (row[c / 2] >> ((c % 2) * 4)) & 0xf;
            *v = table.0[usize::from(srow[c / BLOCK])][usize::from(nibble)];
        }
    }
}

/// compressed-tensors' `mxfp6-pack-quantized` (`MXFP6PackedCompressor`):
/// rows of `cols` E2M3 codes, four in three bytes (a little-endian 24-bit
/// word, the first code in its low 6 bits), bit 5 the sign (so code 0x20 is
/// -0.0), an E8M0 scale per 32 along the row. The library decodes a code from
/// its table `kE2M3ToFloat` into BF16 (exact), the scale as `2.0 ** (e - 127)`
/// in BF16, and multiplies in BF16: the exact product rounded to BF16.
/// `scales` are checked not to hold 0xFF (NaN).
pub(crate) fn fp6_packed_rows(packed: &[u8], scales: &[u8], cols: usize, out: &mut [f32]) {
    let per_row = cols / BLOCK;
    for ((row, srow), o) in packed
        .chunks_exact(cols / 4 * 3)
        .zip(scales.chunks_exact(per_row.max(1)))
        .zip(out.chunks_exact_mut(cols))
    {
        for (q, (bytes, outs)) in row.chunks_exact(3).zip(o.chunks_exact_mut(4)).enumerate() {
            let word = u32::from(bytes[0]) | u32::from(bytes[1]) << 8 | u32::from(bytes[2]) << 16;
            let factor = e8m0_to_f32(srow[q * 4 / BLOCK]);
            for (j, v) in outs.iter_mut().enumerate() {
                let code = (word >> (6 * j)) & 0x3f;
                let magnitude = E2M3_MAGNITUDES[(code & 0x1f) as usize];
                let value = if code & 0x20 != 0 {
                    -magnitude
                } else {
                    magnitude
                };
                *v = super::arith::stored_as(crate::Dtype::BF16, value * factor);
            }
        }
    }
}

/// E2M3's magnitudes, as compressed-tensors' `kE2M3ToFloat`: `m / 8`
/// (subnormal), then `(1 + m / 8) * 2^e` for `e` in 0..3.
const E2M3_MAGNITUDES: [f32; 32] = {
    let mut t = [0f32; 32];
    let mut i = 0;
    while i < 32 {
        let m = (i % 8) as f32 / 8.0;
        t[i] = match i / 8 {
            0 => m,
            e => (1.0 + m) * (1 << (e - 1)) as f32,
        };
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp6_codes_are_e2m3_with_a_sign_bit() {
        // Codes 0x01 (1/8), 0x08 (1.0), 0x1f (7.5), 0x3f (-7.5) in one word;
        // then 0x20 (-0.0) and three zeros; scale 2^1 for the first 32 columns.
        let word: u32 = 0x01 | 0x08 << 6 | 0x1f << 12 | 0x3f << 18;
        let mut packed = vec![0u8; 24];
        packed[..3].copy_from_slice(&word.to_le_bytes()[..3]);
        packed[3] = 0x20;
        let mut out = [1f32; 32];
        fp6_packed_rows(&packed, &[128], 32, &mut out);
        assert_eq!(out[..4], [0.25, 2.0, 15.0, -15.0]);
        assert!(out[4] == 0.0 && out[4].is_sign_negative());
        assert!(out[5..].iter().all(|v| *v == 0.0 && v.is_sign_positive()));
    }

    /// A second, plain reading of the format: element `[k][r]` of the
    /// transposed expert from the OCP definition of E2M1 and E8M0.
    fn plain(blocks: &[u8], scales: &[u8], width: usize, rows: usize, k: usize, r: usize) -> f32 {
        let byte = blocks[r * width * 16 + k / 2];
        let code = if k % 2 == 0 { byte & 15 } else { byte >> 4 };
        let (sign, exp, man) = (code >> 3, i32::from((code >> 1) & 3), f32::from(code & 1));
        let magnitude = match exp {
            0 => man * 0.5,
            _ => (1.0 + man / 2.0) * 2f32.powi(exp - 1),
        };
        let value = if sign == 1 { -magnitude } else { magnitude };
        let e = i32::from(scales[k / 32 * rows + r]);
        // 2^(e-127) in f64, exact; the product exact in f64, then to f32 and BF16.
        let v = (f64::from(value) * 2f64.powi(e - 127)) as f32;
        f32::from_bits(crate::cast::bf16_to_f32(crate::cast::f32_to_bf16(
            v.to_bits(),
        )))
    }

    /// Random codes of `rows` source rows of `width` blocks, and scale
    /// bytes of every kind.
    fn random_band(
        next: &mut impl FnMut() -> u64,
        rows: usize,
        width: usize,
    ) -> (Vec<u8>, Vec<u8>) {
        let blocks: Vec<u8> = (0..rows * width * 16).map(|_| next() as u8).collect();
        let scales: Vec<u8> = (0..rows * width)
            .map(|i| (i * 37 + next() as usize) as u8)
            .collect();
        (blocks, scales)
    }

    /// Stored straight as each output dtype: tiles of 16 source rows (the
    /// direct kernel's), of 8 (through the f32 tile), ragged ones, and
    /// every code under every scale byte (0xFF included), on every path:
    /// the reference's values stored after, byte for byte.
    #[test]
    fn stored_rows_on_every_path_are_the_reference_stored() {
        use crate::Dtype;
        let table = Table::new();
        let mut next = crate::dequant::xorshift(0x9e37_79b9_7f4a_7c15u64);
        let every: Vec<u8> = (0..256 * 16).map(|i| (i * 7) as u8).collect();
        let every_scale: Vec<u8> = (0..=255).collect();
        let mut cases = vec![(every, every_scale, 256, 1, 0, 32)];
        for (rows, width, k0, count) in [
            (16, 3, 8, 40),
            (32, 2, 56, 8),
            (48, 1, 0, 32),
            (24, 2, 16, 16),
            (16, 2, 3, 16),
            // Longer bands, across several blocks.
            (32, 4, 8, 96),
            (16, 3, 0, 96),
            (48, 4, 40, 88),
            // One call across several blocks from mid-block, as the part
            // reader's pieces of 40 output rows make them; whole tiles
            // then a ragged rest (100 = 96 + 4); a gpt-oss band's width.
            (32, 4, 40, 40),
            (64, 3, 8, 80),
            (32, 4, 8, 100),
            (16, 30, 904, 56),
            (96, 30, 0, 960),
            // Any first row and count: partial words at both ends, within
            // one word, a single row.
            (32, 3, 5, 83),
            (16, 2, 33, 3),
            (48, 2, 7, 1),
            (16, 4, 30, 91),
        ] {
            let (blocks, scales) = random_band(&mut next, rows, width);
            cases.push((blocks, scales, rows, width, k0, count));
        }
        for (blocks, scales, rows, width, k0, count) in &cases {
            let band = Band {
                blocks,
                scales,
                width: *width,
                rows: *rows,
            };
            for to in [Dtype::F32, Dtype::BF16, Dtype::F16] {
                assert_stored_on_every_path(&band, &table, *k0, *count, to);
            }
        }
    }

    /// Output rows `[k0, k0 + count)` of `band` stored as `to` on every
    /// path: the scalar reference's values stored after, byte for byte.
    fn assert_stored_on_every_path(
        band: &Band,
        table: &Table,
        k0: usize,
        count: usize,
        to: crate::Dtype,
    ) {
        use crate::cast::simd::{with_isa, Isa};
        let rows = band.rows;
        let mut values = vec![0f32; count * rows];
        with_isa(Isa::Scalar, || {
            transposed_rows(band, table, k0, &mut values)
        });
        let w = (to.bits() / 8) as usize;
        let mut want = vec![0u8; values.len() * w];
        crate::dequant::store_f32(&values, to, &mut want);
        for isa in Isa::available() {
            let mut got = vec![0u8; want.len()];
            let mut scratch = Vec::new();
            with_isa(isa, || {
                transposed_rows_into(band, table, k0, to, &mut scratch, &mut got)
            });
            assert!(
                got == want,
                "{isa:?} {to} rows {rows} k0 {k0} count {count}"
            );
        }
    }

    /// BF16 by exponent (a tile of 16 rows whose block's scales are all 2
    /// to 252: no float arithmetic) and the float path beside it: tiles
    /// under one scale at or past those limits (subnormal products at 0
    /// and 1, infinities from 253, 0xFF's), tiles of the two limits
    /// alternating, and tiles in range but for one row past them; each
    /// tile every byte of codes, so every code under its scales. Whole
    /// blocks, and pieces starting and ending mid-word: every path the
    /// reference's bytes.
    #[test]
    fn bf16_tiles_at_the_scale_limits_are_the_reference() {
        let table = Table::new();
        let limits = [0u8, 1, 2, 3, 126, 127, 128, 251, 252, 253, 254, 255];
        let mut tiles: Vec<[u8; 16]> = limits.iter().map(|&e| [e; 16]).collect();
        tiles.push(std::array::from_fn(|r| [2, 252][r % 2]));
        for past in [0, 1, 253, 254, 255] {
            let mut tile = [127u8; 16];
            tile[5] = past;
            tiles.push(tile);
        }
        let (rows, width) = (16 * tiles.len(), 2);
        let blocks: Vec<u8> = (0..rows * width * 16).map(|i| i as u8).collect();
        // `[width][rows]`; the second block column's rows turned by 3.
        let mut scales = vec![0u8; width * rows];
        for (i, e) in scales.iter_mut().enumerate() {
            let (j, r) = (i / rows, i % rows);
            *e = tiles[r / 16][(r + 3 * j) % 16];
        }
        let band = Band {
            blocks: &blocks,
            scales: &scales,
            width,
            rows,
        };
        for (k0, count) in [(0, 64), (0, 32), (5, 50), (33, 3), (31, 2), (62, 1), (4, 4)] {
            assert_stored_on_every_path(&band, &table, k0, count, crate::Dtype::BF16);
        }
    }

    /// Whole 8 x 8 tiles (the vector kernel's) and ragged ones, every
    /// scale byte (0xFF included: the table's row, looked up as it is):
    /// every path bit for bit the reference.
    #[test]
    fn tiles_on_every_path_are_the_reference() {
        use crate::cast::simd::{with_isa, Isa};
        let table = Table::new();
        let mut next = crate::dequant::xorshift(0x2545_f491_4f6c_dd1du64);
        for (rows, width, k0, count) in [
            (8, 1, 0, 32),
            (16, 3, 8, 40),
            (24, 2, 56, 8),
            (8, 2, 3, 16),
            (12, 1, 0, 8),
        ] {
            let (blocks, scales) = random_band(&mut next, rows, width);
            let band = Band {
                blocks: &blocks,
                scales: &scales,
                width,
                rows,
            };
            let run = |isa| {
                let mut out = vec![0f32; count * rows];
                with_isa(isa, || transposed_rows(&band, &table, k0, &mut out));
                out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
            };
            let want = run(Isa::Scalar);
            for isa in Isa::available() {
                assert!(run(isa) == want, "{isa:?} rows {rows} k0 {k0}");
            }
        }
        // Every scale byte through the vector tile.
        let blocks: Vec<u8> = (0..256 * 16).map(|i| (i * 7) as u8).collect();
        let scales: Vec<u8> = (0..=255).collect();
        let band = Band {
            blocks: &blocks,
            scales: &scales,
            width: 1,
            rows: 256,
        };
        let run = |isa| {
            let mut out = vec![0f32; 32 * 256];
            with_isa(isa, || transposed_rows(&band, &table, 0, &mut out));
            out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
        };
        let want = run(Isa::Scalar);
        for isa in Isa::available() {
            assert!(run(isa) == want, "{isa:?} every scale");
        }
    }

    #[test]
    fn matches_a_plain_reading_over_random_blocks() {
        let table = Table::new();
        let mut next = crate::dequant::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for _ in 0..50 {
            let rows = 1 + (next() % 9) as usize;
            let width = 1 + (next() % 3) as usize;
            let blocks: Vec<u8> = (0..rows * width * 16).map(|_| next() as u8).collect();
            // Every scale but NaN, the extremes often.
            let scales: Vec<u8> = (0..rows * width)
                .map(|_| match next() % 4 {
                    0 => [0, 1, 126, 127, 128, 253, 254][(next() % 7) as usize],
                    _ => (next() % 255) as u8,
                })
                .collect();
            let band = Band {
                blocks: &blocks,
                scales: &scales,
                width,
                rows,
            };
            let k0 = (next() % (width * 32) as u64) as usize;
            let count = 1 + (next() % (width * 32 - k0) as u64) as usize;
            let mut out = vec![f32::NAN; count * rows];
            transposed_rows(&band, &table, k0, &mut out);
            for i in 0..count {
                for r in 0..rows {
                    let want = plain(&blocks, &scales, width, rows, k0 + i, r);
                    let got = out[i * rows + r];
                    assert_eq!(got.to_bits(), want.to_bits(), "k {} r {r}", k0 + i);
                }
            }
        }
    }

    #[test]
    fn packed_rows_match_a_plain_reading() {
        let table = Table::new();
        let mut next = crate::dequant::xorshift(0x2545_f491_4f6c_dd1du64);
        let (rows, cols) = (5usize, 96usize);
        let packed: Vec<u8> = (0..rows * cols / 2).map(|_| next() as u8).collect();
        let scales: Vec<u8> = (0..rows * cols / 32)
            .map(|_| (next() % 255) as u8)
            .collect();
        let mut out = vec![0f32; rows * cols];
        packed_rows(&packed, &scales, cols, &table, &mut out);
        for r in 0..rows {
            for c in 0..cols {
                // The row as a one-row band of width cols / 32: element [c][0] of its transpose.
                let want = plain(
                    &packed[r * cols / 2..],
                    &scales[r * cols / 32..],
                    cols / 32,
                    1,
                    c,
                    0,
                );
                assert_eq!(out[r * cols + c].to_bits(), want.to_bits(), "{r} {c}");
            }
        }
    }

    /// Every byte (every pair of codes) under every scale byte, rows of
    /// 512 codes (16 blocks): every path bit for bit the reference.
    #[test]
    fn packed_rows_every_code_under_every_scale_on_every_path() {
        use crate::cast::simd::{with_isa, Isa};
        let table = Table::new();
        let (rows, cols) = (16usize, 512usize);
        let packed: Vec<u8> = (0..rows * cols / 2).map(|i| (i * 11 % 256) as u8).collect();
        let scales: Vec<u8> = (0..=255u8).collect();
        let run = |isa| {
            let mut out = vec![0f32; rows * cols];
            with_isa(isa, || {
                packed_rows(&packed, &scales, cols, &table, &mut out)
            });
            out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
        };
        let want = run(Isa::Scalar);
        for isa in Isa::available() {
            assert!(run(isa) == want, "{isa:?}");
        }
    }

    #[test]
    fn low_nibble_first_and_negative_zero() {
        let table = Table::new();
        let mut blocks = [0u8; 16];
        blocks[0] = 0x8f; // code 0 = 0xf (-6), code 1 = 0x8 (-0)
        let band = Band {
            blocks: &blocks,
            scales: &[128],
            width: 1,
            rows: 1,
        };
        let mut out = [0f32; 2];
        transposed_rows(&band, &table, 0, &mut out);
        assert_eq!(out[0], -12.0);
        assert_eq!(out[1].to_bits(), (-0.0f32).to_bits());
    }
}
