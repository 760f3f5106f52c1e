"""PyTorch tensors into safetensors files: ``save_file`` and ``save_model`` as
``safetensors.torch`` has them, and the bytes of any torch tensor for ``Writer.write``.

torch is imported by this module only (``import safetensors_stream`` never
imports it). Tensors are written from their own memory: a contiguous CPU
tensor's bytes go to the file as they lie (no copy, no numpy, so bfloat16,
float8, uint16-64 and bool work); a non-contiguous tensor goes in C order, and
a tensor on another device (CUDA) is copied to host memory, both in pieces of
at most ``PIECE_BYTES``, one tensor at a time: host memory grows by one piece,
not by the model.

Differences from ``safetensors.torch`` 0.8, by choice:

- non-contiguous tensors are written (in C order) where the reference
  refuses them;
- ``save_model`` writes ``"format": "pt"`` in the metadata, as
  ``save_pretrained`` does, so that transformers and huggingface_hub load
  the file (``save_file`` writes the reference's bytes: no format unless given);
- ``save_model`` keeps, of each group of tensors that are one and the same
  view, the name transformers keeps: the first in the state_dict's order
  that is not one of the model's ``_tied_weights_keys`` (the tie targets,
  e.g. ``lm_head.weight``), as ``save_pretrained`` does
  (``remove_tied_weights_from_state_dict``), instead of the first in sorted
  order; without ``_tied_weights_keys`` the first in state_dict order (the
  module registration order: the input embedding before the head tied to
  it), the rule of ``convert --dedupe-tied``. Views that overlap without
  being identical are written as tensors of their own, and a dropped name
  that is already a metadata key keeps its tensor rather than lose it.
"""

from __future__ import annotations

import ctypes
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from . import Writer
from ._errors import UsageError

__all__ = ["PIECE_BYTES", "dtype_name", "save_file", "save_model", "tensor_pieces"]

# Bytes per piece copied to host memory (another device) or into C order (a
# non-contiguous tensor): what save_file holds beyond the caller's tensors.
PIECE_BYTES = 4 << 20

_NAMES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "bool": "BOOL",
    "complex64": "C64",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0",
}
_DTYPES = {getattr(torch, k): v for k, v in _NAMES.items() if hasattr(torch, k)}


def dtype_name(dtype: torch.dtype) -> str:
    """The safetensors name of a torch dtype (``torch.bfloat16`` -> ``"BF16"``)."""
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise UsageError(f"torch dtype {dtype} has no safetensors equivalent", "usage") from None


def _bytes_of(t: torch.Tensor) -> Any:
    """A contiguous CPU tensor's bytes, without a copy: a buffer over its
    memory, valid while ``t`` lives (the caller holds it)."""
    n = t.numel() * t.element_size()
    if n == 0:
        return b""
    if sys.byteorder != "little":
        raise UsageError("a big-endian host: safetensors stores little-endian bytes", "usage")
    return memoryview((ctypes.c_ubyte * n).from_address(t.data_ptr()))


def tensor_pieces(t: Any, piece: int = PIECE_BYTES, reuse: bool = False) -> Iterator[Any]:
    """``t``'s elements in C order as contiguous CPU tensors: ``t`` itself
    when it is contiguous and on the CPU, otherwise copies of at most
    ``piece`` bytes (or one innermost row, if a row is longer), made one at
    a time: a CUDA tensor is never copied to host memory whole. With
    ``reuse``, the copies of a CPU tensor are made into one buffer, reused
    for the next piece (consume each before asking for the next): no
    allocation per piece, which the C allocator would otherwise keep around."""
    yield from _pieces(t, piece, [None] if reuse else None)


def _pieces(t: Any, piece: int, scratch: list[Any] | None) -> Iterator[Any]:
    if t.numel() == 0:
        return
    if t.dim() == 0:
        t = t.reshape(1)
    on_host = t.device.type == "cpu"
    if t.is_contiguous():
        if on_host:
            yield t
            return
        flat = t.reshape(-1)
        step = max(1, piece // t.element_size())
        for i in range(0, flat.shape[0], step):
            yield flat[i : i + step].to("cpu")
        return
    row_bytes = (t.numel() // t.shape[0]) * t.element_size()
    if t.dim() > 1 and row_bytes > piece:
        for i in range(t.shape[0]):
            yield from _pieces(t[i], piece, scratch)
        return
    rows = max(1, piece // max(1, row_bytes))
    for i in range(0, t.shape[0], rows):
        block = t[i : i + rows]
        if not on_host:
            yield block.contiguous().to("cpu")
        elif scratch is None:
            yield block.contiguous()
        else:
            yield _copy_into(scratch, block, piece)


def _copy_into(scratch: list[Any], block: torch.Tensor, piece: int) -> torch.Tensor:
    """``block`` copied in C order into the reused buffer ``scratch[0]``
    (made, or made larger, as needed)."""
    n = block.numel()
    buf = scratch[0]
    if buf is None or buf.dtype != block.dtype or buf.numel() < n:
        buf = scratch[0] = torch.empty(max(n, piece // block.element_size()), dtype=block.dtype)
    dst = buf[:n].view(block.shape)
    dst.copy_(block)
    return dst


def _plain(name: str, t: Any) -> torch.Tensor:
    """``t`` as a dense tensor whose elements are its values (conjugation
    and negation bits resolved), or a refusal naming the tensor."""
    if not isinstance(t, torch.Tensor):
        raise UsageError(f"{name}: expected a torch.Tensor, got {type(t).__name__}", "usage", tensor=name)
    if t.layout != torch.strided:
        raise UsageError(f"{name}: a {t.layout} tensor; pass a dense one (.to_dense())", "usage", tensor=name)
    if t.device.type == "meta":
        raise UsageError(f"{name}: a tensor on the meta device has no data", "usage", tensor=name)
    dtype_name(t.dtype)
    return t.detach().resolve_conj().resolve_neg()


def write_tensor(native: Any, name: str, t: torch.Tensor) -> None:
    """Appends every byte of ``t`` (any device, any layout of strides) to
    tensor ``name`` of a native writer, in C order, piece by piece."""
    t = _plain(name, t)
    for piece in tensor_pieces(t, reuse=True):
        native.write(name, _bytes_of(piece))


def _span(t: torch.Tensor) -> tuple[Any, int, int]:
    """(device, first byte, end byte) of the memory a tensor reaches."""
    size = t.element_size()
    start = t.data_ptr()
    reach = sum((d - 1) * abs(s) for d, s in zip(t.shape, t.stride()) if d > 0)
    return t.device, start, start + (reach + 1) * size


def _shared(tensors: Mapping[str, torch.Tensor]) -> list[list[str]]:
    """Groups of names whose memory overlaps (names in the mapping's order)."""
    spans = sorted(
        (_span(t) + (i, k))
        for i, (k, t) in enumerate(tensors.items())
        if t.numel() > 0 and t.data_ptr() != 0
    )
    groups: list[list[tuple[int, str]]] = []
    last: tuple[Any, int] | None = None
    for device, start, end, i, k in spans:
        if last is not None and last[0] == device and start < last[1]:
            groups[-1].append((i, k))
            last = (device, max(last[1], end))
        else:
            groups.append([(i, k)])
            last = (device, end)
    return [[k for _, k in sorted(g)] for g in groups if len(g) > 1]


def save_file(
    tensors: Mapping[str, torch.Tensor], filename: Any, metadata: Mapping[str, str] | None = None
) -> None:
    """Saves torch tensors as ``safetensors.torch.save_file`` does, byte for
    byte where it accepts them, each streamed from its own memory. Tensors
    sharing memory are refused as the reference refuses them (use
    ``save_model``); non-contiguous ones are written in C order; tensors on
    another device are copied to the host a piece at a time."""
    if not isinstance(tensors, Mapping):
        raise UsageError(f"expected a dict of str to torch.Tensor, got {type(tensors).__name__}", "usage")
    plain = {k: _plain(k, t) for k, t in tensors.items()}
    shared = _shared(plain)
    if shared:
        raise UsageError(
            f"some tensors share memory, which would write their bytes twice and load them unshared: {shared}; "
            "save_model() writes one of each group, or pass .clone()s",
            "shared_tensors",
            tensor=shared[0][0],
        )
    _write_all(plain, filename, metadata)


def _write_all(tensors: Mapping[str, torch.Tensor], filename: Any, metadata: Mapping[str, str] | None) -> None:
    specs = [(k, dtype_name(t.dtype), list(t.shape)) for k, t in tensors.items()]
    with Writer(filename, specs, metadata=metadata) as w:
        for name in w.order:
            for piece in tensor_pieces(tensors[name], reuse=True):
                w._native.write(name, _bytes_of(piece))


def _tied_targets(model: torch.nn.Module) -> list[str]:
    """The patterns of the names a transformers model re-ties on load:
    ``_tied_weights_keys`` of every submodule, under its path (a list of
    patterns in transformers 4, a ``{target: source}`` dict in 5)."""
    patterns = []
    for path, module in model.named_modules():
        keys = getattr(module, "_tied_weights_keys", None) or ()
        if isinstance(keys, Mapping):
            keys = keys.keys()
        patterns.extend(f"{path}.{k}" if path else str(k) for k in keys)
    return patterns


def _identical(tensors: Mapping[str, torch.Tensor]) -> list[list[str]]:
    """Groups of names that are one and the same view, in the mapping's order."""
    by: dict[tuple[Any, ...], list[str]] = {}
    for k, t in tensors.items():
        if t.numel() == 0 or t.data_ptr() == 0:
            continue
        key = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
        by.setdefault(key, []).append(k)
    return [g for g in by.values() if len(g) > 1]


def save_model(
    model: torch.nn.Module,
    filename: Any,
    metadata: Mapping[str, str] | None = None,
    force_contiguous: bool = True,
) -> None:
    """Saves ``model.state_dict()`` as ``safetensors.torch.save_model`` does:
    one tensor of each tied group, each dropped name recorded in the metadata
    as ``dropped -> kept``; the kept name is the one transformers keeps (see
    the module's docs). The metadata also says ``"format": "pt"`` (unless
    ``metadata`` gives a format), as ``save_pretrained`` writes it: the
    loaders of transformers and huggingface_hub refuse a file with metadata
    but no such format. ``force_contiguous`` is accepted for compatibility:
    every tensor is written in C order either way."""
    del force_contiguous
    state = {k: _plain(k, t) for k, t in model.state_dict().items()}
    meta = {"format": "pt", **(metadata or {})}
    targets = [re.compile(p) for p in _tied_targets(model)]
    for group in _identical(state):
        keep = next((k for k in group if not any(p.search(k) for p in targets)), group[0])
        for name in group:
            if name == keep or name in meta:
                continue
            meta[name] = keep
            del state[name]
    _write_all(state, filename, meta)
