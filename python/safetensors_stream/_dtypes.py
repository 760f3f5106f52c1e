"""dtype spellings: safetensors names, and numpy dtypes (ml_dtypes' too)."""

from __future__ import annotations

from typing import Any

from . import _native
from ._errors import UsageError

SAFETENSORS_NAMES: tuple[str, ...] = tuple(_native.dtype_names())

# numpy's dtype names (ml_dtypes' included) for each safetensors dtype that
# numpy can hold one element per item of.
_FROM_NUMPY = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "int16": "I16",
    "uint16": "U16",
    "float16": "F16",
    "bfloat16": "BF16",
    "int32": "I32",
    "uint32": "U32",
    "float32": "F32",
    "complex64": "C64",
    "float64": "F64",
    "int64": "I64",
    "uint64": "U64",
    "float8_e5m2": "F8_E5M2",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e8m0fnu": "F8_E8M0",
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
}


def safetensors_name(dtype: Any) -> str:
    """The safetensors spelling of `dtype`: a safetensors name ("BF16")
    or anything numpy.dtype() accepts (numpy.float32, "float32", an
    ml_dtypes type such as ml_dtypes.bfloat16)."""
    if isinstance(dtype, str) and dtype in SAFETENSORS_NAMES:
        return dtype
    unknown: UsageError | None = None
    if isinstance(dtype, str):
        # The library's spellings, shared with the CLI and Rust: "bf16",
        # "float32", "torch.float16"; its error lists every one.
        try:
            return str(_native.dtype_name(dtype))
        except UsageError as e:
            unknown = e  # numpy may still know it ("<f4")
    try:
        import numpy as np

        name = np.dtype(dtype).name
    except Exception:  # numpy missing, or not a dtype numpy knows
        raise unknown or UsageError(
            f"unknown dtype {dtype!r}: use a safetensors name ({', '.join(SAFETENSORS_NAMES)}),"
            " a numpy dtype or a torch dtype name",
            "usage",
        ) from None
    try:
        return _FROM_NUMPY[name]
    except KeyError:
        raise UsageError(f"numpy dtype {name} has no safetensors equivalent", "usage") from None
