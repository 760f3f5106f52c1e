"""save_file against safetensors.numpy.save_file (0.8.0), the reference."""

import json

import numpy as np
import pytest
import safetensors.numpy as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import safetensors_stream as sts

DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "float16", "int32", "uint32", "float32", "float64", "int64", "uint64"]


def arrays():
    # Shapes include 0-d and empty ones; both byte orders.
    return st.sampled_from(DTYPES).flatmap(
        lambda dt: st.sampled_from(["<", ">"]).flatmap(
            lambda order: hnp.arrays(
                dtype=np.dtype(dt).newbyteorder(order) if np.dtype(dt).itemsize > 1 else np.dtype(dt),
                shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
            )
        )
    )


names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8).filter(
    lambda n: n != "__metadata__"
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tensors=st.dictionaries(names, arrays(), max_size=6),
    metadata=st.none() | st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
)
def test_byte_identical_to_the_reference(tmp_path, tensors, metadata):
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "ref.safetensors"
    ref.save_file(tensors, theirs, metadata=metadata)
    sts.save_file(tensors, ours, metadata=metadata)
    a, b = ours.read_bytes(), theirs.read_bytes()
    if not tensors and metadata is not None:
        # The reference then writes invalid JSON (`{},"__metadata__":{}}`);
        # ours is the valid header it meant.
        n = int.from_bytes(a[:8], "little")
        assert json.loads(a[8 : 8 + n]) == {"__metadata__": metadata}
        return
    if metadata is None or len(metadata) <= 1:
        assert a == b
    else:
        # The reference keeps metadata in a Rust HashMap: its entries come
        # out in a different order from run to run. Ours are sorted; all
        # else is byte-identical.
        n = int.from_bytes(a[:8], "little")
        assert len(a) == len(b) and a[:8] == b[:8] and a[8 + n :] == b[8 + n :]
        assert json.loads(a[8 : 8 + n]) == json.loads(b[8 : 8 + n])


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)),
        lambda: np.arange(100, dtype=np.int64)[::7],
        lambda: np.arange(60, dtype=">f8").reshape(3, 4, 5).transpose(2, 0, 1),
        lambda: np.broadcast_to(np.arange(3, dtype=np.int16), (4, 3)),
    ],
    ids=["fortran", "strided", "big-endian-transposed", "broadcast"],
)
def test_non_contiguous_arrays_are_written_in_c_order(tmp_path, make):
    # The reference writes such arrays' raw memory; the right bytes are
    # those of their C-contiguous copy.
    a = make()
    ours, theirs = tmp_path / "ours.safetensors", tmp_path / "ref.safetensors"
    sts.save_file({"a": a}, ours)
    ref.save_file({"a": np.ascontiguousarray(a)}, theirs)
    assert ours.read_bytes() == theirs.read_bytes()
    assert np.array_equal(ref.load_file(ours)["a"], a)


def test_large_fortran_array_in_pieces(tmp_path, monkeypatch):
    import safetensors_stream

    monkeypatch.setattr(safetensors_stream, "_PIECE", 64)  # many pieces, rows split
    a = np.asfortranarray(np.random.default_rng(1).random((40, 30)))
    sts.save_file({"a": a, "b": a[::3, ::2]}, tmp_path / "x.safetensors")
    back = ref.load_file(tmp_path / "x.safetensors")
    assert np.array_equal(back["a"], a) and np.array_equal(back["b"], a[::3, ::2])


def test_ml_dtypes_bfloat16(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 4)
    sts.save_file({"a": a, "t": a.T}, tmp_path / "x.safetensors")
    raw = (tmp_path / "x.safetensors").read_bytes()
    assert raw.count(b'"dtype":"BF16"') == 2
    assert raw.endswith(a.tobytes() + np.ascontiguousarray(a.T).tobytes())


def test_a_dtype_without_safetensors_equivalent_is_a_usage_error(tmp_path):
    with pytest.raises(sts.UsageError):
        sts.save_file({"a": np.array(["x"])}, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()
