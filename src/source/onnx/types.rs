//! `TensorProto.DataType`: which safetensors dtype each ONNX type is, and
//! which typed field holds its values when `raw_data` is not used
//! (`onnx.helper.tensor_dtype_to_field`, `onnx.numpy_helper.to_array`).

use crate::error::onnx::OnnxError;
use crate::Dtype;

/// A typed field of `TensorProto`, and how its values are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Storage {
    /// `float_data` (4): fixed 32-bit.
    Float,
    /// `int32_data` (5): varints of int32 values.
    Int32,
    /// `int64_data` (7): varints.
    Int64,
    /// `double_data` (10): fixed 64-bit.
    Double,
    /// `uint64_data` (11): varints.
    Uint64,
}

impl Storage {
    /// Its field number.
    pub(crate) fn field(self) -> u32 {
        match self {
            Storage::Float => 4,
            Storage::Int32 => 5,
            Storage::Int64 => 7,
            Storage::Double => 10,
            Storage::Uint64 => 11,
        }
    }

    /// Its name in `onnx.proto`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Storage::Float => "float_data",
            Storage::Int32 => "int32_data",
            Storage::Int64 => "int64_data",
            Storage::Double => "double_data",
            Storage::Uint64 => "uint64_data",
        }
    }

    /// The width of its fixed-width values; `None` for varints.
    pub(crate) fn fixed(self) -> Option<usize> {
        match self {
            Storage::Float => Some(4),
            Storage::Double => Some(8),
            Storage::Int32 | Storage::Int64 | Storage::Uint64 => None,
        }
    }

    /// The wire type of one unpacked value.
    pub(crate) fn wire(self) -> u8 {
        match self {
            Storage::Float => 5,
            Storage::Double => 1,
            Storage::Int32 | Storage::Int64 | Storage::Uint64 => 0,
        }
    }
}

/// An ONNX element type as we read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OnnxType {
    /// The safetensors dtype.
    pub(crate) dtype: Dtype,
    /// The typed field its values go in.
    pub(crate) storage: Storage,
    /// Values of that field per element (2 for COMPLEX64: real, imaginary).
    pub(crate) per_element: u64,
}

/// The type `data_type` names. A typed value becomes an element by its
/// low bytes, as `to_array` casts (`astype` wraps; FLOAT16 and BFLOAT16
/// are their bits in the low 16 bits of an int32).
pub(crate) fn onnx_type(data_type: i64) -> Result<OnnxType, OnnxError> {
    use {Dtype as D, Storage as S};
    let (dtype, storage) = match data_type {
        1 => (D::F32, S::Float),
        2 => (D::U8, S::Int32),
        3 => (D::I8, S::Int32),
        4 => (D::U16, S::Int32),
        5 => (D::I16, S::Int32),
        6 => (D::I32, S::Int32),
        7 => (D::I64, S::Int64),
        9 => (D::BOOL, S::Int32),
        10 => (D::F16, S::Int32),
        11 => (D::F64, S::Double),
        12 => (D::U32, S::Uint64),
        13 => (D::U64, S::Uint64),
        14 => (D::C64, S::Float),
        16 => (D::BF16, S::Int32),
        17 => (D::F8_E4M3, S::Int32),
        18 => (D::F8_E4M3FNUZ, S::Int32),
        19 => (D::F8_E5M2, S::Int32),
        20 => (D::F8_E5M2FNUZ, S::Int32),
        24 => (D::F8_E8M0, S::Int32),
        other => return Err(unsupported(other)),
    };
    let per_element = if dtype == D::C64 { 2 } else { 1 };
    Ok(OnnxType {
        dtype,
        storage,
        per_element,
    })
}

fn unsupported(data_type: i64) -> OnnxError {
    let (name, why) = match data_type {
        8 => ("STRING", "strings are not numeric tensors"),
        15 => ("COMPLEX128", "safetensors has no 128-bit complex type"),
        21 | 22 => (
            if data_type == 21 { "UINT4" } else { "INT4" },
            "safetensors has no 4-bit integer type",
        ),
        23 => (
            "FLOAT4E2M1",
            "the order of two elements in a byte is not settled for safetensors' F4",
        ),
        25 | 26 => (
            if data_type == 25 { "UINT2" } else { "INT2" },
            "safetensors has no 2-bit integer type",
        ),
        27 | 28 => (
            if data_type == 27 {
                "FLOAT6E2M3"
            } else {
                "FLOAT6E3M2"
            },
            "ONNX packs four elements in three bytes, which safetensors' F6 does not settle",
        ),
        _ => return OnnxError::DataType(data_type),
    };
    OnnxError::Unsupported { name, why }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_defined_type_is_read_or_refused_by_name() {
        assert_eq!(onnx_type(1).unwrap().dtype, Dtype::F32);
        assert_eq!(onnx_type(16).unwrap().storage, Storage::Int32);
        assert_eq!(onnx_type(14).unwrap().per_element, 2);
        for t in [8, 15, 21, 22, 23, 25, 26, 27, 28] {
            assert!(
                matches!(onnx_type(t), Err(OnnxError::Unsupported { .. })),
                "{t}"
            );
        }
        for t in [0, 29, -1] {
            assert!(matches!(onnx_type(t), Err(OnnxError::DataType(_))), "{t}");
        }
    }
}
