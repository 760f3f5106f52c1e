//! ggml's block types: which exist, how big their blocks are, and the
//! kernels that turn a run of blocks into `f32`s.
//!
//! Every kernel computes what gguf-py 0.19's `gguf.quants.dequantize` does,
//! operation for operation in float32 (a product, then a sum, each rounded
//! once, never fused), so the results are bit-identical; the caller rounds
//! them once more, to the output dtype, with [`super::store_f32`]. For the
//! two types gguf-py cannot dequantize, Q8_K and Q1_0, the kernels compute
//! what ggml's C reference (`dequantize_row_q8_K`, `dequantize_row_q1_0`)
//! does. Q8_1, which neither dequantizes, is refused by name.
//!
//! Block fields are little-endian whatever the file's byte order: gguf-py
//! writes and reads quantized tensors as plain bytes.

mod codebook;
mod fp4;
mod grids;
mod iq4;
mod kquants;
mod legacy;
mod ternary;

use crate::Dtype;

/// Elements in a super-block of the K-quants and their successors.
pub(crate) const QK_K: usize = 256;

/// What a ggml tensor type is to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Stored as plain elements of this dtype.
    Plain(Dtype),
    /// Blocks dequantized by [`GgmlType::dequantize`].
    Quantized,
    /// A type we do not read, and why.
    Refused(&'static str),
}

/// A ggml tensor type (`ggml_type`), by its id in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GgmlType {
    /// Its id in the file.
    pub(crate) id: u32,
    /// Its name in ggml (`Q4_K`).
    pub(crate) name: &'static str,
    /// Elements per block (1 for plain types).
    pub(crate) block_elems: u64,
    /// Bytes per block.
    pub(crate) block_bytes: u64,
    /// How we read it.
    pub(crate) kind: Kind,
}

const NO_REFERENCE: &str = "neither gguf-py 0.19 nor ggml dequantizes it (ggml uses it only \
     inside dot products), so there is no reference to check a kernel against";

/// Every type ggml and gguf-py 0.19 define, with gguf-py's block sizes.
const TYPES: &[GgmlType] = &[
    plain(0, "F32", Dtype::F32),
    plain(1, "F16", Dtype::F16),
    quant(2, "Q4_0", 32, 18),
    quant(3, "Q4_1", 32, 20),
    quant(6, "Q5_0", 32, 22),
    quant(7, "Q5_1", 32, 24),
    quant(8, "Q8_0", 32, 34),
    refused(9, "Q8_1", 32, 40, NO_REFERENCE),
    quant(10, "Q2_K", 256, 84),
    quant(11, "Q3_K", 256, 110),
    quant(12, "Q4_K", 256, 144),
    quant(13, "Q5_K", 256, 176),
    quant(14, "Q6_K", 256, 210),
    quant(15, "Q8_K", 256, 292),
    quant(16, "IQ2_XXS", 256, 66),
    quant(17, "IQ2_XS", 256, 74),
    quant(18, "IQ3_XXS", 256, 98),
    quant(19, "IQ1_S", 256, 50),
    quant(20, "IQ4_NL", 32, 18),
    quant(21, "IQ3_S", 256, 110),
    quant(22, "IQ2_S", 256, 82),
    quant(23, "IQ4_XS", 256, 136),
    plain(24, "I8", Dtype::I8),
    plain(25, "I16", Dtype::I16),
    plain(26, "I32", Dtype::I32),
    plain(27, "I64", Dtype::I64),
    plain(28, "F64", Dtype::F64),
    quant(29, "IQ1_M", 256, 56),
    plain(30, "BF16", Dtype::BF16),
    quant(34, "TQ1_0", 256, 54),
    quant(35, "TQ2_0", 256, 66),
    quant(39, "MXFP4", 32, 17),
    quant(40, "NVFP4", 64, 36),
    quant(41, "Q1_0", 128, 18),
];

const fn plain(id: u32, name: &'static str, dtype: Dtype) -> GgmlType {
    let width = match dtype.byte_width() {
        Some(w) => w,
        None => 1,
    };
    GgmlType {
        id,
        name,
        block_elems: 1,
        block_bytes: width,
        kind: Kind::Plain(dtype),
    }
}

const fn quant(id: u32, name: &'static str, elems: u64, bytes: u64) -> GgmlType {
    GgmlType {
        id,
        name,
        block_elems: elems,
        block_bytes: bytes,
        kind: Kind::Quantized,
    }
}

const fn refused(
    id: u32,
    name: &'static str,
    elems: u64,
    bytes: u64,
    why: &'static str,
) -> GgmlType {
    GgmlType {
        id,
        name,
        block_elems: elems,
        block_bytes: bytes,
        kind: Kind::Refused(why),
    }
}

impl GgmlType {
    /// The type of id `id`, if ggml defines one.
    pub(crate) fn from_id(id: u32) -> Option<GgmlType> {
        TYPES.iter().copied().find(|t| t.id == id)
    }

    /// Every type, for tests and listings.
    #[cfg(test)]
    pub(crate) fn all() -> &'static [GgmlType] {
        TYPES
    }

    /// Dequantizes whole blocks: `blocks` is a multiple of
    /// [`GgmlType::block_bytes`], `out` holds [`GgmlType::block_elems`] per block.
    pub(crate) fn dequantize(&self, blocks: &[u8], out: &mut [f32]) {
        if self.dequantize_vector(blocks, out) {
            return;
        }
        let kernel: fn(&[u8], &mut [f32]) = match self.name {
            "Q4_0" => legacy::q4_0,
            "Q4_1" => legacy::q4_1,
            "Q5_0" => legacy::q5_0,
            "Q5_1" => legacy::q5_1,
            "Q8_0" => legacy::q8_0,
            "Q8_K" => legacy::q8_k,
            "Q1_0" => legacy::q1_0,
            "Q2_K" => kquants::q2_k,
            "Q3_K" => kquants::q3_k,
            "Q4_K" => kquants::q4_k,
            "Q5_K" => kquants::q5_k,
            "Q6_K" => kquants::q6_k,
            "IQ2_XXS" => codebook::iq2_xxs,
            "IQ2_XS" => codebook::iq2_xs,
            "IQ2_S" => codebook::iq2_s,
            "IQ3_XXS" => codebook::iq3_xxs,
            "IQ3_S" => codebook::iq3_s,
            "IQ1_S" => codebook::iq1_s,
            "IQ1_M" => codebook::iq1_m,
            "IQ4_NL" => iq4::iq4_nl,
            "IQ4_XS" => iq4::iq4_xs,
            "TQ1_0" => ternary::tq1_0,
            "TQ2_0" => ternary::tq2_0,
            "MXFP4" => fp4::mxfp4,
            "NVFP4" => fp4::nvfp4,
            other => unreachable!("{other} is not a quantized type with a kernel"),
        };
        let (bb, be) = (self.block_bytes as usize, self.block_elems as usize);
        debug_assert_eq!(blocks.len() / bb * be, out.len());
        for (block, out) in blocks.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
            kernel(block, out);
        }
    }
}

/// Elements a step of [`GgmlType::dequantize_into`] holds as `f32`: 32
/// KiB, in the core's fastest cache between the kernel and the store.
const STEP: usize = 8192;

impl GgmlType {
    /// [`GgmlType::dequantize`], stored as `to` (F32, F16 or BF16)
    /// straight into `out`, a few blocks at a time through `scratch`, so
    /// that the `f32`s never leave the cache: the same bytes as
    /// [`GgmlType::dequantize`] then [`super::store_f32`] of it all.
    pub(crate) fn dequantize_into(
        &self,
        blocks: &[u8],
        to: Dtype,
        scratch: &mut Vec<f32>,
        out: &mut [u8],
    ) {
        let (bb, be) = (self.block_bytes as usize, self.block_elems as usize);
        let per = (STEP / be).max(1);
        let width = (to.bits() / 8) as usize;
        let steps = blocks
            .chunks(per * bb)
            .zip(out.chunks_mut(per * be * width));
        for (blocks, out) in steps {
            scratch.clear();
            scratch.resize(blocks.len() / bb * be, 0.0);
            self.dequantize(blocks, scratch);
            super::store_f32(scratch, to, out);
        }
    }

    /// [`GgmlType::dequantize`] on the vector path of this thread, if it
    /// has one for this type (bit-identical to the kernels here); false if
    /// not, and nothing was written.
    fn dequantize_vector(&self, blocks: &[u8], out: &mut [f32]) -> bool {
        use crate::cast::simd;
        match self.name {
            "Q4_0" => simd::q4_0(blocks, out),
            "Q8_0" => simd::q8_0(blocks, out),
            "Q4_K" => simd::q4_k(blocks, out, kquants::scales_4_5),
            "Q5_K" => simd::q5_k(blocks, out, kquants::scales_4_5),
            "Q6_K" => simd::q6_k(blocks, out),
            "IQ4_XS" => simd::iq4_xs(blocks, out, &iq4::KVALUES),
            _ => false,
        }
    }
}

/// The f16 at `at` (little-endian), exactly as f32.
fn f16_at(block: &[u8], at: usize) -> f32 {
    f16_from_bits(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// The f16 of bits `h`, exactly as f32.
fn f16_from_bits(h: u16) -> f32 {
    f32::from_bits(crate::cast::f16_to_f32(h))
}

/// Writes `f` of each nibble of `qs` as ggml packs Q4_0: the low nibbles
/// of `qs` are the first `qs.len()` elements, the high ones the next.
#[inline(always)]
fn nibbles(qs: &[u8], out: &mut [f32], f: impl Fn(u8) -> f32) {
    let (low, high) = out.split_at_mut(qs.len());
    for ((q, lo), hi) in qs.iter().zip(low).zip(high) {
        *lo = f(q & 0x0f);
        *hi = f(q >> 4);
    }
}

#[cfg(test)]
mod tests;
