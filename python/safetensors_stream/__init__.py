"""Stream tensors into safetensors files in bounded memory.

Three calls (see the README's Python section):

- ``Writer(path_or_fileobj, [(name, dtype, shape), ...], metadata=..., order=...)``:
  a context manager; declare every tensor up front, then ``write(name, chunk)``
  their bytes in pieces of any size in ``w.order``. Leaving the block commits
  the file atomically if every byte came; an exception or a short tensor
  leaves nothing at the path.
- ``save_file(dict_of_arrays, path, metadata=None)``: the bytes
  ``safetensors.numpy.save_file`` writes, streamed without copying the arrays.
- ``convert(inputs, output, ...)``: the ``convert`` CLI as a call, returning its
  ``--report json`` object as a dict.

Errors are ``Error`` subclasses (``BadInputError``, ``UsageError``,
``EnvironmentIOError``, also an ``OSError``; ``IOError`` is its older name)
carrying ``kind``, ``input`` or ``output``, ``tensor`` and ``offset``.
Arrays need numpy (a dependency of the package).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from . import _native
from ._dtypes import safetensors_name
from ._errors import BadInputError, EnvironmentIOError, Error, UsageError
from ._errors import IOError as IOError  # noqa: A004 - the 0.1 name; not in __all__

__all__ = [
    "BadInputError",
    "EnvironmentIOError",
    "Error",
    "UsageError",
    "Writer",
    "convert",
    "save_file",
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("safetensors-stream")
    except PackageNotFoundError:  # imported from a source tree, not installed
        return "0+unknown"


__version__: str = _version()


def __dir__() -> list[str]:
    """What ``dir(safetensors_stream)`` and tab completion offer: the API,
    not the modules and names this module imports for itself."""
    return sorted([*__all__, "__version__"])

# Bytes per piece when save_file streams an array that needs reordering or
# byte swapping: one piece is copied at a time, never the whole array.
_PIECE = 1 << 20


def _numpy() -> Any:
    """numpy if it is already imported (an array can only come from it then)."""
    return sys.modules.get("numpy")


def _target(path_or_fileobj: Any) -> Any:
    """What the native writer takes: a path (str), the file object's
    descriptor (the writer writes through a duplicate of its own), or an
    object with write()."""
    if isinstance(path_or_fileobj, (str, os.PathLike)):
        if os.fspath(path_or_fileobj) == "-":
            path_or_fileobj = sys.stdout
        else:
            return os.fspath(path_or_fileobj)
    fileno = getattr(path_or_fileobj, "fileno", None)
    if fileno is not None:
        try:
            fd = fileno()
        except (OSError, ValueError):  # io.UnsupportedOperation: BytesIO and the like
            fd = None
        if fd is not None:
            # What the file object buffered goes first; the writer then
            # duplicates the descriptor, so closing either leaves the other working.
            path_or_fileobj.flush()
            return int(fd)
    if hasattr(path_or_fileobj, "write"):
        return path_or_fileobj
    raise UsageError(
        f"cannot write to {path_or_fileobj!r}: pass a path or a binary file object", "usage"
    )


def _shape(name: str, shape: Iterable[int]) -> list[int]:
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise UsageError(f"{name}: a shape cannot have a negative dimension: {dims}", "usage", tensor=name)
    return dims


def _metadata(metadata: Mapping[str, str] | None) -> dict[str, str] | None:
    """``metadata`` as a dict of strings: safetensors metadata holds strings
    only, so any other key or value is a TypeError naming it."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a mapping of str to str, not {type(metadata).__name__}")
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"metadata key {key!r} is a {type(key).__name__}: keys and values must be str")
        if not isinstance(value, str):
            raise TypeError(
                f"metadata[{key!r}] is a {type(value).__name__} ({value!r}): values must be str"
                " (json.dumps() it, or str())"
            )
    return dict(metadata)


def _names(option: str, value: str | Iterable[str] | None) -> list[str]:
    """A list of name patterns: one string is one pattern, not its characters."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, bytearray)):
        raise TypeError(f"{option} takes str patterns, not bytes")
    names = list(value)
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"{option}: every pattern must be a str, not {type(n).__name__} ({n!r})")
    return names


def _pairs(option: str, value: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """(from, to) pairs from a mapping (or pairs, where the order matters)."""
    if value is None:
        return []
    items = list(value.items()) if isinstance(value, Mapping) else [tuple(p) for p in value]
    for pair in items:
        if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise TypeError(f"{option}: expected str to str, got {pair!r}")
    return items  # type: ignore[return-value]


def _as_bytes(chunk: Any) -> Any:
    """A numpy array as a flat uint8 view (no copy; ml_dtypes arrays cannot
    export their own format), little-endian; anything else as it is."""
    np = _numpy()
    if np is None or not isinstance(chunk, np.ndarray):
        return chunk
    if not chunk.flags.c_contiguous:
        raise UsageError(
            "the chunk is not C-contiguous; pass numpy.ascontiguousarray(chunk)", "usage"
        )
    if chunk.dtype.byteorder == ">":
        chunk = chunk.astype(chunk.dtype.newbyteorder("<"))
    return chunk.reshape(-1).view(np.uint8)


def _is_torch_tensor(obj: Any) -> bool:
    """Whether ``obj`` is a torch tensor (torch is never imported for this:
    a tensor can only exist once it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _dtype_name(dtype: Any) -> str:
    """A safetensors name for ``dtype``: a torch dtype, or what safetensors_name takes."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        from .torch import dtype_name

        return dtype_name(dtype)
    return safetensors_name(dtype)


class Writer:
    """Streams declared tensors into a safetensors file, piece by piece.

    ``path_or_fileobj``: a path (written to a temp file and renamed into
    place on success; ``"-"`` is standard output), or a binary file object
    (one with ``fileno()`` is written through its descriptor, GIL released;
    others through their ``write()``). ``tensors``: ``(name, dtype, shape)``
    for every tensor, dtype a safetensors name ("BF16"), a numpy dtype or a torch dtype.
    ``order``: ``"canonical"`` (the reference writer's bytes) or ``"input"``.
    """

    def __init__(
        self,
        path_or_fileobj: Any,
        tensors: Sequence[tuple[str, Any, Iterable[int]]],
        metadata: Mapping[str, str] | None = None,
        order: str = "canonical",
        *,
        sync: bool = True,
    ) -> None:
        specs = [(name, _dtype_name(dtype), _shape(name, shape)) for name, dtype, shape in tensors]
        meta = _metadata(metadata)
        self._dtypes = {name: dtype for name, dtype, _ in specs}
        self._native = _native.NativeWriter(_target(path_or_fileobj), specs, meta, order, sync)

    @property
    def order(self) -> list[str]:
        """The tensors' names in the file's order: write their bytes in this order."""
        return self._native.order

    @property
    def bytes_written(self) -> int:
        """Bytes written so far, header included."""
        return self._native.bytes_written

    @property
    def file_len(self) -> int:
        """The length the file will have."""
        return self._native.file_len

    def write(self, name: str, chunk: Any) -> None:
        """Appends ``chunk`` (bytes, memoryview, numpy array: any C-contiguous
        buffer; a torch tensor of any device and strides, in C order) to
        tensor ``name``. Checks the name, the order and the count, and that a
        typed chunk (an array or tensor of another dtype than ``uint8``) has the
        tensor's dtype: its bytes would otherwise be taken as another type's.
        Raw bytes (``bytes``, ``memoryview``, ``uint8`` arrays) are taken as they are."""
        self._check_dtype(name, chunk)
        if _is_torch_tensor(chunk):
            from .torch import write_tensor

            write_tensor(self._native, name, chunk)
            return
        self._native.write(name, _as_bytes(chunk))

    def _check_dtype(self, name: str, chunk: Any) -> None:
        """Refuses a typed chunk whose values are of another type than tensor
        ``name``'s (a float64 array for an F32 tensor). Accepted: the tensor's
        own dtype, ``uint8`` (raw bytes), and an integer view of the same width
        (bfloat16 bits as ``int16``: numpy has no bfloat16)."""
        want = self._dtypes.get(name)
        if want is None:
            return  # an unknown name: the native writer says so
        np = _numpy()
        if _is_torch_tensor(chunk):
            got = _dtype_name(chunk.dtype)
        elif np is not None and isinstance(chunk, np.ndarray):
            got = safetensors_name(chunk.dtype)
        else:
            return
        if got == want or got == "U8" or _bit_view(got, want):
            return
        raise UsageError(
            f"{name}: a {got} chunk for a {want} tensor: cast it first (numpy: .astype(...),"
            " torch: .to(...)), or pass its raw bytes (.view(numpy.uint8))",
            "usage",
            tensor=name,
        )

    def finish(self) -> None:
        """Checks every tensor got all its bytes and commits the file."""
        self._native.finish()

    def abort(self) -> None:
        """Gives up: nothing appears at the path."""
        self._native.abort()

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc_type is not None:
            self._native.abort()
            return False  # the caller's exception goes on unchanged
        if not self._native.closed:
            self._native.finish()
        return False


_INT_WIDTHS = {"I8": 1, "U8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8}


def _bit_view(got: str, want: str) -> bool:
    """Whether a ``got`` chunk is the bit pattern of ``want`` values: an integer dtype
    of the same width (``int16`` for BF16 or F16)."""
    width = _INT_WIDTHS.get(got)
    return width is not None and width * 8 == _native.dtype_bits(want)


def _little(a: Any) -> Any:
    return a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a


def _c_order_pieces(a: Any) -> Iterator[Any]:
    """``a``'s elements in C order, little-endian, as contiguous pieces of
    about ``_PIECE`` bytes: views of a contiguous array, small copies of
    any other (Fortran, strided, big-endian)."""
    np = _numpy()
    if a.size == 0:
        return
    if a.ndim == 0:
        yield _little(a.reshape(1))
        return
    if a.flags.c_contiguous:
        flat = a.reshape(-1)
        step = max(1, _PIECE // a.itemsize)
        for i in range(0, flat.shape[0], step):
            yield _little(flat[i : i + step])
        return
    row_bytes = (a.size // a.shape[0]) * a.itemsize
    if a.ndim > 1 and row_bytes >= _PIECE:
        for row in a:
            yield from _c_order_pieces(row)
        return
    rows = max(1, _PIECE // max(1, row_bytes))
    for i in range(0, a.shape[0], rows):
        yield _little(np.ascontiguousarray(a[i : i + rows]))


def save_file(
    tensors: Mapping[str, Any], filename: str | os.PathLike[str], metadata: Mapping[str, str] | None = None
) -> None:
    """Saves numpy arrays as ``safetensors.numpy.save_file`` does, byte for
    byte, streaming each array in C order (Fortran, strided and big-endian
    arrays too) without copying it whole. The file appears atomically."""
    import numpy as np

    arrays = {name: np.asarray(a) for name, a in tensors.items()}
    specs = [(name, safetensors_name(a.dtype), a.shape) for name, a in arrays.items()]
    with Writer(filename, specs, metadata=metadata) as w:
        for name in w.order:
            for piece in _c_order_pieces(arrays[name]):
                w.write(name, piece)


def _stderr_progress() -> Callable[[int, int, str], None]:
    """``progress=True``: a line on stderr at most once a second, as the
    CLI's ``--progress`` prints when stderr is not a terminal."""
    import time

    last = [0.0]

    def show(done: int, total: int, tensor: str) -> None:
        now = time.monotonic()
        if done not in (0, total) and now - last[0] < 1.0:
            return
        last[0] = now
        percent = 100 * done // max(total, 1)
        print(f"progress: {done} / {total} bytes ({percent}%), {tensor}", file=sys.stderr, flush=True)

    return show


def _size(keyword: str, value: int | str | None) -> str | None:
    if isinstance(value, bool):
        raise TypeError(f'{keyword} is a size (5_000_000_000 or "5GB"), not a bool')
    return None if value is None else str(value)


def convert(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str] | None = None,
    *,
    max_shard_size: int | str | None = None,
    cast_all: str | None = None,
    cast: Mapping[str, str] | None = None,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    rename: Mapping[str, str] | None = None,
    strip_prefix: str | None = None,
    rename_regex: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
    prefix: str | None = None,
    metadata: Mapping[str, str] | None = None,
    order: str = "canonical",
    checksum: bool | str = False,
    sync: bool = True,
    skip_non_npy: bool = False,
    name: str | None = None,
    allow_empty: bool = False,
    overwrite_input: bool = False,
    npy_void_as: str | None = None,
    dry_run: bool = False,
    dedupe_tied: bool = False,
    pt_root: str | None = None,
    allow_expanded_views: bool = False,
    dequantize: bool = False,
    dequantize_to: str | None = None,
    gguf_metadata: bool = False,
    names: str | None = None,
    raw_dtype: str | None = None,
    raw_shape: str | Sequence[int] | None = None,
    raw_offset: int = 0,
    raw_byte_order: str = "little",
    raw_manifest: str | os.PathLike[str] | None = None,
    raw_allow_trailing: bool = False,
    shard: int | None = None,
    shard_stride: int | None = None,
    index_only: bool = False,
    expect_plan: str | None = None,
    buffer_size: int | str | None = None,
    limits: Mapping[str, int | str] | None = None,
    progress: bool | Callable[[int, int, str], None] = False,
) -> dict[str, Any]:
    """Converts ``inputs`` (.npy, .npz, safetensors, sharded index, PyTorch
    checkpoints, GGUF, quantized safetensors, raw dumps, compressed or not;
    local paths or object URLs: ``s3://``, ``gs://``, ``az://``,
    ``https://`` as inputs) into ``output`` (a path, an object URL, or
    ``"-"``: standard output), as the ``convert`` CLI does, with
    credentials from the environment as for the CLI, and returns the dict
    its ``--report json`` prints.

    Every option of the CLI is a keyword: ``--allow-empty`` is
    ``allow_empty=True``, ``--no-sync`` is ``sync=False``, ``--cast F32=BF16``
    is ``cast={"F32": "BF16"}``, ``--raw-shape 4,256`` is
    ``raw_shape=(4, 256)`` (or ``"4,256"``); ``_native.convert_options()``
    lists them. Error messages name the keywords. ``include``/``exclude``:
    one glob or a list of them. Dtypes (``cast_all="bf16"``,
    ``cast={"F32": "bfloat16"}``, ``npy_void_as``, ``raw_dtype``) take the
    safetensors, numpy or torch spellings. ``dry_run=True`` writes nothing
    and returns the plan, as ``convert --dry-run --json`` prints it
    (``output`` may then be left out). ``progress=True`` prints a line on
    stderr at most once a second; a callable gets ``(bytes_done,
    bytes_total, tensor)``. Notices are the report's ``"warnings"``; those
    that are warnings (tied weights written twice, a checkpoint's skipped
    values, its tensors only under keys ``pt_root`` could take) are also
    issued as ``UserWarning``.
    ``limits={"pickle-budget": "512MiB", "expansion-ratio": 64}`` sets the
    CLI's ``--limit`` bounds (names and defaults: ``safetensors-convert --help``); a
    refusal by one names it."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    inputs = [os.fspath(i) for i in inputs]
    if output is None:
        if not dry_run:
            raise UsageError("convert() needs an output (a path, a URL or \"-\") unless dry_run=True", "usage")
        stem = os.path.basename(inputs[0].rstrip("/")).split(".")[0] if inputs else ""
        output = f"{stem or 'model'}.safetensors"
    if os.fspath(output) == "-" and not dry_run:
        sys.stdout.flush()  # what Python buffered goes before the file
    if checksum not in (True, False, "sha256"):
        raise UsageError(f'checksum is True (or "sha256", the only algorithm), not {checksum!r}', "usage")
    if raw_shape is not None and not isinstance(raw_shape, str):
        raw_shape = ",".join(str(int(d)) for d in raw_shape)
    if progress is True:
        progress = _stderr_progress()
    elif progress is not False and not callable(progress):
        raise UsageError(f"progress is True, False or a callable, not {progress!r}", "usage")
    meta = _metadata(metadata)
    text = _native.convert(
        inputs,
        os.fspath(output),
        max_shard_size=_size("max_shard_size", max_shard_size),
        cast_all=cast_all,
        casts=_pairs("cast", cast),
        include=_names("include", include),
        exclude=_names("exclude", exclude),
        renames=_pairs("rename", rename),
        strip_prefix=strip_prefix,
        rename_regex=_pairs("rename_regex", rename_regex),
        prefix=prefix,
        metadata=list((meta or {}).items()),
        order=order,
        checksum=bool(checksum),
        sync=sync,
        skip_non_npy=skip_non_npy,
        name=name,
        allow_empty=allow_empty,
        overwrite_input=overwrite_input,
        npy_void_as=npy_void_as,
        dry_run=dry_run,
        dedupe_tied=dedupe_tied,
        pt_root=pt_root,
        allow_expanded_views=allow_expanded_views,
        dequantize=dequantize,
        dequantize_to=dequantize_to,
        gguf_metadata=gguf_metadata,
        names=names,
        raw_dtype=raw_dtype,
        raw_shape=raw_shape,
        raw_offset=int(raw_offset),
        raw_byte_order=raw_byte_order,
        raw_manifest=None if raw_manifest is None else os.fspath(raw_manifest),
        raw_allow_trailing=raw_allow_trailing,
        shard=shard,
        shard_stride=shard_stride,
        index_only=index_only,
        expect_plan=expect_plan,
        buffer_size=_size("buffer_size", buffer_size),
        limits=[(str(k), str(v)) for k, v in (limits or {}).items()],
        progress=progress or None,
    )
    report: dict[str, Any] = json.loads(text)
    return report
