"""The traps a new user met in the Python package (issue 30): strings split
into characters, missing options, CLI flags in messages, dtype spellings,
packaging facts and error classes."""

import json
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy as ref

import safetensors_stream as sts

NPZ = "example/model.npz"


def names(path):
    return sorted(ref.load_file(path))


# ---- 1: one string is one pattern ------------------------------------------------------------


def test_a_string_include_or_exclude_is_one_glob_not_its_characters(tmp_path, fixtures):
    src = fixtures / NPZ
    every = names(fixtures / "example/model.safetensors")
    out = tmp_path / "ex.safetensors"
    report = sts.convert(src, out, exclude="layer.0.*")
    assert names(out) == [n for n in every if not n.startswith("layer.0.")]
    assert report["tensors"] == len(every) - 2

    only = tmp_path / "in.safetensors"
    sts.convert(src, only, include="layer.1.weight")
    assert names(only) == ["layer.1.weight"]


def test_patterns_that_are_not_strings_are_a_type_error(tmp_path, fixtures):
    with pytest.raises(TypeError, match="include"):
        sts.convert(fixtures / NPZ, tmp_path / "o.safetensors", include=[b"layer.*"])
    with pytest.raises(TypeError, match="bytes"):
        sts.convert(fixtures / NPZ, tmp_path / "o.safetensors", exclude=b"layer.*")


# ---- 5: the CLI's options, and messages that name them for Python too ------------------------


def test_dry_run_returns_the_plan_and_writes_nothing(tmp_path, fixtures):
    out = tmp_path / "plan.safetensors"
    plan = sts.convert(fixtures / NPZ, out, dry_run=True, cast_all="bf16")
    assert plan["ok"] is True
    assert not out.exists()
    assert plan["tensors"] == 5
    assert plan["outputs"][0]["path"] == str(out)
    assert {t["dtype"] for t in plan["outputs"][0]["tensors"]} == {"BF16", "I64"}
    assert plan["casts"], plan


def test_allow_empty_is_an_option_and_the_refusal_names_it(tmp_path, fixtures):
    out = tmp_path / "empty.safetensors"
    with pytest.raises(sts.UsageError) as refused:
        sts.convert(fixtures / NPZ, out, include="nothing.*")
    assert "allow_empty" in str(refused.value)
    assert "pass --allow-empty" not in str(refused.value)
    report = sts.convert(fixtures / NPZ, out, include="nothing.*", allow_empty=True)
    assert report["tensors"] == 0
    assert names(out) == []


def test_overwrite_input_is_an_option_and_the_refusal_names_it(tmp_path, fixtures):
    model = tmp_path / "model.safetensors"
    model.write_bytes((fixtures / "example/model.safetensors").read_bytes())
    with pytest.raises(sts.UsageError) as refused:
        sts.convert(model, model, cast_all="F16")
    assert "overwrite_input" in str(refused.value)
    sts.convert(model, model, cast_all="F16", overwrite_input=True)
    assert {str(a.dtype) for a in ref.load_file(model).values()} == {"float16", "int64"}


def test_npy_void_as_is_an_option_and_the_refusal_names_it(tmp_path):
    raw = np.arange(6, dtype="<u2").view("V2")
    src = tmp_path / "w.npy"
    np.save(src, raw)
    out = tmp_path / "w.safetensors"
    with pytest.raises(sts.BadInputError) as refused:
        sts.convert(src, out)
    assert "npy_void_as" in str(refused.value)
    sts.convert(src, out, npy_void_as="bfloat16")
    header = json.loads(out.read_bytes()[8 : 8 + int.from_bytes(out.read_bytes()[:8], "little")])
    assert header["w"]["dtype"] == "BF16"


# ---- 6: dtype spellings ----------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["bf16", "BF16", "bfloat16", "torch.bfloat16"])
def test_cast_all_takes_every_common_spelling(tmp_path, fixtures, spelling):
    out = tmp_path / "m.safetensors"
    sts.convert(fixtures / NPZ, out, cast_all=spelling, cast={"fp16": "float32"})
    dtypes = {json.dumps(v["dtype"]) for k, v in _header(out).items() if k != "__metadata__"}
    assert dtypes == {'"BF16"', '"F32"', '"I64"'}  # F32 to BF16, F16 to F32, the step kept


def test_writer_takes_the_library_spellings(tmp_path):
    out = tmp_path / "w.safetensors"
    with sts.Writer(out, [("a", "fp32", (2,)), ("b", "torch.int64", ()), ("c", "<f2", (1,))]) as w:
        for name in w.order:
            n = {"a": 8, "b": 8, "c": 2}[name]
            w.write(name, bytes(n))
    h = _header(out)
    assert (h["a"]["dtype"], h["b"]["dtype"], h["c"]["dtype"]) == ("F32", "I64", "F16")


def test_an_unknown_dtype_lists_every_name_as_given(tmp_path, fixtures):
    with pytest.raises(sts.UsageError) as bad:
        sts.convert(fixtures / NPZ, tmp_path / "o.safetensors", cast_all="Float12")
    message = str(bad.value)
    assert '"Float12"' in message
    for name in ("BOOL", "F16", "BF16", "F8_E4M3", "F4", "U64"):
        assert name in message, message


# ---- 8: packaging ----------------------------------------------------------------------------


def test_version_is_the_package_version():
    from importlib.metadata import version

    assert sts.__version__ == version("safetensors-stream")


def test_numpy_is_a_declared_dependency():
    from importlib.metadata import requires

    assert any(r.split(">")[0].split("=")[0].strip() == "numpy" for r in requires("safetensors-stream") or [])


# ---- 9: error classes, metadata, sizes -------------------------------------------------------


def test_io_errors_are_oserrors_and_star_import_keeps_the_builtin(tmp_path):
    with pytest.raises(OSError) as missing:
        sts.convert(tmp_path / "nope.npy", tmp_path / "o.safetensors")
    assert isinstance(missing.value, sts.EnvironmentIOError)
    assert isinstance(missing.value, sts.IOError)  # the old name still catches it
    assert isinstance(missing.value, sts.Error)
    assert missing.value.input == str(tmp_path / "nope.npy")
    assert "nope.npy" in str(missing.value)

    code = "from safetensors_stream import *\nimport builtins\nassert IOError is builtins.IOError, IOError\n"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "metadata, needle",
    [({"epoch": 3}, "metadata['epoch'] is a int"), ({7: "x"}, "metadata key 7")],
)
def test_non_string_metadata_is_a_type_error_naming_the_key(tmp_path, fixtures, metadata, needle):
    with pytest.raises(TypeError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        sts.save_file({"a": np.zeros(2, np.float32)}, tmp_path / "s.safetensors", metadata=metadata)
    with pytest.raises(TypeError, match="metadata"):
        with sts.Writer(tmp_path / "w.safetensors", [("a", "F32", (1,))], metadata=metadata):
            pass
    with pytest.raises(TypeError, match="metadata"):
        sts.convert(fixtures / NPZ, tmp_path / "c.safetensors", metadata=metadata)


def test_a_bad_shard_size_says_what_is_wrong(tmp_path, fixtures):
    with pytest.raises(sts.UsageError) as bad:
        sts.convert(fixtures / NPZ, tmp_path / "o.safetensors", max_shard_size="5XB")
    message = str(bad.value)
    assert message.startswith("max_shard_size: ")
    assert 'unknown unit "XB"' in message and "5GB" in message, message


def _header(path):
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n])


def test_writer_errors_speak_of_the_data_not_an_input(tmp_path):
    with pytest.raises(sts.Error) as long:
        with sts.Writer(tmp_path / "w.safetensors", [("a", "F32", (2,))]) as w:
            w.write("a", bytes(12))
    message = str(long.value)
    assert "input" not in message, message
    assert 'tensor "a"' in message and "8 bytes" in message, message
