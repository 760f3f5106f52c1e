from collections.abc import Callable
from typing import Any

class NativeWriter:
    def __init__(
        self,
        target: str | int | Any,
        tensors: list[tuple[str, str, list[int]]],
        metadata: dict[str, str] | None = None,
        order: str = "canonical",
        sync: bool = True,
    ) -> None: ...
    @property
    def order(self) -> list[str]: ...
    @property
    def bytes_written(self) -> int: ...
    @property
    def file_len(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def write(self, name: str, chunk: Any) -> None: ...
    def finish(self) -> None: ...
    def abort(self) -> None: ...

def convert(
    inputs: list[str],
    output: str,
    *,
    max_shard_size: str | None = None,
    cast_all: str | None = None,
    casts: list[tuple[str, str]] = ...,
    include: list[str] = ...,
    exclude: list[str] = ...,
    renames: list[tuple[str, str]] = ...,
    strip_prefix: str | None = None,
    rename_regex: list[tuple[str, str]] = ...,
    prefix: str | None = None,
    metadata: list[tuple[str, str]] = ...,
    order: str = "canonical",
    checksum: bool = False,
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
    raw_shape: str | None = None,
    raw_offset: int = 0,
    raw_byte_order: str = "little",
    raw_manifest: str | None = None,
    raw_allow_trailing: bool = False,
    shard: int | None = None,
    shard_stride: int | None = None,
    index_only: bool = False,
    expect_plan: str | None = None,
    buffer_size: str | None = None,
    limits: list[tuple[str, str]] = ...,
    progress: Callable[[int, int, str], None] | None = None,
) -> str: ...
def convert_options() -> list[tuple[str, str, str]]: ...
def dtype_names() -> list[str]: ...
def dtype_name(spelling: str) -> str: ...
