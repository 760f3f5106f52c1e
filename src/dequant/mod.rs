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
#[cfg(feature = "internals")]
pub mod bench;
pub(crate) mod bnb;
pub(crate) mod fp8;
pub(crate) mod ggml;
pub(crate) mod gptq;
pub(crate) mod mxfp4;
pub(crate) mod nvfp4;
pub(crate) mod packed;

use crate::cast::simd;
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
        // The vector path of this thread first: whole vectors, bit-identical.
        Dtype::BF16 => {
            let done = simd::f32_to_bf16(bytemuck::cast_slice(values), out).elems;
            let rest = values[done..]
                .iter()
                .zip(out[2 * done..].chunks_exact_mut(2));
            for (v, o) in rest {
                o.copy_from_slice(&crate::cast::f32_to_bf16(v.to_bits()).to_le_bytes());
            }
        }
        Dtype::F16 => {
            let done = simd::f32_to_f16(bytemuck::cast_slice(values), out).elems;
            let rest = values[done..]
                .iter()
                .zip(out[2 * done..].chunks_exact_mut(2));
            for (v, o) in rest {
                o.copy_from_slice(&crate::cast::f32_to_f16(v.to_bits()).to_le_bytes());
            }
        }
        other => unreachable!("dequantized weights are F32, F16 or BF16, not {other}"),
    }
}

/// The tests' xorshift64 generator from a non-zero `seed`: random codes,
/// blocks and scales, the same sequence on every run.
#[cfg(test)]
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
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

    #[test]
    fn every_path_stores_as_the_reference_does() {
        use crate::cast::simd::{with_isa, Isa};
        // Every high half of an f32, low halves at and around the ties, in
        // a length that leaves a tail.
        let values: Vec<f32> = (0..=u16::MAX as u32)
            .flat_map(|hi| [0u32, 0x1000, 0x7fff, 0x8000, 0x8001, 0xffff].map(|lo| hi << 16 | lo))
            .chain([1, 2, 3])
            .map(f32::from_bits)
            .collect();
        for to in [Dtype::BF16, Dtype::F16, Dtype::F32] {
            let run = |isa| {
                let mut out = vec![0u8; values.len() * to.byte_width().unwrap() as usize];
                with_isa(isa, || store_f32(&values, to, &mut out));
                out
            };
            let want = run(Isa::Scalar);
            for isa in Isa::available() {
                assert!(run(isa) == want, "{isa:?} {to}");
            }
        }
    }
}
