//! Dequantization kernels: quantized blocks in, full-precision elements out.
//!
//! One rule for every scheme (`shared/design.md`, "Dequantization"): an
//! element is the exact real value the scheme defines, computed in float32
//! (as gguf-py does; the products of the schemes' scales and codes are exact
//! there), then rounded once, to nearest even, to the output dtype by
//! [`store_f32`]. It never rounds twice.
//!
//! The kernels are pure: bytes of blocks in, `f32`s out. Sources read a
//! bounded run of blocks, call a kernel, and hand the result through
//! [`store_f32`] to the element pipeline.

pub(crate) mod arith;
pub(crate) mod awq;
pub(crate) mod bnb;
pub(crate) mod fp8;
pub(crate) mod ggml;
pub(crate) mod gptq;
pub(crate) mod mxfp4;
pub(crate) mod nvfp4;
pub(crate) mod packed;

use crate::Dtype;

/// Writes `values` as `to` (F32, F16 or BF16), little-endian, into `out`,
/// rounding each to nearest even once. `out` is `values.len() * width` bytes.
pub(crate) fn store_f32(values: &[f32], to: Dtype, out: &mut [u8]) {
    match to {
        Dtype::F32 => {
            for (v, o) in values.iter().zip(out.chunks_exact_mut(4)) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        Dtype::BF16 => {
            for (v, o) in values.iter().zip(out.chunks_exact_mut(2)) {
                o.copy_from_slice(&crate::cast::f32_to_bf16(v.to_bits()).to_le_bytes());
            }
        }
        Dtype::F16 => {
            for (v, o) in values.iter().zip(out.chunks_exact_mut(2)) {
                o.copy_from_slice(&crate::cast::f32_to_f16(v.to_bits()).to_le_bytes());
            }
        }
        other => unreachable!("dequantized weights are F32, F16 or BF16, not {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_once_to_nearest_even() {
        // 1 + 2^-8 lies halfway between 1.0 and the next BF16 (1 + 2^-7): the tie
        // goes to the even one, 1.0. 1 + 3 * 2^-8 is a tie too, and goes up to 1 + 2^-6.
        let values = [
            1.0f32 + f32::powi(2.0, -8),
            1.0 + 3.0 * f32::powi(2.0, -8),
            -2.5,
        ];
        let mut out = [0u8; 6];
        store_f32(&values, Dtype::BF16, &mut out);
        let got: Vec<u16> = out
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(got, vec![0x3f80, 0x3f82, 0xc020]);
        let mut out = [0u8; 12];
        store_f32(&values, Dtype::F32, &mut out);
        assert_eq!(&out[8..], &(-2.5f32).to_le_bytes());
        let mut out = [0u8; 6];
        store_f32(&values, Dtype::F16, &mut out);
        assert_eq!(u16::from_le_bytes([out[4], out[5]]), 0xc100);
    }
}
