//! Element casts applied while streaming: float narrowing and widening,
//! and lossless integer widening.
//!
//! Results are bit-identical to numpy's `astype(np.float16)` and
//! `astype(np.float32)` (its software half conversions keep NaN payloads
//! rather than quieting them; float/double conversions are the hardware's,
//! which quiet them) and to ml_dtypes' bfloat16 (round-to-nearest-even, NaN
//! squashed to a quiet NaN of the same sign; from F64 in one rounding, as
//! ml_dtypes 0.7 does, not by way of F32). Every rounding is to nearest,
//! ties to even; overflow gives infinity.

use crate::Dtype;

/// A cast of every element from one dtype to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cast {
    from: Dtype,
    to: Dtype,
}

/// Why a cast is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot cast {from} to {to}: {reason}")]
pub struct CastError {
    /// The source dtype.
    pub from: Dtype,
    /// The target dtype.
    pub to: Dtype,
    /// Why not.
    pub reason: &'static str,
}

impl Cast {
    /// A cast from `from` to `to`, if it is one we do.
    ///
    /// ```
    /// use safetensors_stream::{plan::Cast, Dtype};
    ///
    /// assert!(Cast::new(Dtype::F32, Dtype::BF16).is_ok());
    /// assert!(Cast::new(Dtype::I64, Dtype::I32).is_err()); // lossy
    /// assert!(Cast::new(Dtype::I32, Dtype::I64).is_ok());
    /// ```
    pub fn new(from: Dtype, to: Dtype) -> Result<Cast, CastError> {
        let refuse = |reason| Err(CastError { from, to, reason });
        if from == to {
            return refuse("it is the same dtype");
        }
        if is_float_kind(from) && is_float_kind(to) {
            return Ok(Cast { from, to });
        }
        if from.is_float() || to.is_float() {
            return refuse(
                "only F64, F32, F16 and BF16 cast among themselves; integers and floats do not mix",
            );
        }
        if int_widens(from, to) {
            return Ok(Cast { from, to });
        }
        refuse("the integer cast could lose values")
    }

    /// The source dtype.
    pub fn from(self) -> Dtype {
        self.from
    }

    /// The target dtype.
    pub fn to(self) -> Dtype {
        self.to
    }

    /// Bytes per input element.
    pub fn in_width(self) -> usize {
        width(self.from)
    }

    /// Bytes per output element.
    pub fn out_width(self) -> usize {
        width(self.to)
    }

    /// Casts `input` (whole elements) into `output`, which must hold
    /// exactly as many elements. Returns how many finite elements became
    /// infinite (too large for the target: F32 65520.0 to F16), counted in
    /// the same pass; 0 for casts that cannot overflow.
    ///
    /// ```
    /// use safetensors_stream::{plan::Cast, Dtype};
    ///
    /// let cast = Cast::new(Dtype::F32, Dtype::F16).unwrap();
    /// let input: Vec<u8> = [1.0f32, 65520.0, -0.0].iter().flat_map(|f| f.to_le_bytes()).collect();
    /// let mut out = vec![0u8; 6];
    /// let overflowed = cast.apply(&input, &mut out);
    /// let halves: Vec<u16> = out.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    /// assert_eq!(halves, [0x3c00, 0x7c00, 0x8000]); // 65520 rounds up to infinity
    /// assert_eq!(overflowed, 1);
    /// ```
    pub fn apply(self, input: &[u8], output: &mut [u8]) -> u64 {
        use Dtype::*;
        debug_assert_eq!(
            input.len() / self.in_width(),
            output.len() / self.out_width()
        );
        // Narrowing casts: an infinite result from a finite input overflowed.
        match (self.from, self.to) {
            (F32, BF16) => narrow::<4, 2>(
                input,
                output,
                |b| f32_to_bf16(u32::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7f80,
                |i| u32::from_le_bytes(i) & 0x7fff_ffff == 0x7f80_0000,
            ),
            (F32, F16) => narrow::<4, 2>(
                input,
                output,
                |b| f32_to_f16(u32::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7c00,
                |i| u32::from_le_bytes(i) & 0x7fff_ffff == 0x7f80_0000,
            ),
            (F64, F32) => narrow::<8, 4>(
                input,
                output,
                |b| (f64::from_le_bytes(b) as f32).to_le_bytes(),
                |o| f32::from_le_bytes(o).is_infinite(),
                |i| f64::from_le_bytes(i).is_infinite(),
            ),
            (F64, BF16) => narrow::<8, 2>(
                input,
                output,
                |b| f64_to_bf16(u64::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7f80,
                |i| f64::from_le_bytes(i).is_infinite(),
            ),
            (F64, F16) => narrow::<8, 2>(
                input,
                output,
                |b| f64_to_f16(u64::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7c00,
                |i| f64::from_le_bytes(i).is_infinite(),
            ),
            (BF16, F16) => narrow::<2, 2>(
                input,
                output,
                |b| bf16_to_f16(u16::from_le_bytes(b)).to_le_bytes(),
                |o| u16::from_le_bytes(o) & 0x7fff == 0x7c00,
                |i| u16::from_le_bytes(i) & 0x7fff == 0x7f80,
            ),
            (from, to) => {
                widen(from, to, input, output);
                0
            }
        }
    }
}

/// The casts that cannot overflow: every value fits.
fn widen(from: Dtype, to: Dtype, input: &[u8], output: &mut [u8]) {
    {
        use Dtype::*;
        match (from, to) {
            (F16, F32) => map::<2, 4>(input, output, |b| {
                f16_to_f32(u16::from_le_bytes(b)).to_le_bytes()
            }),
            (BF16, F32) => map::<2, 4>(input, output, |b| {
                bf16_to_f32(u16::from_le_bytes(b)).to_le_bytes()
            }),
            (F16, F64) => map::<2, 8>(input, output, |b| {
                f16_to_f64(u16::from_le_bytes(b)).to_le_bytes()
            }),
            (BF16, F64) => map::<2, 8>(input, output, |b| {
                (f32::from_bits(bf16_to_f32(u16::from_le_bytes(b))) as f64).to_le_bytes()
            }),
            (F32, F64) => map::<4, 8>(input, output, |b| {
                (f32::from_le_bytes(b) as f64).to_le_bytes()
            }),
            (F16, BF16) => map::<2, 2>(input, output, |b| {
                f32_to_bf16(f16_to_f32(u16::from_le_bytes(b))).to_le_bytes()
            }),
            (from, to) => widen_int(from, to, input, output),
        }
    }
}

fn is_float_kind(d: Dtype) -> bool {
    matches!(d, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::BF16)
}

fn width(d: Dtype) -> usize {
    d.byte_width().unwrap_or(1) as usize
}

fn is_signed(d: Dtype) -> bool {
    matches!(d, Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64)
}

/// Every value of `from` fits in `to`.
fn int_widens(from: Dtype, to: Dtype) -> bool {
    let ints = [
        Dtype::U8,
        Dtype::I8,
        Dtype::U16,
        Dtype::I16,
        Dtype::U32,
        Dtype::I32,
        Dtype::U64,
        Dtype::I64,
    ];
    if !ints.contains(&from) || !ints.contains(&to) {
        return false;
    }
    let (wf, wt) = (width(from), width(to));
    match (is_signed(from), is_signed(to)) {
        (false, false) | (true, true) => wt > wf,
        (false, true) => wt > wf,
        (true, false) => false,
    }
}

/// Element-wise over fixed widths: the shape the optimiser vectorises.
fn map<const I: usize, const O: usize>(
    input: &[u8],
    output: &mut [u8],
    f: impl Fn([u8; I]) -> [u8; O],
) {
    for (i, o) in input.chunks_exact(I).zip(output.chunks_exact_mut(O)) {
        o.copy_from_slice(&f(i.try_into().expect("chunks_exact gives I bytes")));
    }
}

/// Elements per block of [`narrow`]: a block's output stays in L1 for the count.
const NARROW_BLOCK: usize = 2048;

/// [`map`] for a cast that may overflow, returning how many finite inputs
/// became infinite. Block by block: the cast loop as [`map`] (vectorised),
/// then its output, still in L1, is scanned for infinities (a 16-bit
/// compare per element); only a block that holds one scans its input for
/// infinities, which cast to themselves and are not overflows. Far cheaper
/// than counting inside the cast loop, which keeps it from vectorising
/// (`cargo bench --bench kernels`, the cast rows).
fn narrow<const I: usize, const O: usize>(
    input: &[u8],
    output: &mut [u8],
    f: impl Fn([u8; I]) -> [u8; O] + Copy,
    out_infinite: impl Fn([u8; O]) -> bool,
    in_infinite: impl Fn([u8; I]) -> bool,
) -> u64 {
    let mut overflowed = 0u64;
    let blocks = input
        .chunks(NARROW_BLOCK * I)
        .zip(output.chunks_mut(NARROW_BLOCK * O));
    for (ib, ob) in blocks {
        map::<I, O>(ib, ob, f);
        // At most NARROW_BLOCK: a u16 keeps the count's lanes narrow.
        let infinite = ob
            .chunks_exact(O)
            .fold(0u16, |n, o| n + out_infinite(whole(o)) as u16);
        if infinite > 0 {
            let already = ib.chunks_exact(I).filter(|i| in_infinite(whole(i))).count();
            overflowed += u64::from(infinite) - already as u64;
        }
    }
    overflowed
}

/// A `chunks_exact` chunk as an array.
fn whole<const N: usize>(chunk: &[u8]) -> [u8; N] {
    chunk.try_into().expect("chunks_exact gives whole elements")
}

fn widen_int(from: Dtype, to: Dtype, input: &[u8], output: &mut [u8]) {
    let (wi, wo) = (width(from), width(to));
    let signed = is_signed(from);
    for (i, o) in input.chunks_exact(wi).zip(output.chunks_exact_mut(wo)) {
        let negative = signed && i[wi - 1] & 0x80 != 0;
        o[..wi].copy_from_slice(i);
        o[wi..].fill(if negative { 0xff } else { 0 });
    }
}

/// ml_dtypes (Eigen): NaN to a quiet NaN of its sign; else round to nearest even.
pub(crate) fn f32_to_bf16(x: u32) -> u16 {
    if x & 0x7fff_ffff > 0x7f80_0000 {
        return if x & 0x8000_0000 != 0 { 0xffc0 } else { 0x7fc0 };
    }
    let bias = 0x7fff + ((x >> 16) & 1);
    (x.wrapping_add(bias) >> 16) as u16
}

/// ml_dtypes 0.7: straight from F64, one rounding to nearest even (rounding
/// to F32 first would round twice: 1 + 2^-8 + 2^-40 would land on the tie
/// 1 + 2^-8, then go to 1.0); NaN to a quiet NaN of its sign.
pub(crate) fn f64_to_bf16(d: u64) -> u16 {
    let x = f64::from_bits(d);
    if x.is_nan() {
        return if d >> 63 != 0 { 0xffc0 } else { 0x7fc0 };
    }
    // To F32 rounding to odd (toward zero, then set the last bit if anything
    // was dropped): F32 keeps 16 more bits than BF16, normal or subnormal,
    // so rounding that to nearest even gives the single rounding.
    let f = x as f32;
    let mut bits = f.to_bits();
    if f as f64 != x {
        if (f as f64).abs() > x.abs() {
            bits -= 1; // rounded away from zero: step back toward it
        }
        bits |= 1;
    }
    f32_to_bf16(bits)
}

/// ml_dtypes 0.7 (Eigen's half from float): NaN to a quiet NaN of its sign;
/// else as numpy rounds F32 to F16 (the value is exact in F32).
pub(crate) fn bf16_to_f16(h: u16) -> u16 {
    if h & 0x7fff > 0x7f80 {
        return (h & 0x8000) | 0x7e00;
    }
    f32_to_f16(bf16_to_f32(h))
}

/// Exact: bfloat16 is the top half of a float32.
pub(crate) fn bf16_to_f32(h: u16) -> u32 {
    (h as u32) << 16
}

/// numpy's `npy_floatbits_to_halfbits`, with ties to even: the same bits,
/// computed without branches so that the loop vectorises (every path is
/// computed and one is picked).
pub(crate) fn f32_to_f16(f: u32) -> u16 {
    let sign = (f >> 16) as u16 & 0x8000;
    let a = f & 0x7fff_ffff;
    // Normal: add just under half a unit of the last bit kept, plus one if
    // that bit is odd, and drop 13 bits. A carry out of the significand bumps
    // the exponent: the right answer, up to infinity (65520 and above).
    let normal = (a
        .wrapping_sub(112 << 23)
        .wrapping_add(0x0fff + ((a >> 13) & 1))
        >> 13) as u16;
    // Subnormal or zero (below 2^-14): adding 0.5 leaves the value in units
    // of 2^-24, the smallest subnormal, in the low bits, rounded to nearest
    // even by the FPU; 0x400 is the smallest normal, rounded up to.
    let half = f32::from_bits(126 << 23);
    let sub = (f32::from_bits(a) + half).to_bits().wrapping_sub(126 << 23) as u16;
    // NaN: keep the top of the payload, but never become infinity.
    let payload = ((a >> 13) & 0x3ff) as u16;
    let nan = 0x7c00 | payload | (payload == 0) as u16;
    let h = if a > 0x7f80_0000 {
        nan
    } else if a >= 0x4780_0000 {
        0x7c00 // infinity, or overflow to it
    } else if a < 0x3880_0000 {
        sub
    } else {
        normal
    };
    sign | h
}

/// numpy's `npy_doublebits_to_halfbits`: one rounding, straight from F64.
pub(crate) fn f64_to_f16(d: u64) -> u16 {
    let h_sgn = ((d & 0x8000_0000_0000_0000) >> 48) as u16;
    let d_exp = d & 0x7ff0_0000_0000_0000;
    if d_exp >= 0x40f0_0000_0000_0000 {
        let d_sig = d & 0x000f_ffff_ffff_ffff;
        if d_exp == 0x7ff0_0000_0000_0000 && d_sig != 0 {
            let ret = (0x7c00 + (d_sig >> 42)) as u16;
            return h_sgn + if ret == 0x7c00 { ret + 1 } else { ret };
        }
        return h_sgn + 0x7c00;
    }
    if d_exp <= 0x3f00_0000_0000_0000 {
        if d_exp < 0x3e60_0000_0000_0000 {
            return h_sgn;
        }
        let e = d_exp >> 52;
        // Doubles have room to shift left: no bits are lost.
        let mut d_sig = (0x0010_0000_0000_0000 + (d & 0x000f_ffff_ffff_ffff)) << (e - 998);
        if (d_sig & 0x003f_ffff_ffff_ffff) != 0x0010_0000_0000_0000 {
            d_sig += 0x0010_0000_0000_0000;
        }
        return h_sgn + (d_sig >> 53) as u16;
    }
    let h_exp = ((d_exp - 0x3f00_0000_0000_0000) >> 42) as u16;
    let mut d_sig = d & 0x000f_ffff_ffff_ffff;
    if (d_sig & 0x0000_07ff_ffff_ffff) != 0x0000_0200_0000_0000 {
        d_sig += 0x0000_0200_0000_0000;
    }
    h_sgn + h_exp + (d_sig >> 42) as u16
}

/// numpy's `npy_halfbits_to_doublebits`: exact, NaN payloads kept as they
/// are (a signalling NaN stays signalling, where a hardware float-to-double
/// conversion would quiet it).
pub(crate) fn f16_to_f64(h: u16) -> u64 {
    let f = f16_to_f32(h);
    if f & 0x7f80_0000 == 0x7f80_0000 {
        let sign = ((f & 0x8000_0000) as u64) << 32;
        return sign | 0x7ff0_0000_0000_0000 | ((f & 0x007f_ffff) as u64) << 29;
    }
    (f32::from_bits(f) as f64).to_bits()
}

/// numpy's `npy_halfbits_to_floatbits`: exact, NaN payloads kept as they
/// are. Without branches, so that the loop vectorises.
pub(crate) fn f16_to_f32(h: u16) -> u32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let a = (h & 0x7fff) as u32;
    // Normal: rebias the exponent (15 to 127).
    let normal = (a << 13) + (112 << 23);
    // Subnormal or zero: 2^-14 * (1 + a/1024), less 2^-14, is a * 2^-24 exactly.
    let base = f32::from_bits(113 << 23);
    let sub = (f32::from_bits((a << 13) | (113 << 23)) - base).to_bits();
    // Infinity or NaN: the payload shifted, quiet or signalling as it was.
    let special = (a << 13) | 0x7f80_0000;
    sign | if a >= 0x7c00 {
        special
    } else if a < 0x0400 {
        sub
    } else {
        normal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_f16_is_exact_for_every_pattern() {
        for h in 0..=u16::MAX {
            let f = f32::from_bits(f16_to_f32(h));
            let exp = half::f16::from_bits(h).to_f32();
            if exp.is_nan() {
                assert!(f.is_nan(), "{h:#x}");
            } else {
                assert_eq!(f.to_bits(), exp.to_bits(), "{h:#x}");
                assert_eq!(f32_to_f16(f.to_bits()), h, "round trip {h:#x}");
            }
        }
    }

    #[test]
    fn bf16_round_trips() {
        for h in 0..=u16::MAX {
            let f = bf16_to_f32(h);
            if f32::from_bits(f).is_nan() {
                continue;
            }
            assert_eq!(f32_to_bf16(f), h, "{h:#x}");
        }
    }

    #[test]
    fn known_values() {
        // From numpy 2.4 and ml_dtypes 0.7 on this machine.
        assert_eq!(f32_to_bf16(0x7f80_0001), 0x7fc0);
        assert_eq!(f32_to_bf16(0xffa0_0000), 0xffc0);
        assert_eq!(f32_to_bf16(0x3f80_8000), 0x3f80); // tie to even
        assert_eq!(f32_to_bf16(0x3f81_8000), 0x3f82);
        assert_eq!(f32_to_bf16(0x7f7f_ffff), 0x7f80); // overflow
        assert_eq!(f32_to_f16(0x7f80_0001), 0x7c01);
        assert_eq!(f32_to_f16(0x7fc0_0001), 0x7e00);
        assert_eq!(f32_to_f16(0x7f81_2345), 0x7c09);
        assert_eq!(f32_to_f16(0x3f80_8000), 0x3c04);
        assert_eq!(f16_to_f32(0x7c01), 0x7f80_2000);
        assert_eq!(f64_to_f16(0x7ff0_0000_0000_0001), 0x7c01);
        assert_eq!(f64_to_f16(0x7ff8_0000_0000_0001), 0x7e00);
        assert_eq!(f64_to_f16(0x3ff0_0000_1000_0000), 0x3c00);
    }

    #[test]
    fn overflow_to_infinity_is_counted_not_infinities_or_nans() {
        let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let input = f32s(&[
            1.0,
            65520.0,
            -1e10,
            f32::INFINITY,
            f32::NAN,
            65504.0,
            f32::MAX,
        ]);
        let mut out = vec![0u8; 14];
        assert_eq!(
            Cast::new(Dtype::F32, Dtype::F16)
                .unwrap()
                .apply(&input, &mut out),
            3
        );
        // BF16 reaches 3.4e38: only the values that round past F32::MAX's neighbourhood.
        let mut out = vec![0u8; 14];
        assert_eq!(
            Cast::new(Dtype::F32, Dtype::BF16)
                .unwrap()
                .apply(&input, &mut out),
            1
        );
        let f64s: Vec<u8> = [1e300, -1e300, 1.0, f64::INFINITY, f64::NAN, 1e5]
            .iter()
            .flat_map(|x: &f64| x.to_le_bytes())
            .collect();
        for (to, want) in [(Dtype::F32, 2), (Dtype::BF16, 2), (Dtype::F16, 3)] {
            let c = Cast::new(Dtype::F64, to).unwrap();
            let mut out = vec![0u8; 6 * c.out_width()];
            assert_eq!(c.apply(&f64s, &mut out), want, "F64 -> {to}");
        }
        let bf16s: Vec<u8> = [0x4780u16, 0x7f80, 0x7fc0, 0x3f80]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let mut out = vec![0u8; 8];
        assert_eq!(
            Cast::new(Dtype::BF16, Dtype::F16)
                .unwrap()
                .apply(&bf16s, &mut out),
            1
        );
        let mut wide = vec![0u8; 16];
        assert_eq!(
            Cast::new(Dtype::BF16, Dtype::F32)
                .unwrap()
                .apply(&bf16s, &mut wide),
            0
        );
    }

    #[test]
    fn int_widening_sign_extends() {
        let c = Cast::new(Dtype::I16, Dtype::I64).unwrap();
        let mut out = [0u8; 16];
        c.apply(&[0xfe, 0xff, 0x02, 0x00], &mut out);
        assert_eq!(i64::from_le_bytes(out[..8].try_into().unwrap()), -2);
        assert_eq!(i64::from_le_bytes(out[8..].try_into().unwrap()), 2);
        assert!(Cast::new(Dtype::I8, Dtype::U16).is_err());
        assert!(Cast::new(Dtype::U8, Dtype::I16).is_ok());
        assert!(Cast::new(Dtype::U16, Dtype::I16).is_err());
        assert!(Cast::new(Dtype::F32, Dtype::I32).is_err());
    }
}
