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
    let tiling = super::fp8::Tiling {
        rows: block,
        cols: block,
    };
    let s = super::fp8::Scales {
        values: scales,
        cols: cols.div_ceil(block as usize),
        tiling,
        dtype: scale_dtype,
    };
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
    let tiling = super::fp8::Tiling {
        rows: block,
        cols: block,
    };
    let s = super::fp8::Scales {
        values: scales,
        cols: cols.div_ceil(block as usize),
        tiling,
        dtype: scale_dtype,
    };
    super::fp8::rows_into(codes, cols, 0, &s, to, &mut Vec::new(), out);
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
