//! The reference element casts, one element at a time: the bits every
//! vector path ([`super::simd`]) must reproduce, and what runs where none
//! applies (the last elements of a buffer, a machine without one).

/// ml_dtypes (Eigen): NaN to a quiet NaN of its sign; else round to nearest even.
#[inline]
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
#[inline]
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
#[inline]
pub(crate) fn bf16_to_f16(h: u16) -> u16 {
    if h & 0x7fff > 0x7f80 {
        return (h & 0x8000) | 0x7e00;
    }
    f32_to_f16(bf16_to_f32(h))
}

/// Exact: bfloat16 is the top half of a float32.
#[inline]
pub(crate) fn bf16_to_f32(h: u16) -> u32 {
    (h as u32) << 16
}

/// numpy's `npy_floatbits_to_halfbits`, with ties to even: the same bits,
/// computed without branches so that the loop vectorises (every path is
/// computed and one is picked).
#[inline]
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
#[inline]
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
#[inline]
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
#[inline]
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
