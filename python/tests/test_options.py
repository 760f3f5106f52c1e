"""Issue 42.2: the Python ``convert`` takes every option the CLI takes, by
one table (python/src/options.rs, checked against clap's flags by the
CLI's tests and against this signature here), and its messages name the
options as Python keywords."""

import inspect
import json
import os
import signal
import struct
import threading
import time

import numpy as np
import pytest

import safetensors_stream as sts
from safetensors_stream import _native

OPTIONS = _native.convert_options()  # (flag, keyword or "", why not)


def tensors_of(path):
    """{name: (dtype, shape, bytes)} and the metadata of a safetensors file."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n :]
    got = {k: (v["dtype"], v["shape"], body[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in header.items()}
    return got, meta


def keywords_of(args):
    """A CLI argument list (`--pt-root X`, `--dedupe-tied`) as keywords, by the table."""
    by_flag = {flag: kw for flag, kw, _ in OPTIONS}
    kwargs, i = {}, 0
    while i < len(args):
        flag = args[i].removeprefix("--")
        kw = by_flag[flag]
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            kwargs[kw] = args[i + 1]
            i += 2
        else:
            kwargs[kw] = True
            i += 1
    return kwargs


def test_the_signature_is_the_table():
    params = inspect.signature(sts.convert).parameters
    keywords = {kw for _, kw, _ in OPTIONS if kw}
    assert set(params) - {"inputs"} == keywords
    for flag, kw, why in OPTIONS:
        assert bool(kw) != bool(why), flag  # a keyword, or why there is none
    # The ones issue 42 found missing.
    for kw in ["dedupe_tied", "dequantize_to", "pt_root", "gguf_metadata", "raw_dtype", "raw_shape",
               "raw_offset", "raw_byte_order", "raw_manifest", "raw_allow_trailing", "progress",
               "shard", "shard_stride", "index_only", "expect_plan", "buffer_size"]:
        assert kw in params


@pytest.mark.parametrize(
    "expected",
    ["tied.pt.dedupe.expected.json", "training-root.pt.expected.json", "tied.pt.expected.json"],
)
def test_pytorch_options_give_what_the_cli_gives(tmp_path, fixtures, expected):
    want = json.loads((fixtures / "pytorch/ok" / expected).read_text())
    stem = expected.removesuffix(".expected.json")
    src = fixtures / "pytorch/ok" / (stem if (fixtures / "pytorch/ok" / stem).exists() else stem.rsplit(".", 1)[0])
    out = tmp_path / "o.safetensors"
    sts.convert(src, out, **keywords_of(want["args"]))
    got, meta = tensors_of(out)
    assert meta == want["metadata"]
    assert {k: (d, s, b.hex()) for k, (d, s, b) in got.items()} == {
        k: (v["dtype"], v["shape"], v["hex"]) for k, v in want["tensors"].items()
    }


def test_gguf_dequantize_to(tmp_path, fixtures):
    out = tmp_path / "o.safetensors"
    report = sts.convert(fixtures / "gguf/types_le.gguf", out, dequantize_to="F32", gguf_metadata=True)
    got, meta = tensors_of(out)
    want, _ = tensors_of(fixtures / "gguf/expected_f32.safetensors")
    assert {k: got[k][2] for k in want} == {k: w[2] for k, w in want.items()}  # gguf-py writes BF16 as U16
    assert meta  # the scalar keys, as strings
    for notice in report["warnings"]:
        assert "--" not in notice, notice
    with pytest.raises(sts.UsageError, match="dequantize_to: dequantized weights are F32, F16 or BF16, not I8"):
        sts.convert(fixtures / "gguf/types_le.gguf", out, dequantize_to="I8")


def test_raw_dumps(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    dump = tmp_path / "w.bin"
    dump.write_bytes(b"\0" * 4 + a.astype(">f4").tobytes() + b"tail")
    out = tmp_path / "o.safetensors"
    sts.convert(dump, out, raw_dtype="float32", raw_shape=(2, 3), raw_offset=4, raw_byte_order="big",
                raw_allow_trailing=True, name="w")
    assert tensors_of(out)[0] == {"w": ("F32", [2, 3], a.tobytes())}
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([{"name": "x", "dtype": "F32", "shape": [3], "offset": 4}]))
    dump.write_bytes(b"\0" * 4 + a.tobytes()[:12])
    sts.convert(dump, out, raw_manifest=manifest)
    assert tensors_of(out)[0] == {"x": ("F32", [3], a.tobytes()[:12])}
    # The manifest is read under the caller's limits: index-bytes below its length refuses it.
    with pytest.raises(sts.BadInputError) as e:
        sts.convert(dump, out, raw_manifest=manifest, limits={"index-bytes": 16})
    assert 'limits={"index-bytes": "32"}' in str(e.value), str(e.value)
    with pytest.raises(sts.UsageError, match="both raw_dtype and raw_shape"):
        sts.convert(dump, out, raw_dtype="F32")


def test_an_output_onto_the_raw_manifest_is_refused(tmp_path):
    # The manifest is read as much as the dump: an output onto it (or a link
    # to it) would replace the dump's description with its conversion.
    dump = tmp_path / "w.bin"
    dump.write_bytes(bytes(range(16)))
    manifest = tmp_path / "m.json"
    text = json.dumps([{"name": "x", "dtype": "U8", "shape": [16], "offset": 0}])
    manifest.write_text(text)
    (tmp_path / "link.json").symlink_to(manifest)
    for out in (manifest, tmp_path / "link.json"):
        with pytest.raises(sts.UsageError) as e:
            sts.convert(dump, out, raw_manifest=manifest)
        assert e.value.kind == "output_is_input", e.value
        assert f"the input {manifest};" in str(e.value), str(e.value)
        assert e.value.output == str(out), e.value.output
        assert e.value.input == str(manifest), e.value.input
        assert manifest.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "m.json", "w.bin"]
    sts.convert(dump, manifest, raw_manifest=manifest, overwrite_input=True)
    assert tensors_of(manifest)[0] == {"x": ("U8", [16], bytes(range(16)))}


def test_a_fan_out_by_shard_index_only_and_expect_plan(tmp_path, fixtures):
    src = fixtures / "example/model-input.safetensors"
    whole = tmp_path / "whole/model.safetensors"
    whole.parent.mkdir()
    sts.convert(src, whole, max_shard_size="100B", buffer_size="64KiB")
    plan = sts.convert(src, tmp_path / "part/model.safetensors", max_shard_size="100B", dry_run=True)
    shards = sorted(p.name for p in whole.parent.iterdir())
    assert len(shards) >= 3, shards  # at least two shards and the index
    part = tmp_path / "part/model.safetensors"
    part.parent.mkdir()
    for k in range(1, len(shards)):
        sts.convert(src, part, max_shard_size="100B", shard=k, expect_plan=plan["plan_id"])
    sts.convert(src, part, max_shard_size="100B", index_only=True, expect_plan=plan["plan_id"])
    for name in shards:
        assert (part.parent / name).read_bytes() == (whole.parent / name).read_bytes(), name
    with pytest.raises(sts.BadInputError) as e:  # the inputs are not what the plan saw
        sts.convert(src, part, max_shard_size="100B", shard=1, expect_plan="0" * 16)
    assert "expect_plan" in str(e.value) and "--" not in str(e.value)


def test_a_strided_fan_out_writes_the_same_shards(tmp_path, fixtures):
    src = fixtures / "example/model-input.safetensors"
    whole = tmp_path / "whole/model.safetensors"
    whole.parent.mkdir()
    sts.convert(src, whole, max_shard_size="100B")
    plan = sts.convert(src, whole, max_shard_size="100B", dry_run=True)["plan_id"]
    names = sorted(p.name for p in whole.parent.iterdir())
    part = tmp_path / "part/model.safetensors"
    part.parent.mkdir()
    for k in (1, 2):  # worker K of 2 writes shards K, K+2, ...
        sts.convert(src, part, max_shard_size="100B", shard=k, shard_stride=2, expect_plan=plan)
    sts.convert(src, part, max_shard_size="100B", index_only=True, expect_plan=plan)
    for name in names:
        assert (part.parent / name).read_bytes() == (whole.parent / name).read_bytes(), name
    with pytest.raises(sts.UsageError) as e:
        sts.convert(src, part, max_shard_size="100B", shard_stride=2)
    assert "shard_stride" in str(e.value) and "--" not in str(e.value)


def test_messages_name_keywords_not_flags(tmp_path, fixtures):
    out = tmp_path / "o.safetensors"
    with pytest.raises(sts.UsageError) as e:
        sts.convert(fixtures / "example/model.npz", out, include="nothing.*")
    msg = str(e.value)
    assert 'include="nothing.*"' in msg and "allow_empty=True" in msg, msg
    assert "--" not in msg, msg
    with pytest.raises(sts.UsageError) as e:
        sts.convert(fixtures / "example/model-input.safetensors", out, cast_all="I8")
    assert 'cast_all="I8"' in str(e.value) and "--" not in str(e.value), str(e.value)
    with pytest.raises(sts.UsageError) as e:
        sts.convert(fixtures / "example/model-input.safetensors", out, rename={"nope": "x"})
    assert 'rename={"nope": "x"}' in str(e.value), str(e.value)


def test_progress_is_called_up_to_the_total(tmp_path, fixtures, capsys):
    calls = []
    out = tmp_path / "o.safetensors"
    sts.convert(fixtures / "example/model-input.safetensors", out, progress=lambda *a: calls.append(a))
    assert calls[0][0] == 0 and calls[-1][0] == calls[-1][1] == out.stat().st_size
    sts.convert(fixtures / "example/model-input.safetensors", out, progress=True)
    assert "progress: " in capsys.readouterr().err


def _paced_fifo(path, total, piece=1 << 20, pause=0.1):
    """A FIFO at `path` fed `total` zero bytes a piece at a time (about
    three seconds for 32 MiB), so that a run reading it lasts."""
    os.mkfifo(path)

    def feed():
        try:
            with open(path, "wb") as f:
                for _ in range(total // piece):
                    f.write(bytes(piece))
                    f.flush()
                    time.sleep(pause)
        except BrokenPipeError:  # the run stopped reading
            pass

    threading.Thread(target=feed, daemon=True).start()


def test_ctrl_c_mid_convert_raises_keyboard_interrupt_and_leaves_no_output(tmp_path):
    # The run holds no GIL, so Python never ran its SIGINT handler: Ctrl-C
    # waited for the whole conversion, which was committed, and only then
    # raised. Now the run checks for signals and stops, its staged file removed.
    total = 32 << 20
    fifo = tmp_path / "dump.bin"
    _paced_fifo(fifo, total)
    out = tmp_path / "o.safetensors"
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sts.convert(fifo, out, raw_dtype="U8", raw_shape=(total,), name="x")
    assert time.monotonic() - started < 1.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump.bin"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_keyboard_interrupt_in_the_progress_callback_ends_the_run(tmp_path, fixtures):
    # Ctrl-C lands in the callback when Python code runs there: it was
    # reported as unraisable and the run went on to commit its output.
    def progress(done, total, tensor):
        raise KeyboardInterrupt

    total = 32 << 20
    fifo = tmp_path / "dump.bin"
    _paced_fifo(fifo, total)
    out = tmp_path / "o.safetensors"
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sts.convert(fifo, out, raw_dtype="U8", raw_shape=(total,), name="x", progress=progress)
    assert time.monotonic() - started < 1.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dump.bin"]
    # Any other exception is reported as unraisable, and the run goes on.
    sts.convert(fixtures / "example/model-input.safetensors", out, progress=lambda *a: 1 / 0)
    assert out.exists()


def test_output_may_be_left_out_of_a_dry_run(fixtures):
    plan = sts.convert(fixtures / "example/model.npz", dry_run=True)
    assert plan["outputs"][0]["path"] == "model.safetensors"  # after the input, as the CLI plans
    with pytest.raises(sts.UsageError, match="needs an output"):
        sts.convert(fixtures / "example/model.npz")


def test_limits_are_a_dict_and_a_refusal_names_its_keyword(tmp_path, fixtures):
    out = tmp_path / "o.safetensors"
    src = fixtures / "pytorch/ok/tied.pt"
    with pytest.raises(sts.BadInputError) as e:
        sts.convert(src, out, limits={"pickle-bytes": 64})
    msg = str(e.value)
    assert 'limits={"pickle-bytes": "128"}' in msg and "--" not in msg, msg
    assert not out.exists()
    sts.convert(src, out, limits={"pickle_bytes": "1MiB"})  # either spelling of the name
    assert out.exists()
    with pytest.raises(sts.UsageError, match="cannot be raised"):
        sts.convert(src, out, limits={"header-bytes": "200MB"})


def zeros_npy_gz(tmp_path, n):
    """An .npy.gz of ``n`` zero bytes: gzip makes 72 MiB about 70 KiB."""
    import gzip
    import io

    buf = io.BytesIO()
    np.save(buf, np.zeros(n, dtype=np.uint8))
    path = tmp_path / "zeros.npy.gz"
    path.write_bytes(gzip.compress(buf.getvalue(), compresslevel=1))
    return path


# Every limit from Python: (input, limits refusing it, the error's kind,
# limits that let it through). The second set shows the first refused by
# the limit named, not by any value at all: the expansion limits act in pairs
# (a checkpoint is refused past BOTH its ratio and its bytes).
LIMIT_CASES = {
    "header-bytes": ("example/model.safetensors", {"header-bytes": 16}, "header_bytes", {}),
    "pickle-bytes": ("pytorch/ok/tied.pt", {"pickle-bytes": 64}, "pickle_bytes", {}),
    "pickle-budget": ("pytorch/ok/tied.pt", {"pickle-budget": 0}, "pickle_budget", {}),
    "expansion-ratio": (
        "pytorch/ok/tied.pt",
        {"expansion-ratio": 2, "expanded-file-bytes": 0},
        "py_torch",
        {"expansion-ratio": 3, "expanded-file-bytes": 0},
    ),
    "expanded-view-bytes": (
        "pytorch/ok/tied.pt",
        {"expansion-ratio": 0, "expanded-view-bytes": 0},
        "expanded_view",
        {"expansion-ratio": 0},
    ),
    "expanded-file-bytes": (
        "pytorch/ok/tied.pt",
        {"expansion-ratio": 1, "expanded-file-bytes": 0},
        "py_torch",
        {"expansion-ratio": 1},
    ),
    "dcp-metadata-bytes": ("dcp/fsdp2", {"dcp-metadata-bytes": 4096}, "dcp_metadata_bytes", {}),
    "decoder-window": ("compressed/arr.npy.xz", {"decoder-window": "4KiB"}, "decoder_window", {}),
    "gguf-string-bytes": ("gguf/types_le.gguf", {"gguf-string-bytes": 1}, "gguf_string_bytes", {}),
    "index-bytes": ("pytorch/ok/sharded/pytorch_model.bin.index.json", {"index-bytes": 16}, "index_bytes", {}),
    "hdf5-chunk-row-bytes": ("hdf5/chunked.h5", {"hdf5-chunk-row-bytes": 16}, "hdf5_chunk_row_bytes", {}),
    "tensor-count": ("example/model.safetensors", {"tensor-count": 1}, "tensor_count", {}),
    "decompression-ratio": (None, {"decompression-ratio": 100}, "decompression_ratio", {}),
}


def test_every_limit_has_a_case_here():
    """The cases above are every ``Limit::ALL``, by the names its ``ROWS`` table gives."""
    import pathlib
    import re

    source = (pathlib.Path(__file__).parents[2] / "src/limits.rs").read_text()
    # ROWS: ("header-bytes", "header_bytes", ...), one row a limit.
    rows = source.split("const ROWS", 1)[1].split("];", 1)[0]
    names = set(re.findall(r'\(\s*"([a-z0-9]+(?:-[a-z0-9]+)+)",\s*"[a-z0-9_]+",', rows))
    assert names == set(LIMIT_CASES)


@pytest.mark.parametrize("name", sorted(LIMIT_CASES))
def test_each_limit_set_from_python_refuses_what_it_bounds(name, tmp_path, fixtures):
    src, low, kind, through = LIMIT_CASES[name]
    src = zeros_npy_gz(tmp_path, 72 << 20) if src is None else fixtures / src
    out = tmp_path / "o.safetensors"
    with pytest.raises(sts.Error) as e:
        sts.convert(src, out, limits=low)
    assert e.value.kind == kind, str(e.value)
    assert f'limits={{"{name}"' in str(e.value) or kind in ("py_torch", "expanded_view"), str(e.value)
    assert not out.exists()
    sts.convert(src, out, limits=through)
    assert out.exists()
