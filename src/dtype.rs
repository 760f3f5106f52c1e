//! The 22 safetensors element types: spelling, width and the reference's order.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

/// A safetensors element type.
///
/// Variants are declared in the reference implementation's order, which is
/// this type's [`Ord`]: the canonical layout sorts tensors by dtype
/// *descending* in this order, so it matters for byte-identical output.
///
/// ```
/// use safetensors_stream::Dtype;
///
/// let d: Dtype = "BF16".parse().unwrap();
/// assert_eq!(d.bits(), 16);
/// assert_eq!(d.to_string(), "BF16");
/// assert!(Dtype::U64 > Dtype::F32 && Dtype::F32 > Dtype::BOOL);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[allow(non_camel_case_types)]
#[allow(missing_docs)] // the variants are the format's own spellings
pub enum Dtype {
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl Dtype {
    /// Every dtype, in declaration (ascending [`Ord`]) order.
    pub const ALL: [Dtype; 22] = [
        Dtype::BOOL,
        Dtype::F4,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3,
        Dtype::F8_E8M0,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
    ];

    /// Bits per element: 4, 6, 8, 16, 32 or 64.
    pub const fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => 6,
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// The format's spelling, as written in a header (`"F32"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6_E2M3 => "F6_E2M3",
            Dtype::F6_E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            Dtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    /// Bytes per element for whole-byte dtypes; `None` for the sub-byte F4 and F6 kinds.
    pub const fn byte_width(self) -> Option<u64> {
        match self.bits() {
            b if b % 8 == 0 => Some(b / 8),
            _ => None,
        }
    }

    /// Byte length of a tensor of this dtype and `shape`.
    ///
    /// Errors when the element count or bit count overflows `u64`, or when
    /// the bits do not fill whole bytes (F4 with 3 elements). The product is
    /// taken left to right, as the reference does, so `[2^63, 4, 0]`
    /// overflows before it meets the 0.
    ///
    /// ```
    /// use safetensors_stream::{ByteLenError, Dtype};
    ///
    /// assert_eq!(Dtype::F32.byte_len(&[2, 3]), Ok(24));
    /// assert_eq!(Dtype::F32.byte_len(&[]), Ok(4)); // a scalar
    /// assert_eq!(Dtype::F4.byte_len(&[3]), Err(ByteLenError::NotWholeBytes { bits: 12 }));
    /// assert_eq!(Dtype::U8.byte_len(&[u64::MAX, 2]), Err(ByteLenError::Overflow));
    /// ```
    pub fn byte_len(self, shape: &[u64]) -> Result<u64, ByteLenError> {
        let numel = numel(shape).ok_or(ByteLenError::Overflow)?;
        let bits = numel
            .checked_mul(self.bits())
            .ok_or(ByteLenError::Overflow)?;
        if bits % 8 != 0 {
            return Err(ByteLenError::NotWholeBytes { bits });
        }
        Ok(bits / 8)
    }

    /// True for the floating-point kinds (including the 8-, 6- and 4-bit ones and C64).
    pub const fn is_float(self) -> bool {
        !matches!(
            self,
            Dtype::BOOL
                | Dtype::U8
                | Dtype::I8
                | Dtype::I16
                | Dtype::U16
                | Dtype::I32
                | Dtype::U32
                | Dtype::I64
                | Dtype::U64
        )
    }
}

/// Number of elements of `shape` (1 for a scalar), `None` on overflow.
pub(crate) fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// Why a tensor's byte length cannot be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ByteLenError {
    /// The element or bit count does not fit in 64 bits.
    #[error("shape product overflows 64 bits")]
    Overflow,
    /// The tensor's bits do not fill a whole number of bytes.
    #[error("{bits} bits is not a whole number of bytes")]
    NotWholeBytes {
        /// Total bits of the tensor.
        bits: u64,
    },
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Dtype {
    /// The dtype whose format spelling is exactly `s` (`"BF16"`), as a
    /// header must write it; `None` for anything else, `"bf16"` included.
    /// [`FromStr`] is the lenient parse for people.
    pub fn from_format_name(s: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// Other names people give the dtypes (lower case): numpy's and ml_dtypes'
/// (`float32`, `bfloat16`, `float8_e4m3fn`), the usual short ones (`fp16`,
/// `fp32`) and torch's own words for them (`torch.half`; any name may carry
/// the `torch.` prefix). Bare `float` and `int` are left out: numpy reads
/// them as 64 bits, torch as 32.
const ALIASES: [(&str, Dtype); 32] = [
    ("bool", Dtype::BOOL),
    ("uint8", Dtype::U8),
    ("int8", Dtype::I8),
    ("int16", Dtype::I16),
    ("uint16", Dtype::U16),
    ("int32", Dtype::I32),
    ("uint32", Dtype::U32),
    ("int64", Dtype::I64),
    ("uint64", Dtype::U64),
    ("float16", Dtype::F16),
    ("half", Dtype::F16),
    ("fp16", Dtype::F16),
    ("bfloat16", Dtype::BF16),
    ("float32", Dtype::F32),
    ("fp32", Dtype::F32),
    ("float64", Dtype::F64),
    ("double", Dtype::F64),
    ("fp64", Dtype::F64),
    ("complex64", Dtype::C64),
    ("cfloat", Dtype::C64),
    ("float8_e4m3fn", Dtype::F8_E4M3),
    ("float8_e5m2", Dtype::F8_E5M2),
    ("float8_e8m0fnu", Dtype::F8_E8M0),
    ("float8_e4m3fnuz", Dtype::F8_E4M3FNUZ),
    ("float8_e5m2fnuz", Dtype::F8_E5M2FNUZ),
    ("float4_e2m1fn", Dtype::F4),
    ("float6_e2m3fn", Dtype::F6_E2M3),
    ("float6_e3m2fn", Dtype::F6_E3M2),
    ("short", Dtype::I16),
    ("long", Dtype::I64),
    ("torch.float", Dtype::F32),
    ("torch.int", Dtype::I32),
];

/// The error of parsing an unknown dtype spelling; its message lists every
/// accepted spelling and keeps the input as it was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype {0:?}: expected one of {list} (any case; numpy and torch names such as float32, bfloat16, fp16, torch.float16 too)", list = all_names())]
pub struct UnknownDtype(pub String);

fn all_names() -> String {
    Dtype::ALL.map(Dtype::as_str).join(", ")
}

impl FromStr for Dtype {
    type Err = UnknownDtype;

    /// Parses a dtype as people write it, in any case: the format's
    /// spelling (`BF16`, `bf16`), numpy's (`bfloat16`, `float32`), the short
    /// ones (`fp16`) and torch's (`torch.float16`, `torch.half`). Headers
    /// are read with the exact [`Dtype::from_format_name`] instead.
    ///
    /// ```
    /// use safetensors_stream::Dtype;
    ///
    /// for s in ["BF16", "bf16", "bfloat16", "torch.bfloat16"] {
    ///     assert_eq!(s.parse::<Dtype>(), Ok(Dtype::BF16));
    /// }
    /// assert_eq!("Float32".parse::<Dtype>(), Ok(Dtype::F32));
    /// let err = "float".parse::<Dtype>().unwrap_err().to_string();
    /// assert!(err.starts_with("unknown dtype \"float\"") && err.contains("F16"), "{err}");
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let exact = |name: &str| {
            Dtype::ALL
                .into_iter()
                .find(|d| d.as_str().eq_ignore_ascii_case(name))
                .or_else(|| ALIASES.iter().find(|(a, _)| *a == name).map(|&(_, d)| d))
        };
        exact(&lower)
            .or_else(|| lower.strip_prefix("torch.").and_then(exact))
            .ok_or_else(|| UnknownDtype(s.to_owned()))
    }
}

/// Deserializes a dtype written by a person (a raw manifest), in any of the
/// spellings [`FromStr`] takes; headers use the exact names instead.
pub(crate) fn deserialize_spelled<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Dtype, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_sorted_and_complete() {
        assert!(Dtype::ALL.windows(2).all(|w| w[0] < w[1]));
        for d in Dtype::ALL {
            assert_eq!(d.as_str().parse::<Dtype>(), Ok(d));
        }
    }

    #[test]
    fn format_names_are_exact() {
        assert_eq!(Dtype::from_format_name("F32"), Some(Dtype::F32));
        assert_eq!(Dtype::from_format_name("f32"), None);
        assert_eq!(Dtype::from_format_name("float32"), None);
        assert_eq!(Dtype::from_format_name(""), None);
    }

    #[test]
    fn people_spellings() {
        let cases = [
            ("f32", Dtype::F32),
            ("fp32", Dtype::F32),
            ("float32", Dtype::F32),
            ("torch.float32", Dtype::F32),
            ("torch.float", Dtype::F32),
            ("FP16", Dtype::F16),
            ("torch.half", Dtype::F16),
            ("int64", Dtype::I64),
            ("torch.long", Dtype::I64),
            ("torch.int", Dtype::I32),
            ("uint8", Dtype::U8),
            ("bool", Dtype::BOOL),
            ("f8_e4m3", Dtype::F8_E4M3),
            ("float8_e4m3fn", Dtype::F8_E4M3),
            ("torch.float8_e5m2", Dtype::F8_E5M2),
            ("float64", Dtype::F64),
        ];
        for (s, d) in cases {
            assert_eq!(s.parse::<Dtype>(), Ok(d), "{s}");
        }
        for bad in ["", "float", "int", "torch.", "fp8", "torch.torch.half"] {
            assert!(bad.parse::<Dtype>().is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_lists_every_name_and_keeps_the_input() {
        let msg = "Fp12".parse::<Dtype>().unwrap_err().to_string();
        assert!(msg.starts_with("unknown dtype \"Fp12\""), "{msg}");
        for d in Dtype::ALL {
            assert!(msg.contains(d.as_str()), "{msg} lacks {d}");
        }
    }

    #[test]
    fn sub_byte_whole_byte_rule() {
        assert_eq!(Dtype::F4.byte_len(&[2]), Ok(1));
        assert_eq!(Dtype::F6_E2M3.byte_len(&[4]), Ok(3));
        assert!(Dtype::F6_E3M2.byte_len(&[2]).is_err());
        assert_eq!(Dtype::F4.byte_len(&[0]), Ok(0));
    }

    #[test]
    fn overflow_is_left_to_right() {
        assert_eq!(
            Dtype::U8.byte_len(&[1 << 63, 4, 0]),
            Err(ByteLenError::Overflow)
        );
        assert_eq!(Dtype::U8.byte_len(&[0, 1 << 63, 4]), Ok(0));
        assert_eq!(Dtype::U64.byte_len(&[1 << 62]), Err(ByteLenError::Overflow));
    }
}
