"""convert on a PyTorch distributed checkpoint's folder: the tensors torch's
own reconstruction holds, the non-tensor values skipped and reported."""

import json
import struct

import pytest

import safetensors_stream as sts

CASES = ["shard0", "shard1", "mesh2d", "replicate", "fsdp2", "hf"]


def tensors(data):
    """A safetensors file's tensors, name -> (dtype, shape, bytes): read by
    hand, as numpy has no bfloat16."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    return {
        name: (t["dtype"], t["shape"], body[t["data_offsets"][0] : t["data_offsets"][1]])
        for name, t in header.items()
    }


@pytest.mark.parametrize("case", CASES)
def test_a_checkpoint_folder_converts_to_torchs_reconstruction(tmp_path, fixtures, case):
    out = tmp_path / "model.safetensors"
    report = sts.convert(fixtures / "dcp" / case, out)
    want = (fixtures / "dcp/expected" / f"{case}.safetensors").read_bytes()
    expected = tensors(want)
    assert tensors(out.read_bytes()) == expected
    assert report["tensors"] == len(expected)


def test_the_model_alone_and_the_skipped_values(tmp_path, fixtures):
    out = tmp_path / "model.safetensors"
    report = sts.convert(fixtures / "dcp/fsdp2", out, include=["model.*"], strip_prefix="model.")
    assert sorted(tensors(out.read_bytes())) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert any("skipped 12 non-tensor values" in w for w in report["warnings"])
