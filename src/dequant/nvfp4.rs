//! NVFP4: E2M1 codes packed two a byte (low nibble first), an E4M3 scale
//! per 16 codes along a row, and a per-tensor f32 scale. Two writers, two
//! sets of arithmetic:
//!
//! - NVIDIA ModelOpt (`weight`, `weight_scale`, `weight_scale_2`;
//!   `NVFP4QTensor.dequantize`): the code from an f32 table (code 8 is
//!   +0), times `f32(weight_scale) * weight_scale_2`, in f32.
//! - compressed-tensors (`weight_packed`, `weight_scale`,
//!   `weight_global_scale`; `NVFP4PackedCompressor.decompress`): the code as
//!   `table[magnitude] * (-1 if sign)` (code 8 is -0), times
//!   `weight_scale / weight_global_scale` (an f32 quotient when the global
//!   scale has a dimension, as stored; BF16 when it is a scalar), in f32,
//!   returned as BF16.

use crate::Dtype;

/// E2M1 magnitudes.
const E2M1: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Whose arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    /// ModelOpt: scale times the per-tensor scale.
    ModelOpt,
    /// compressed-tensors: scale over the global scale, its quotient stored as `quotient`.
    CompressedTensors {
        /// The quotient's dtype (F32, or BF16 for a 0-dim global scale).
        quotient: Dtype,
    },
}

fn code(variant: Variant, nibble: u8) -> f32 {
    let magnitude = E2M1[usize::from(nibble & 7)];
    match (variant, nibble & 8 != 0) {
        (_, false) => magnitude,
        (Variant::ModelOpt, true) if magnitude == 0.0 => 0.0,
        (_, true) => -magnitude,
    }
}

/// Dequantizes whole rows of `cols` values: `packed` is their `cols / 2`
/// bytes each, `scales` their `cols / 16` E4M3 scales each (decoded).
pub(crate) fn rows(
    packed: &[u8],
    cols: usize,
    scales: &[f32],
    global: f32,
    variant: Variant,
    out: &mut [f32],
) {
    let per_row = cols / 16;
    for ((row, out_row), srow) in packed
        .chunks_exact(cols / 2)
        .zip(out.chunks_exact_mut(cols))
        .zip(scales.chunks_exact(per_row.max(1)))
    {
        for (c, o) in out_row.iter_mut().enumerate() {
            let byte = row[c / 2];
            let nibble = if c % 2 == 0 { byte & 0xf } else { byte >> 4 };
            let s = srow[c / 16];
            *o = match variant {
                Variant::ModelOpt => code(variant, nibble) * (s * global),
                Variant::CompressedTensors { quotient } => {
                    let q = super::arith::stored_as(quotient, s / global);
                    super::arith::stored_as(Dtype::BF16, code(variant, nibble) * q)
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_nibble_first_and_the_sign_of_zero() {
        // Codes 0x1 (0.5) then 0x8 (-0 or +0), 0xf (-6) then 0x7 (6).
        let packed = [0x81, 0x7f];
        let scales = [2.0f32];
        let mut out = [0f32; 16];
        let mut packed16 = [0u8; 8];
        packed16[..2].copy_from_slice(&packed);
        rows(&packed16, 16, &scales, 0.5, Variant::ModelOpt, &mut out);
        assert_eq!(&out[..4], &[0.5, 0.0, -6.0, 6.0]);
        assert!(out[1].is_sign_positive());
        let ct = Variant::CompressedTensors {
            quotient: Dtype::F32,
        };
        rows(&packed16, 16, &scales, 0.5, ct, &mut out);
        assert_eq!(&out[..4], &[2.0, 0.0, -24.0, 24.0]);
        assert!(out[1].is_sign_negative());
    }
}
