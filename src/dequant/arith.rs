//! What a library's tensor arithmetic yields: the values its scales hold,
//! and a product as its dtype stores it.

use crate::Dtype;

/// The value of one scale element of `dtype` (F32, F16, BF16, F8_E4M3 or F8_E8M0)
/// from its little-endian bytes. Callers checked the dtype.
pub(crate) fn scale_value(dtype: Dtype, b: &[u8]) -> f32 {
    match dtype {
        Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        Dtype::F16 => f32::from_bits(crate::cast::f16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
        Dtype::BF16 => f32::from_bits(crate::cast::bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
        Dtype::F8_E4M3 => e4m3_to_f32(b[0]),
        Dtype::F8_E8M0 => e8m0_to_f32(b[0]),
        other => unreachable!("scales are checked to be floats, not {other}"),
    }
}

/// Decodes `bytes` of `dtype` scales into `out` (cleared first).
pub(crate) fn scale_values(dtype: Dtype, bytes: &[u8], out: &mut Vec<f32>) {
    out.clear();
    let width = (dtype.bits() / 8) as usize;
    out.extend(bytes.chunks_exact(width).map(|b| scale_value(dtype, b)));
}

/// The value of an E4M3 (`float8_e4m3fn`) code: bias 7, no infinities,
/// `S.1111.111` is NaN. A table lookup: every code's value is exact in f32.
pub(crate) fn e4m3_to_f32(b: u8) -> f32 {
    E4M3[usize::from(b)]
}

/// An E4M3 code's value times `scale`, in f32: a NaN code gives its own
/// NaN (positive, quiet) whatever the scale. Spelt out because when both
/// operands of a product are NaN, x86 returns the first one's, and the
/// compiler may swap a product's operands (it did, between the scalar and
/// vector paths): only the code's NaN is taken, never the scale's.
pub(crate) fn e4m3_times(code: u8, scale: f32) -> f32 {
    let x = e4m3_to_f32(code);
    if x.is_nan() {
        x
    } else {
        x * scale
    }
}

/// The E8M0 scale byte that means NaN (OCP MX spec).
pub(crate) const E8M0_NAN: u8 = 0xff;

/// The value of an E8M0 (`float8_e8m0fnu`) scale: `2^(e - 127)`, exact in
/// f32 (2^-127 is a subnormal); 0xFF is NaN. Schemes that multiply by a
/// scale refuse 0xFF before decoding it.
pub(crate) fn e8m0_to_f32(e: u8) -> f32 {
    match e {
        E8M0_NAN => f32::NAN,
        0 => f32::from_bits(1 << 22),
        _ => f32::from_bits(u32::from(e) << 23),
    }
}

/// Every E4M3 code's value, computed at compile time.
static E4M3: [f32; 256] = e4m3_table();

const fn e4m3_table() -> [f32; 256] {
    let mut table = [0f32; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = e4m3_value(b as u8);
        b += 1;
    }
    table
}

const fn e4m3_value(b: u8) -> f32 {
    let exp = ((b >> 3) & 0x0f) as i32;
    let man = (b & 0x07) as f32;
    if exp == 0x0f && b & 0x07 == 0x07 {
        return f32::NAN;
    }
    let magnitude = match exp {
        0 => man / 8.0 * pow2(-6),
        _ => (1.0 + man / 8.0) * pow2(exp - 7),
    };
    if b & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// 2^k for a normal f32 exponent k.
const fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// `v` (an exact product, or f32 arithmetic's result) as a tensor of
/// `dtype` stores it: torch multiplies F16 and BF16 tensors in f32 and rounds
/// the result to nearest even. F32 is returned as it is.
pub(crate) fn stored_as(dtype: Dtype, v: f32) -> f32 {
    match dtype {
        Dtype::BF16 => f32::from_bits(crate::cast::bf16_to_f32(crate::cast::f32_to_bf16(
            v.to_bits(),
        ))),
        Dtype::F16 => f32::from_bits(crate::cast::f16_to_f32(crate::cast::f32_to_f16(
            v.to_bits(),
        ))),
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_e4m3() {
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0x01), f32::powi(2.0, -9));
        assert_eq!(e4m3_to_f32(0xc0), -2.0);
        assert!(e4m3_to_f32(0x7f).is_nan());
        assert!(e4m3_to_f32(0xff).is_nan());
        // Every code against the format's definition, computed at run time.
        for b in 0..=255u8 {
            let (sign, exp, man) = (b >> 7, i32::from((b >> 3) & 0x0f), f32::from(b & 7));
            let magnitude = match exp {
                0 => man * 2f32.powi(-9),
                _ => (1.0 + man / 8.0) * 2f32.powi(exp - 7),
            };
            let want = if sign == 1 { -magnitude } else { magnitude };
            match b & 0x7f {
                0x7f => assert!(e4m3_to_f32(b).is_nan()),
                _ => assert_eq!(e4m3_to_f32(b).to_bits(), want.to_bits(), "{b:#04x}"),
            }
        }
    }

    #[test]
    fn decodes_e8m0() {
        assert_eq!(e8m0_to_f32(127), 1.0);
        assert_eq!(e8m0_to_f32(0), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32(1), 2f32.powi(-126));
        assert_eq!(e8m0_to_f32(254), 2f32.powi(127));
        assert!(e8m0_to_f32(255).is_nan());
        for e in 0..255u8 {
            assert_eq!(f64::from(e8m0_to_f32(e)), 2f64.powi(i32::from(e) - 127));
        }
    }

    #[test]
    fn products_round_to_the_scales_dtype() {
        // 1 + 2^-9 is an F16 but not a BF16: it rounds to 1.0 there; 1 + 2^-12
        // is neither; F32 keeps both.
        let v = 1.0 + f32::powi(2.0, -9);
        assert_eq!(stored_as(Dtype::BF16, v), 1.0);
        assert_eq!(stored_as(Dtype::F16, v), v);
        assert_eq!(stored_as(Dtype::F16, 1.0 + f32::powi(2.0, -12)), 1.0);
        assert_eq!(stored_as(Dtype::F32, v), v);
        assert_eq!(scale_value(Dtype::BF16, &[0x80, 0x3f]), 1.0);
        assert_eq!(scale_value(Dtype::F16, &[0x00, 0x3c]), 1.0);
    }
}
