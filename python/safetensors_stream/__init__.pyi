import os
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from ._errors import BadInputError as BadInputError
from ._errors import Error as Error
from ._errors import IOError as IOError
from ._errors import UsageError as UsageError

__all__ = ["BadInputError", "Error", "IOError", "UsageError", "Writer", "convert", "save_file"]

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
    output: PathLike,
    *,
    max_shard_size: int | str | None = None,
    cast_all: str | None = None,
    cast: Mapping[str, str] | None = None,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    rename: Mapping[str, str] | None = None,
    prefix: str | None = None,
    metadata: Mapping[str, str] | None = None,
    order: str = "canonical",
    checksum: bool = False,
    sync: bool = True,
    skip_non_npy: bool = False,
    name: str | None = None,
) -> dict[str, Any]: ...
