//! The dequantization kernels as the benchmarks call them (the
//! `internals` feature only): a piece in, output bytes out, through the
//! same calls the sources make.

use crate::Dtype;

/// FP8 (E4M3) rows of `cols` codes in `block` x `block` tiles, one
/// `scale_dtype` scale each (its values in `scales`, row-major, one row
/// per tile row), stored as `to` in `out`; `values` is the `f32` piece.
#[allow(clippy::too_many_arguments)] // the two calls' arguments, side by side
pub fn fp8_rows(
    codes: &[u8],
    cols: usize,
    scales: &[f32],
    block: u64,
    scale_dtype: Dtype,
    values: &mut [f32],
    to: Dtype,
    out: &mut [u8],
) {
    let s = block_scales(scales, cols, block, scale_dtype);
    super::fp8::rows(codes, cols, 0, &s, values);
    super::store_f32(values, to, out);
}

/// [`fp8_rows`] through `fp8::rows_into`: stored a few rows at a time,
/// the `f32`s kept in cache.
pub fn fp8_rows_into(
    codes: &[u8],
    cols: usize,
    scales: &[f32],
    block: u64,
    scale_dtype: Dtype,
    to: Dtype,
    out: &mut [u8],
) {
    let s = block_scales(scales, cols, block, scale_dtype);
    super::fp8::rows_into(codes, cols, 0, &s, to, &mut Vec::new(), out);
}

/// `scales` of `block` x `block` tiles over a weight of `cols` columns.
fn block_scales(scales: &[f32], cols: usize, block: u64, dtype: Dtype) -> super::fp8::Scales<'_> {
    super::fp8::Scales {
        values: scales,
        cols: cols.div_ceil(block as usize),
        tiling: super::fp8::Tiling {
            rows: block,
            cols: block,
        },
        dtype,
    }
}

/// Whole blocks of the ggml type named `name` (`Q4_K`), dequantized into
/// `values` and stored as `to` in `out`. Panics on a name without a kernel.
pub fn ggml(name: &str, blocks: &[u8], values: &mut [f32], to: Dtype, out: &mut [u8]) {
    let ty = ggml_type(name);
    ty.dequantize(blocks, values);
    super::store_f32(values, to, out);
}

/// [`ggml`] through `GgmlType::dequantize_into`: stored a few blocks at a
/// time, the `f32`s kept in cache.
pub fn ggml_into(name: &str, blocks: &[u8], to: Dtype, out: &mut [u8]) {
    ggml_type(name).dequantize_into(blocks, to, &mut Vec::new(), out);
}

fn ggml_type(name: &str) -> super::ggml::GgmlType {
    (0..64)
        .filter_map(super::ggml::GgmlType::from_id)
        .find(|t| t.name == name)
        .expect("a ggml type of that name")
}

/// Bytes per block and elements per block of the ggml type `name`.
pub fn ggml_block(name: &str) -> (usize, usize) {
    let ty = ggml_type(name);
    (ty.block_bytes as usize, ty.block_elems as usize)
}

/// gpt-oss MXFP4 as the reader runs it on a gpt-oss-120b expert band:
/// `rows` source rows (5760) of `width` blocks (a band of 30), all its
/// `width * 32` output rows made in pieces of `piece` rows (the part
/// reader's 40), each piece through calls of `call` output rows (8 or
/// the piece), stored as BF16 into `out` (a piece's bytes, the copy
/// engine's chunk). `raw` holds the band's `rows * width * 16` bytes.
/// Scales 120 to 132, or with `extreme` one row in 16 at 253 (its large
/// codes overflow to infinity), which keeps every tile on the float path
/// a BF16 output otherwise leaves. Returns the elements made.
pub fn mxfp4_band(
    raw: &[u8],
    (rows, width): (usize, usize),
    (piece, call): (usize, usize),
    extreme: bool,
    out: &mut [u8],
) -> usize {
    let table = super::mxfp4::Table::new();
    let exps: Vec<u8> = (0..rows * width)
        .map(|i| match extreme && i % 16 == 5 {
            true => 253,
            false => 120 + (i % 13) as u8,
        })
        .collect();
    let band = super::mxfp4::Band {
        blocks: &raw[..rows * width * 16],
        scales: &exps,
        width,
        rows,
    };
    let codes = width * 32;
    let mut scratch = Vec::new();
    let mut k = 0;
    while k < codes {
        let end = (k + piece).min(codes);
        let mut c = k;
        while c < end {
            let e = (c + call).min(end);
            let out = &mut out[(c - k) * rows * 2..(e - k) * rows * 2];
            super::mxfp4::transposed_rows_into(&band, &table, c, Dtype::BF16, &mut scratch, out);
            c = e;
        }
        k = end;
    }
    codes * rows
}

/// The 4-bit schemes' kernels on `n` elements of a weight of `cols`
/// columns (`n` a multiple of `cols`, `cols` of 128), from bytes `raw`
/// (codes, words; reused as each scheme needs), dequantized into `values`
/// and stored as BF16 in `out`: `name` is `NF4`, `GPTQ int4`, `AWQ int4`
/// `MXFP4 packed` or `MXFP4 transposed` (gpt-oss). Scales are plain numbers, groups of 128.
pub fn four_bit(name: &str, raw: &[u8], cols: usize, values: &mut [f32], out: &mut [u8]) {
    let n = values.len();
    let rows = n / cols;
    let words: &[u32] = bytemuck::cast_slice(&raw[..raw.len() / 4 * 4]);
    let scales: Vec<f32> = (0..n / 64 + rows).map(|i| 0.25 + (i % 7) as f32).collect();
    match name {
        "NF4" => {
            let p = super::bnb::FourBit {
                kind: super::bnb::FourBitType::Nf4,
                packed: &raw[..n / 2],
                first: 0,
                absmax: &scales,
                blocksize: 64,
                dtype: Dtype::BF16,
            };
            // As the reader runs it: stored as BF16 straight from the kernel.
            super::bnb::four_bit_into(&p, Dtype::BF16, &mut Vec::new(), out);
            return;
        }
        "GPTQ int4" => {
            // `[K / 8][rows]` words, `[K / 128][rows]` scales and zero words.
            let groups: Vec<u32> = (0..cols as u32).map(|k| k / 128).collect();
            let p = super::gptq::Piece {
                n0: 0,
                rows,
                qweight: &words[..cols / 8 * rows],
                zeros: &words[..cols / 128 * rows.div_ceil(8)],
                zero_words: rows.div_ceil(8),
                scales: &scales[..cols / 128 * rows],
                groups: &groups,
                runs: &crate::cast::simd::int4_runs(&groups),
            };
            let packing = super::gptq::Packing {
                bits: 4,
                zero_offset: 1,
            };
            // As the reader runs it: stored as BF16 a few rows at a time.
            let mut scratch = Vec::new();
            super::gptq::rows_into(&p, 0, packing, Dtype::F16, Dtype::BF16, &mut scratch, out);
            return;
        }
        "AWQ int4" => {
            let p = super::awq::Piece {
                n0: 0,
                words: rows.div_ceil(8),
                qweight: &words[..cols * rows.div_ceil(8)],
                zeros: &words[..cols / 128 * rows.div_ceil(8)],
                scales: &scales[..cols / 128 * rows],
                group_size: 128,
                k_len: cols,
            };
            super::awq::rows(&p, Dtype::F16, values);
        }
        "MXFP4 packed" => {
            let table = super::mxfp4::Table::new();
            let exps: Vec<u8> = (0..n / 32).map(|i| 120 + (i % 13) as u8).collect();
            super::mxfp4::packed_rows(&raw[..n / 2], &exps, cols, &table, values);
        }
        "MXFP4 transposed" => {
            // gpt-oss: an expert's band of `cols` source rows of 32-code
            // blocks, `n / cols` output rows of it.
            let table = super::mxfp4::Table::new();
            let width = (n / cols).div_ceil(32);
            let exps: Vec<u8> = (0..cols * width).map(|i| 120 + (i % 13) as u8).collect();
            let band = super::mxfp4::Band {
                blocks: &raw[..cols * width * 16],
                scales: &exps,
                width,
                rows: cols,
            };
            // As the reader runs it: stored as BF16 straight from the kernel.
            super::mxfp4::transposed_rows_into(&band, &table, 0, Dtype::BF16, &mut Vec::new(), out);
            return;
        }
        other => panic!("no 4-bit kernel {other}"),
    }
    super::store_f32(values, Dtype::BF16, out);
}
