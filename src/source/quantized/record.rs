//! bitsandbytes' packed `quant_state` record: the JSON object that
//! `QuantState.as_dict(packed=True)` stores as a U8 tensor named
//! `<weight>.quant_state.bitsandbytes__nf4` (or `__fp4`).

use serde::Deserialize;

use super::QuantError;
use crate::dequant::bnb::FourBitType;
use crate::Dtype;

/// The longest record read: a real one is a few hundred bytes.
pub(crate) const MAX_RECORD: u64 = 64 * 1024;

/// Block sizes the library dequantizes (it refuses others).
const BLOCK_SIZES: &[u64] = &[32, 64, 128, 256, 512, 1024, 2048, 4096];

/// A record's facts, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    /// NF4 or FP4.
    pub kind: FourBitType,
    /// Elements per absmax.
    pub blocksize: u64,
    /// What the library returns.
    pub dtype: Dtype,
    /// The weight's shape: rows and columns.
    pub shape: [u64; 2],
    /// Nested statistics: absmax values per nested absmax, and the offset added.
    pub nested: Option<(u64, f32)>,
}

#[derive(Deserialize)]
struct Raw {
    quant_type: String,
    blocksize: u64,
    dtype: String,
    shape: Vec<u64>,
    #[serde(default)]
    nested_blocksize: Option<u64>,
    #[serde(default)]
    nested_offset: Option<f64>,
    #[serde(default)]
    nested_dtype: Option<String>,
}

fn bad(detail: impl Into<String>) -> QuantError {
    QuantError::Record(detail.into())
}

/// Parses a record's bytes; `expected` is the code book its tensor's name says.
pub(crate) fn parse(bytes: &[u8], expected: FourBitType) -> Result<Record, QuantError> {
    let raw: Raw = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    let kind = match raw.quant_type.as_str() {
        "nf4" => FourBitType::Nf4,
        "fp4" => FourBitType::Fp4,
        other => return Err(bad(format!("quant_type {other:?}, not nf4 or fp4"))),
    };
    if kind != expected {
        return Err(bad(format!(
            "quant_type {:?} under the other type's name",
            raw.quant_type
        )));
    }
    if !BLOCK_SIZES.contains(&raw.blocksize) {
        return Err(bad(format!(
            "blocksize {} (the library reads {BLOCK_SIZES:?})",
            raw.blocksize
        )));
    }
    let dtype = match raw.dtype.as_str() {
        "bfloat16" => Dtype::BF16,
        "float16" => Dtype::F16,
        "float32" => Dtype::F32,
        other => {
            return Err(bad(format!(
                "dtype {other:?}, not bfloat16, float16 or float32"
            )))
        }
    };
    let shape = match raw.shape[..] {
        [r, c] => [r, c],
        _ => {
            return Err(bad(format!(
                "shape {:?}: only matrices are dequantized",
                raw.shape
            )))
        }
    };
    if shape[0].checked_mul(shape[1]).is_none() {
        return Err(bad(format!("shape {:?} overflows", raw.shape)));
    }
    let nested = match (raw.nested_blocksize, raw.nested_offset) {
        (None, None) => None,
        (Some(b), Some(offset)) if b > 0 => {
            if raw.nested_dtype.as_deref().is_some_and(|d| d != "float32") {
                return Err(bad("nested_dtype other than float32"));
            }
            // torch.tensor(float(offset)): an f32.
            Some((b, offset as f32))
        }
        _ => {
            return Err(bad(
                "nested_blocksize and nested_offset must come together, blocksize > 0",
            ))
        }
    };
    Ok(Record {
        kind,
        blocksize: raw.blocksize,
        dtype,
        shape,
        nested,
    })
}

/// Parses `bytes` as a record of either type, as the fuzz target does:
/// the shape an accepted record declares. Checks what every accepted record
/// promises: a known block size, a shape whose product fits in u64.
#[cfg(any(test, feature = "internals"))]
pub fn parse_any(bytes: &[u8]) -> Option<[u64; 2]> {
    let mut shape = None;
    for kind in [FourBitType::Nf4, FourBitType::Fp4] {
        if let Ok(r) = parse(bytes, kind) {
            assert!(BLOCK_SIZES.contains(&r.blocksize));
            assert!(r.shape[0].checked_mul(r.shape[1]).is_some());
            assert!(r.nested.is_none_or(|(b, _)| b > 0));
            shape = Some(r.shape);
        }
    }
    shape
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_bitsandbytes_writes() {
        let r = parse(
            br#"{"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [96, 128],
                "nested_blocksize": 256, "nested_offset": 0.03125, "nested_dtype": "float32"}"#,
            FourBitType::Nf4,
        )
        .unwrap();
        assert_eq!(r.shape, [96, 128]);
        assert_eq!(r.nested, Some((256, 0.03125)));
        for bad_one in [
            &br#"{"quant_type": "nf4", "blocksize": 48, "dtype": "bfloat16", "shape": [2, 2]}"#[..],
            br#"{"quant_type": "fp4", "blocksize": 64, "dtype": "bfloat16", "shape": [2, 2]}"#,
            br#"{"quant_type": "nf4", "blocksize": 64, "dtype": "int8", "shape": [2, 2]}"#,
            br#"{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [2, 2, 2]}"#,
            br#"{"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": [2, 2], "nested_blocksize": 256}"#,
            br#"{"quant_type": "nf4""#,
        ] {
            assert!(matches!(parse(bad_one, FourBitType::Nf4), Err(QuantError::Record(_))));
        }
    }
}
