"""The streaming Writer: commit on success, nothing at the path otherwise."""

import io
import os
import sys

import numpy as np
import pytest
import safetensors.numpy as ref

import safetensors_stream as sts


def test_pieces_of_any_size_make_the_reference_bytes(tmp_path):
    emb = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    step = np.array(7, dtype=np.int64)
    path = tmp_path / "out.safetensors"
    with sts.Writer(path, [("emb", "F32", emb.shape), ("step", np.int64, ())], metadata={"format": "pt"}) as w:
        assert w.order == ["step", "emb"]  # canonical: I64 sorts before F32
        assert not path.exists()
        for name in w.order:
            data = {"emb": emb, "step": step}[name]
            flat = data.reshape(-1).view(np.uint8)
            # bytes, memoryview and numpy pieces, of odd sizes
            for i in range(0, flat.size, 37):
                piece = flat[i : i + 37]
                w.write(name, [bytes(piece), memoryview(piece.tobytes()), piece][i % 3])
    ref_path = tmp_path / "ref.safetensors"
    ref.save_file({"emb": emb, "step": step}, ref_path, metadata={"format": "pt"})
    assert path.read_bytes() == ref_path.read_bytes()


def test_numpy_chunks_of_the_tensor_dtype(tmp_path):
    a = np.arange(10, dtype=np.float16)
    path = tmp_path / "x.safetensors"
    with sts.Writer(path, [("a", np.float16, a.shape)]) as w:
        w.write("a", a[:3])
        w.write("a", a[3:])
    assert np.array_equal(ref.load_file(path)["a"], a)


def test_bfloat16_from_ml_dtypes_and_torch_recipe_views(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.linspace(-2, 2, 12).astype(ml_dtypes.bfloat16).reshape(3, 4)
    path = tmp_path / "bf16.safetensors"
    with sts.Writer(path, [("a", ml_dtypes.bfloat16, a.shape)]) as w:
        w.write("a", a[:1])
        # the README's torch recipe: bf16 bytes viewed as int16
        w.write("a", a[1:].view(np.int16))
    raw = path.read_bytes()
    assert raw[-a.nbytes :] == a.tobytes()
    assert b'"dtype":"BF16"' in raw


def test_input_order_lays_tensors_as_declared(tmp_path):
    path = tmp_path / "x.safetensors"
    with sts.Writer(path, [("b", "F32", (1,)), ("a", "I64", (1,))], order="input") as w:
        assert w.order == ["b", "a"]
        w.write("b", np.float32(1).tobytes())
        w.write("a", np.int64(2).tobytes())
    assert ref.load_file(path)["a"][0] == 2


class Boom(Exception):
    pass


def test_an_exception_in_the_block_leaves_nothing_and_propagates_unchanged(tmp_path):
    path = tmp_path / "x.safetensors"
    raised = Boom("mine")
    with pytest.raises(Boom) as caught:
        with sts.Writer(path, [("a", "U8", (4,))]) as w:
            w.write("a", b"ab")
            raise raised
    assert caught.value is raised
    assert os.listdir(tmp_path) == []  # no temp file either


def test_an_existing_file_is_untouched_when_the_block_fails(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"old")
    with pytest.raises(Boom):
        with sts.Writer(path, [("a", "U8", (1,))]) as w:
            w.write("a", b"z")
            raise Boom()
    assert path.read_bytes() == b"old"


def test_a_short_tensor_leaves_nothing_and_says_which(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(sts.BadInputError) as caught:
        with sts.Writer(path, [("a", "F32", (4,)), ("b", "F32", (1,))], order="input") as w:
            w.write("a", b"1234")
    assert caught.value.kind == "tensor_too_short"
    assert caught.value.tensor == "a"
    # The file being written is the output; the bytes came from the caller.
    assert caught.value.output == str(path)
    assert caught.value.input is None
    assert os.listdir(tmp_path) == []


def test_a_tensor_never_written_is_an_error(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(sts.Error) as caught:
        with sts.Writer(path, [("a", "U8", (1,)), ("b", "U8", (1,))], order="input") as w:
            w.write("a", b"1")
    assert caught.value.kind == "unfinished"
    assert caught.value.tensor == "b"
    assert not path.exists()


def test_wrong_name_order_and_excess_are_typed_and_the_writer_goes_on(tmp_path):
    path = tmp_path / "x.safetensors"
    with sts.Writer(path, [("a", "U8", (2,)), ("b", "U8", (1,))], order="input") as w:
        with pytest.raises(sts.Error) as unknown:
            w.write("zz", b"1")
        assert unknown.value.kind == "tensor_not_found"
        with pytest.raises(sts.Error) as early:
            w.write("b", b"1")
        assert early.value.kind == "write_order"
        with pytest.raises(sts.Error) as excess:
            w.write("a", b"123")
        assert excess.value.kind == "tensor_too_long"
        w.write("a", b"12")
        w.write("b", b"3")
    assert path.read_bytes().endswith(b"123")


def test_usage_errors(tmp_path):
    with pytest.raises(sts.UsageError):
        sts.Writer(tmp_path / "x", [("a", "F99", (1,))])
    with pytest.raises(sts.UsageError):
        sts.Writer(tmp_path / "x", [("a", "F32", (-1,))])
    with pytest.raises(sts.UsageError):
        sts.Writer(tmp_path / "x", [("a", "F32", (1,))], order="sorted")
    with pytest.raises(sts.UsageError) as dup:
        sts.Writer(tmp_path / "x", [("a", "F32", (1,)), ("a", "F32", (1,))])
    assert isinstance(dup.value, sts.Error)
    w = sts.Writer(tmp_path / "x", [("a", "F32", (2, 2))])
    with pytest.raises(sts.UsageError):
        w.write("a", np.zeros(8, np.float32)[::2])  # not contiguous
    with pytest.raises(sts.UsageError):
        w.write("a", memoryview(bytes(32))[::2])  # a strided buffer, not numpy
    w.abort()
    with pytest.raises(sts.UsageError):
        w.write("a", b"1234")
    assert os.listdir(tmp_path) == []


def test_big_endian_numpy_chunks_are_written_little_endian(tmp_path):
    a = np.arange(6, dtype=">i4")
    path = tmp_path / "x.safetensors"
    with sts.Writer(path, [("a", "I32", (6,))]) as w:
        w.write("a", a)
    assert list(ref.load_file(path)["a"]) == list(range(6))


def test_to_a_file_object_with_fileno_after_its_own_bytes(tmp_path):
    path = tmp_path / "x.bin"
    with open(path, "wb") as f:
        f.write(b"PREFIX")  # buffered by Python: must land first
        with sts.Writer(f, [("a", "U8", (3,))]) as w:
            w.write("a", b"xyz")
        f.write(b"SUFFIX")
    data = path.read_bytes()
    assert data.startswith(b"PREFIX") and data.endswith(b"xyzSUFFIX")
    assert ref.load(data[6:-6])["a"].tobytes() == b"xyz"


def test_to_a_file_object_without_fileno():
    out = io.BytesIO()
    with sts.Writer(out, [("a", "U8", (3,))]) as w:
        w.write("a", bytearray(b"xyz"))
    assert ref.load(out.getvalue())["a"].tobytes() == b"xyz"


class _Says:
    """A file object whose write() keeps nothing and returns `said`."""

    def __init__(self, said):
        self.said = said

    def write(self, data):
        return self.said


@pytest.mark.parametrize("said", [-5, 10**30, 4.0, "all"])
def test_a_file_object_whose_write_lies_about_its_count_is_refused(said):
    # A count below 0, above the bytes given or not a number was taken for
    # "all written": the file lacked bytes and the writer said nothing.
    with pytest.raises(sts.EnvironmentIOError, match="not a count of the bytes written"):
        with sts.Writer(_Says(said), [("a", "U8", (3,))]) as w:
            w.write("a", b"xyz")


def test_a_file_object_whose_write_returns_none_wrote_everything():
    # Writers of users' own often return nothing: it means every byte.
    kept = []

    class Keeps:
        def write(self, data):
            kept.append(bytes(data))

    with sts.Writer(Keeps(), [("a", "U8", (3,))]) as w:
        w.write("a", b"xyz")
    assert ref.load(b"".join(kept))["a"].tobytes() == b"xyz"


def test_to_stdout(tmp_path):
    import subprocess

    code = (
        "import safetensors_stream as sts, sys\n"
        "print('text first', flush=False, file=sys.stdout)\n"
        "with sts.Writer('-', [('a', 'U8', (2,))]) as w:\n"
        "    w.write('a', b'hi')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True).stdout
    assert out.startswith(b"text first\n")
    assert ref.load(out[len(b"text first\n") :])["a"].tobytes() == b"hi"


def test_zero_byte_tensors_need_no_write(tmp_path):
    path = tmp_path / "x.safetensors"
    with sts.Writer(path, [("e", "F32", (0, 3)), ("a", "U8", (1,))]) as w:
        w.write("a", b"1")
    assert ref.load_file(path)["e"].shape == (0, 3)


def test_a_refused_writer_to_a_file_object_keeps_no_descriptor(tmp_path):
    fds = len(os.listdir("/proc/self/fd"))
    with open(tmp_path / "x.bin", "wb") as f:
        for _ in range(5):
            with pytest.raises(sts.UsageError):
                sts.Writer(f, [("a", "U8", (1,))], order="sorted")
            with pytest.raises(sts.UsageError):
                sts.Writer(f, [("a", "U8", (1,)), ("a", "U8", (1,))])
        assert len(os.listdir("/proc/self/fd")) == fds + 1


def test_the_gil_is_released_while_bytes_move():
    # The reader is a Python thread: were the GIL held while write(2)
    # blocks on the full pipe, it could never drain it (a deadlock, caught
    # by the timeout).
    import subprocess

    code = (
        "import os, threading, safetensors_stream as sts\n"
        "r, w = os.pipe()\n"
        "got = []\n"
        "def drain():\n"
        "    while chunk := os.read(r, 1 << 16):\n"
        "        got.append(len(chunk))\n"
        "t = threading.Thread(target=drain); t.start()\n"
        "with os.fdopen(w, 'wb') as f:\n"
        "    with sts.Writer(f, [('a', 'U8', (8 << 20,))]) as wr:\n"
        "        wr.write('a', bytes(8 << 20))\n"
        "t.join()\n"
        "print(sum(got))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    assert int(out.stdout) > 8 << 20


def test_a_chunk_of_another_dtype_is_refused_not_reinterpreted(tmp_path):
    # issue 30, item 9: float64 values written to an F32 tensor were taken as
    # twice as many float32 bit patterns.
    path = tmp_path / "x.safetensors"
    a = np.arange(4, dtype=np.float32)
    with sts.Writer(path, [("a", "F32", a.shape)]) as w:
        with pytest.raises(sts.UsageError, match=r"a: a F64 chunk for a F32 tensor"):
            w.write("a", a.astype(np.float64)[:2])
        with pytest.raises(sts.UsageError, match="F16 chunk"):
            w.write("a", a.astype(np.float16))
        # Refused chunks wrote nothing: the tensor is still whole to write.
        w.write("a", a[:1])
        w.write("a", a[1:3].view(np.uint8))  # raw bytes
        w.write("a", a[3:].view(np.int32))  # the bit pattern, same width
    assert np.array_equal(ref.load_file(path)["a"], a)


def test_the_native_writer_given_a_descriptor_leaves_it_open():
    # issue 37: an int was taken as a descriptor the writer owned, so
    # `NativeWriter(1, ...)` closed the process's stdout when it was done.
    import subprocess

    from safetensors_stream import _native

    code = (
        "import os, sys\n"
        "from safetensors_stream import _native\n"
        "w = _native.NativeWriter(1, [('a', 'U8', [1])], None, 'canonical', False)\n"
        "w.write('a', b'x')\n"
        "w.finish()\n"
        "del w\n"
        "os.fstat(1)\n"
        "os.write(1, b'|still open')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60)
    assert out.stdout.endswith(b"x|still open")
    r, w = os.pipe()
    try:
        for finish in (True, False):
            native = _native.NativeWriter(w, [("a", "U8", [2])], None, "canonical", False)
            if finish:
                native.write("a", b"ab")
                native.finish()
            else:
                native.abort()
            del native
            os.write(w, b"!")  # still the caller's, still open
        got = os.read(r, 1 << 16)
        # The finished file, then the aborted one's header: each followed by our "!".
        assert b"   ab!" in got and got.endswith(b"!") and got.count(b"!") == 2, got
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(sts.UsageError, match="file descriptor 987 is not open"):
        _native.NativeWriter(987, [("a", "U8", [1])], None, "canonical", False)
