import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from ._errors import BadInputError as BadInputError
from ._errors import EnvironmentIOError as EnvironmentIOError
from ._errors import Error as Error
from ._errors import IOError as IOError  # noqa: A004 - the 0.1 name of EnvironmentIOError
from ._errors import UsageError as UsageError

__all__ = [
    "BadInputError",
    "EnvironmentIOError",
    "Error",
    "UsageError",
    "Writer",
    "convert",
    "save_file",
]

__version__: str

# A safetensors name ("BF16", "F32", ...), a torch dtype, or anything numpy.dtype() accepts.
DTypeLike = Any
# Any C-contiguous buffer: bytes, bytearray, memoryview, numpy array, ...; or a torch
# tensor of any device and strides (written in C order; see safetensors_stream.torch).
Buffer = Any
PathLike = str | os.PathLike[str]

class Writer:
    def __init__(
        self,
        path_or_fileobj: PathLike | Any,
        tensors: Sequence[tuple[str, DTypeLike, Iterable[int]]],
        metadata: Mapping[str, str] | None = None,
        order: str = "canonical",
        *,
        sync: bool = True,
    ) -> None: ...
    @property
    def order(self) -> list[str]: ...
    @property
    def bytes_written(self) -> int: ...
    @property
    def file_len(self) -> int: ...
    def write(self, name: str, chunk: Buffer) -> None: ...
    def finish(self) -> None: ...
    def abort(self) -> None: ...
    def __enter__(self) -> Writer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

def save_file(
    tensors: Mapping[str, Any], filename: PathLike, metadata: Mapping[str, str] | None = None
) -> None: ...
def convert(
    inputs: PathLike | Sequence[PathLike],
    output: PathLike | None = None,
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
    raw_manifest: PathLike | None = None,
    raw_allow_trailing: bool = False,
    shard: int | None = None,
    shard_stride: int | None = None,
    index_only: bool = False,
    expect_plan: str | None = None,
    buffer_size: int | str | None = None,
    limits: Mapping[str, int | str] | None = None,
    progress: bool | Callable[[int, int, str], None] = False,
) -> dict[str, Any]: ...
