//! Element casts applied while streaming: float narrowing and widening,
//! and lossless integer widening.
//!
//! Results are bit-identical to numpy's `astype(np.float16)` and
//! `astype(np.float32)` (its software conversions, which keep NaN payloads
//! rather than quieting them) and to ml_dtypes' bfloat16 (Eigen's
//! round-to-nearest-even, NaN squashed to a quiet NaN of the same sign;
//! from F64 by way of F32, as ml_dtypes does). Every rounding is to nearest,
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
    /// use safetensors_stream::{cast::Cast, Dtype};
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
    /// exactly as many elements.
    ///
    /// ```
    /// use safetensors_stream::{cast::Cast, Dtype};
    ///
    /// let cast = Cast::new(Dtype::F32, Dtype::F16).unwrap();
    /// let input: Vec<u8> = [1.0f32, 65520.0, -0.0].iter().flat_map(|f| f.to_le_bytes()).collect();
    /// let mut out = vec![0u8; 6];
    /// cast.apply(&input, &mut out);
    /// let halves: Vec<u16> = out.chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    /// assert_eq!(halves, [0x3c00, 0x7c00, 0x8000]); // 65520 rounds up to infinity
    /// ```
    pub fn apply(self, input: &[u8], output: &mut [u8]) {
        use Dtype::*;
        debug_assert_eq!(
            input.len() / self.in_width(),
            output.len() / self.out_width()
        );
        match (self.from, self.to) {
            (F32, BF16) => map::<4, 2>(input, output, |b| {
                f32_to_bf16(u32::from_le_bytes(b)).to_le_bytes()
            }),
            (F32, F16) => map::<4, 2>(input, output, |b| {
                f32_to_f16(u32::from_le_bytes(b)).to_le_bytes()
            }),
            (F64, F32) => map::<8, 4>(input, output, |b| {
                (f64::from_le_bytes(b) as f32).to_le_bytes()
            }),
            (F64, BF16) => map::<8, 2>(input, output, |b| {
                f32_to_bf16((f64::from_le_bytes(b) as f32).to_bits()).to_le_bytes()
            }),
            (F64, F16) => map::<8, 2>(input, output, |b| {
                f64_to_f16(u64::from_le_bytes(b)).to_le_bytes()
            }),
            (F16, F32) => map::<2, 4>(input, output, |b| {
                f16_to_f32(u16::from_le_bytes(b)).to_le_bytes()
            }),
            (BF16, F32) => map::<2, 4>(input, output, |b| {
                bf16_to_f32(u16::from_le_bytes(b)).to_le_bytes()
            }),
            (F16, F64) => map::<2, 8>(input, output, |b| {
                (f32::from_bits(f16_to_f32(u16::from_le_bytes(b))) as f64).to_le_bytes()
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
            (BF16, F16) => map::<2, 2>(input, output, |b| {
                f32_to_f16(bf16_to_f32(u16::from_le_bytes(b))).to_le_bytes()
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
pub fn f32_to_bf16(x: u32) -> u16 {
    if x & 0x7fff_ffff > 0x7f80_0000 {
        return if x & 0x8000_0000 != 0 { 0xffc0 } else { 0x7fc0 };
    }
    let bias = 0x7fff + ((x >> 16) & 1);
    (x.wrapping_add(bias) >> 16) as u16
}

/// Exact: bfloat16 is the top half of a float32.
pub fn bf16_to_f32(h: u16) -> u32 {
    (h as u32) << 16
}

/// numpy's `npy_floatbits_to_halfbits`, with ties to even.
pub fn f32_to_f16(f: u32) -> u16 {
    let h_sgn = ((f & 0x8000_0000) >> 16) as u16;
    let f_exp = f & 0x7f80_0000;
    if f_exp >= 0x4780_0000 {
        let f_sig = f & 0x007f_ffff;
        if f_exp == 0x7f80_0000 && f_sig != 0 {
            // NaN: keep the top of the payload, but never become infinity.
            let ret = (0x7c00 + (f_sig >> 13)) as u16;
            return h_sgn + if ret == 0x7c00 { ret + 1 } else { ret };
        }
        return h_sgn + 0x7c00; // infinity, or overflow to it
    }
    if f_exp <= 0x3800_0000 {
        if f_exp < 0x3300_0000 {
            return h_sgn; // underflows to a signed zero
        }
        let e = f_exp >> 23;
        let mut f_sig = (0x0080_0000 + (f & 0x007f_ffff)) >> (113 - e);
        // Ties to even; the shift may drop up to 11 bits, checked in `f`.
        if (f_sig & 0x3fff) != 0x1000 || (f & 0x07ff) != 0 {
            f_sig += 0x1000;
        }
        return h_sgn + (f_sig >> 13) as u16;
    }
    let h_exp = ((f_exp - 0x3800_0000) >> 13) as u16;
    let mut f_sig = f & 0x007f_ffff;
    if (f_sig & 0x3fff) != 0x1000 {
        f_sig += 0x1000;
    }
    // A carry out of the significand bumps the exponent: the right answer,
    // up to infinity.
    h_sgn + h_exp + (f_sig >> 13) as u16
}

/// numpy's `npy_doublebits_to_halfbits`: one rounding, straight from F64.
pub fn f64_to_f16(d: u64) -> u16 {
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

/// numpy's `npy_halfbits_to_floatbits`: exact, NaN payloads kept as they are.
pub fn f16_to_f32(h: u16) -> u32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = h & 0x7c00;
    let sig = (h & 0x03ff) as u32;
    match exp {
        0 if sig == 0 => sign,
        0 => {
            // Subnormal: normalise.
            let shift = sig.leading_zeros() - 21;
            let sig = (sig << shift) & 0x03ff;
            let exp = 113 - shift;
            sign | (exp << 23) | (sig << 13)
        }
        0x7c00 => sign | 0x7f80_0000 | (sig << 13),
        _ => sign | (((exp >> 10) as u32 + 112) << 23) | (sig << 13),
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
