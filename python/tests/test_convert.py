"""convert: the CLI's job and report as a call."""

import json
import os
import subprocess

import pytest
import safetensors.numpy as ref

import safetensors_stream as sts

from conftest import FIXTURES


def test_returns_the_report_and_writes_the_reference_bytes(tmp_path, fixtures):
    out = tmp_path / "model.safetensors"
    report = sts.convert([fixtures / "example/model.npz"], out, checksum=True)
    assert out.read_bytes() == (fixtures / "example/model.safetensors").read_bytes()
    assert report["ok"] is True
    assert report["inputs"] == [str(fixtures / "example/model.npz")]
    assert report["outputs"][0]["path"] == str(out)
    assert report["outputs"][0]["bytes"] == out.stat().st_size
    assert len(report["outputs"][0]["sha256"]) == 64
    assert report["tensors"] == len(ref.load_file(out))


def test_cast_shard_and_filters(tmp_path, fixtures):
    out = tmp_path / "m.safetensors"
    src = fixtures / "example/model-input.safetensors"
    names = list(ref.load_file(src))
    report = sts.convert(src, out, cast_all="BF16", exclude=[names[0]], max_shard_size=1)
    assert report["tensors"] == len(names) - 1
    assert len(report["outputs"]) > 1  # shards, then the index
    assert report["outputs"][-1]["path"].endswith(".index.json")


# The CLI as `cargo test` (run first by .ci/run) or `cargo build` left it,
# in the target folder cargo used (`CARGO_TARGET_DIR`, relative to the repo).
CLI = os.environ.get("CONVERT_BIN") or str(
    FIXTURES.parent / os.environ.get("CARGO_TARGET_DIR", "target") / "debug/safetensors-convert"
)


@pytest.mark.skipif(not os.path.exists(CLI), reason="build the CLI first (cargo build)")
def test_same_dict_as_the_cli_report(tmp_path, fixtures):
    cli = subprocess.run(
        [CLI, str(fixtures / "example/model.npz"),
         "-o", str(tmp_path / "cli.safetensors"), "--report", "json", "--cast-all", "F16"],
        capture_output=True, text=True, check=True,
    )
    theirs = json.loads(cli.stderr.strip().splitlines()[-1])
    ours = sts.convert(fixtures / "example/model.npz", tmp_path / "py.safetensors", cast_all="F16")
    for r in (theirs, ours):
        r.pop("seconds")
        r.pop("outputs")  # paths differ
    assert ours == theirs


def test_errors_are_typed_and_leave_nothing(tmp_path, fixtures):
    out = tmp_path / "out.safetensors"
    with pytest.raises(sts.IOError) as missing:
        sts.convert(tmp_path / "nope.npy", out)
    assert missing.value.input == str(tmp_path / "nope.npy")
    assert missing.value.kind == "io"
    assert missing.value.output is None

    not_a_folder = tmp_path / "file"
    not_a_folder.write_bytes(b"")
    with pytest.raises(sts.IOError) as blocked:
        sts.convert(fixtures / "example/model.npz", not_a_folder / "out.safetensors")
    assert blocked.value.output == str(not_a_folder / "out.safetensors")
    assert blocked.value.input is None
    not_a_folder.unlink()

    bad = tmp_path / "bad.safetensors"
    data = bytearray((fixtures / "example/model.safetensors").read_bytes())
    bad.write_bytes(data[:-3])  # truncated
    with pytest.raises(sts.BadInputError) as truncated:
        sts.convert(bad, out)
    assert truncated.value.input == str(bad)
    assert isinstance(truncated.value, sts.Error)

    with pytest.raises(sts.UsageError):
        sts.convert(fixtures / "example/model.npz", out, cast_all="F99")
    with pytest.raises(sts.UsageError):
        sts.convert(fixtures / "example/model.npz", out, max_shard_size="lots")
    assert os.listdir(tmp_path) == ["bad.safetensors"]
