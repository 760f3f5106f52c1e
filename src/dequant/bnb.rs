//! bitsandbytes LLM.int8 weights: `weight` int8 `[out, in]` and `SCB`, one
//! f32 absmax per row. The library (`int8_vectorwise_dequant`) computes
//! `A * SCB[row] * 7.874015718698502e-3` in f32, left to right, each product
//! rounded to f32: so do we (the first product is not exact in f32 in
//! general, so the order matters).

/// The reciprocal of 127 as the library multiplies by it: its Python float,
/// cast to f32 (an f32 tensor times a Python float multiplies in f32).
const INV_127: f32 = 7.874_015_718_698_502e-3_f64 as f32;

/// Dequantizes rows of `cols` int8 codes, `scb[i]` the absmax of row `i`.
pub(crate) fn int8_rows(codes: &[u8], cols: usize, scb: &[f32], out: &mut [f32]) {
    for ((row, o), &s) in codes
        .chunks_exact(cols)
        .zip(out.chunks_exact_mut(cols))
        .zip(scb)
    {
        for (&c, v) in row.iter().zip(o) {
            *v = f32::from(c as i8) * s * INV_127;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp4_code_8_is_negative_zero() {
        let code = FourBitType::Fp4.code(8);
        assert!(code == 0.0 && code.is_sign_negative());
        assert!(FourBitType::Fp4.code(0).is_sign_positive());
        let mut out = [1f32; 2];
        let p = FourBit {
            kind: FourBitType::Fp4,
            packed: &[0x80],
            first: 0,
            absmax: &[3.0],
            blocksize: 64,
            dtype: crate::Dtype::BF16,
        };
        four_bit(&p, &mut out);
        assert_eq!(out[0].to_bits(), (-0.0f32).to_bits());
        assert_eq!(out[1].to_bits(), 0);
    }

    /// Every byte (every pair of codes), both code books, absmax values
    /// at every corner (signed zeros, subnormals, overflow, infinities,
    /// NaNs), each output dtype, runs from even and odd elements across
    /// blocks that leave tails: every path bit for bit the reference.
    #[test]
    fn every_code_pair_under_every_absmax_on_every_path() {
        use crate::cast::simd::{with_isa, Isa};
        use crate::Dtype;
        let packed: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let corners = [
            0x0000_0000u32,
            0x8000_0000,
            0x0000_0001,
            0x3f80_0000,
            0xbfab_cdef,
            0x7f7f_ffff,
            0x7f80_0000,
            0x7fc0_0001,
            0xff80_0001,
            0x3a83_126f,
            0x4480_0000,
            0x0080_0000,
        ];
        let absmax: Vec<f32> = (0..1100u32)
            .map(|i| match corners.get(i as usize % 24) {
                Some(&c) => f32::from_bits(c),
                None => f32::from_bits(i.wrapping_mul(0x9e37_79b9)),
            })
            .collect();
        for kind in [FourBitType::Nf4, FourBitType::Fp4] {
            for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
                for blocksize in [1u64, 3, 8, 64, 256] {
                    for first in [0u64, 1, 6] {
                        // Elements from `first` to the packed bytes' end
                        // (`packed` from byte `first / 2` on).
                        let len = packed.len() * 2 - first as usize % 2;
                        let p = FourBit {
                            kind,
                            packed: &packed,
                            first,
                            absmax: &absmax,
                            blocksize,
                            dtype,
                        };
                        let run = |isa| {
                            let mut out = vec![0f32; len];
                            with_isa(isa, || four_bit(&p, &mut out));
                            out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                        };
                        let want = run(Isa::Scalar);
                        for isa in Isa::available() {
                            assert!(
                                run(isa) == want,
                                "{isa:?} {kind:?} {dtype} blocks of {blocksize} from {first}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Steps of any length from an odd element, across blocks: the bytes
    /// of the whole run dequantized then stored.
    #[test]
    fn steps_store_what_the_run_is() {
        use crate::Dtype;
        let packed: Vec<u8> = (0..1024u32)
            .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 7) as u8)
            .collect();
        let absmax: Vec<f32> = (0..40).map(|i| 0.03 * i as f32 - 0.5).collect();
        let p = FourBit {
            kind: FourBitType::Nf4,
            packed: &packed,
            first: 65,
            absmax: &absmax,
            blocksize: 64,
            dtype: Dtype::BF16,
        };
        let mut values = vec![0f32; 2047];
        four_bit(&p, &mut values);
        for to in [Dtype::F32, Dtype::BF16, Dtype::F16] {
            let width = (to.bits() / 8) as usize;
            let mut want = vec![0u8; values.len() * width];
            crate::dequant::store_f32(&values, to, &mut want);
            for step in [1, 300, 8192] {
                let mut got = vec![0u8; want.len()];
                four_bit_steps(&p, to, step, &mut Vec::new(), &mut got);
                assert!(got == want, "{to} in steps of {step}");
            }
        }
    }

    /// Stored straight from the registers (whole blocks from a block's
    /// start) and the rest after: every code pair, every corner absmax,
    /// each scales' dtype and output dtype, from a block's start or not,
    /// ending inside a block, on every path: the scalar reference's
    /// values stored after, byte for byte.
    #[test]
    fn stored_blocks_on_every_path_are_the_reference_stored() {
        use crate::cast::simd::{with_isa, Isa};
        use crate::Dtype;
        let packed: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let absmax: Vec<f32> = (0..600u32)
            .map(|i| match i % 9 {
                0 => f32::from_bits(0x7fc0_0001 | (i << 31)),
                1 => f32::from_bits(0x7f7f_ffff),
                2 => f32::from_bits(0x0000_0003),
                3 => -0.0,
                4 => f32::INFINITY,
                _ => f32::from_bits(i.wrapping_mul(0x9e37_79b9) & 0xbfff_ffff),
            })
            .collect();
        for kind in [FourBitType::Nf4, FourBitType::Fp4] {
            for dtype in [Dtype::F32, Dtype::BF16, Dtype::F16] {
                for (blocksize, first) in
                    [(16u64, 0u64), (64, 0), (64, 128), (256, 0), (64, 6), (8, 0)]
                {
                    let len = packed.len() * 2 - first as usize - 22;
                    let p = FourBit {
                        kind,
                        packed: &packed[first as usize / 2..],
                        first,
                        absmax: &absmax[(first / blocksize) as usize..],
                        blocksize,
                        dtype,
                    };
                    let mut values = vec![0f32; len];
                    with_isa(Isa::Scalar, || four_bit(&p, &mut values));
                    for to in [Dtype::F32, Dtype::BF16, Dtype::F16] {
                        let width = (to.bits() / 8) as usize;
                        let mut want = vec![0u8; len * width];
                        crate::dequant::store_f32(&values, to, &mut want);
                        for isa in Isa::available() {
                            let mut got = vec![0u8; want.len()];
                            with_isa(isa, || four_bit_into(&p, to, &mut Vec::new(), &mut got));
                            assert!(
                                got == want,
                                "{isa:?} {kind:?} {dtype} -> {to}, blocks of {blocksize} from {first}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn scales_each_row_by_its_absmax_over_127() {
        let mut out = [0f32; 4];
        int8_rows(&[127, 0x81, 127, 1], 2, &[1.0, 127.0], &mut out);
        assert_eq!(out[0], 127.0 * INV_127);
        assert_eq!(out[1], -127.0 * INV_127);
        assert_eq!(out[2], 127.0 * 127.0 * INV_127);
        assert_eq!(out[3], 127.0 * INV_127);
    }
}

/// bitsandbytes' NF4 code book (`get_4bit_type("nf4")`), as f32 bits: the
/// library dequantizes with its own table, not the `quant_map` stored in
/// the file.
const NF4: [u32; 16] = [
    0xbf800000, 0xbf3239b1, 0xbf066b30, 0xbeca32a0, 0xbe91a24d, 0xbe3d353f, 0xbdba7871, 0x00000000,
    0x3da2faff, 0x3e24cae3, 0x3e7c04dd, 0x3ead033a, 0x3ee1a4b8, 0x3f1007ab, 0x3f3913b3, 0x3f800000,
];

/// bitsandbytes' FP4 code book (`get_4bit_type("fp4")`), as f32 bits.
/// Code `0b1000` is -0.0: the CUDA kernel and the scalar CPU path compute
/// `sign * 0.0` (only the AVX-512 CPU path and the torch reference give +0.0).
const FP4: [u32; 16] = [
    0x00000000, 0x3baaaaab, 0x3f2aaaab, 0x3f800000, 0x3eaaaaab, 0x3f000000, 0x3e2aaaab, 0x3e800000,
    0x80000000, 0xbbaaaaab, 0xbf2aaaab, 0xbf800000, 0xbeaaaaab, 0xbf000000, 0xbe2aaaab, 0xbe800000,
];

/// Which 4-bit code book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FourBitType {
    /// NormalFloat 4.
    Nf4,
    /// bitsandbytes' FP4.
    Fp4,
}

impl FourBitType {
    /// The code book's values.
    fn book(self) -> [f32; 16] {
        let table = match self {
            FourBitType::Nf4 => &NF4,
            FourBitType::Fp4 => &FP4,
        };
        table.map(f32::from_bits)
    }

    fn code(self, nibble: u8) -> f32 {
        let table = match self {
            FourBitType::Nf4 => &NF4,
            FourBitType::Fp4 => &FP4,
        };
        f32::from_bits(table[usize::from(nibble & 0xf)])
    }
}

/// A run of a 4-bit weight's elements and the absmax values that cover them.
pub(crate) struct FourBit<'a> {
    /// The code book.
    pub kind: FourBitType,
    /// The packed bytes from byte `first / 2` on (two codes a byte, high nibble first).
    pub packed: &'a [u8],
    /// The flat index of the first element.
    pub first: u64,
    /// Absmax values from block `first / blocksize` on.
    pub absmax: &'a [f32],
    /// Elements per absmax.
    pub blocksize: u64,
    /// The dtype the library returns (`quant_state.dtype`): each product is rounded to it.
    pub dtype: crate::Dtype,
}

/// Dequantizes `out.len()` elements from `p.first`: the library's
/// `code[q] * absmax[block]` in f32, returned as `p.dtype`. An absmax
/// block at a time: its whole runs of 8 on the vector path of this thread
/// (bit-identical), the rest as below, the reference.
pub(crate) fn four_bit(p: &FourBit, out: &mut [f32]) {
    let byte0 = p.first / 2;
    let block0 = p.first / p.blocksize;
    let book = p.kind.book();
    let mut i = 0;
    while i < out.len() {
        let e = p.first + i as u64;
        let block = e / p.blocksize;
        let absmax = p.absmax[(block - block0) as usize];
        let end = ((block + 1) * p.blocksize - p.first).min(out.len() as u64) as usize;
        if e % 2 == 0 {
            let bytes = &p.packed[(e / 2 - byte0) as usize..];
            i += crate::cast::simd::four_bit(&book, bytes, absmax, p.dtype, &mut out[i..end]);
        }
        for (j, o) in out[i..end].iter_mut().enumerate() {
            let e = p.first + (i + j) as u64;
            let byte = p.packed[(e / 2 - byte0) as usize];
            let nibble = if e % 2 == 0 { byte >> 4 } else { byte & 0xf };
            *o = super::arith::stored_as(p.dtype, p.kind.code(nibble) * absmax);
        }
        i = end;
    }
}

/// [`four_bit`], stored as `to` straight into `out` (`to` elements), a few
/// thousand at a time through `scratch`, so that the `f32`s never leave
/// the cache: the same bytes as [`four_bit`] then [`super::store_f32`].
pub(crate) fn four_bit_into(p: &FourBit, to: crate::Dtype, scratch: &mut Vec<f32>, out: &mut [u8]) {
    let width = (to.bits() / 8) as usize;
    // From a block's start on the vector path: whole blocks straight from
    // the registers, no `f32` step.
    let done = match p.first % p.blocksize.max(1) {
        0 => crate::cast::simd::four_bit_as(
            &p.kind.book(),
            p.packed,
            p.absmax,
            usize::try_from(p.blocksize).unwrap_or(0),
            p.dtype,
            to,
            out,
        ),
        _ => 0,
    };
    let first = p.first + done as u64;
    let rest = FourBit {
        packed: &p.packed[done / 2..],
        first,
        absmax: &p.absmax[(first / p.blocksize - p.first / p.blocksize) as usize..],
        ..*p
    };
    four_bit_steps(&rest, to, 8192, scratch, &mut out[done * width..]);
}

/// [`four_bit_into`] in steps of `step` elements.
fn four_bit_steps(
    p: &FourBit,
    to: crate::Dtype,
    step: usize,
    scratch: &mut Vec<f32>,
    out: &mut [u8],
) {
    let width = (to.bits() / 8) as usize;
    for (k, out) in out.chunks_mut(step * width).enumerate() {
        let first = p.first + (k * step) as u64;
        let part = FourBit {
            packed: &p.packed[(first / 2 - p.first / 2) as usize..],
            first,
            absmax: &p.absmax[(first / p.blocksize - p.first / p.blocksize) as usize..],
            ..*p
        };
        scratch.clear();
        scratch.resize(out.len() / width, 0.0);
        four_bit(&part, scratch);
        super::store_f32(scratch, to, out);
    }
}

/// Nested statistics: absmax block `first + i` is
/// `nested_code[codes[i]] * nested_absmax[(first + i) / nested_blocksize] + offset`,
/// in f32, as the library's `dequantize_blockwise` then `absmax += offset`.
pub(crate) fn nested_absmax(
    codes: &[u8],
    first: u64,
    nested_code: &[f32],
    nested_absmax: &[f32],
    nested_blocksize: u64,
    offset: f32,
) -> Vec<f32> {
    let group0 = first / nested_blocksize;
    codes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let g = (first + i as u64) / nested_blocksize - group0;
            nested_code[usize::from(c)] * nested_absmax[g as usize] + offset
        })
        .collect()
}
