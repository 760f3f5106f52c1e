"""Chunks reach the file without Rust reading their memory (python/src/bytes.rs):
pieces of 1 MiB or more by write(2) from the buffer's pointer, shorter ones (and any bound
for a Python file object) copied by CPython. Same bytes either way; a buffer
mutated while it is written gives torn values, never a malformed file or a crash."""

import io
import subprocess
import sys

import numpy as np
import safetensors.numpy as ref

import safetensors_stream as sts

# Either side of the writer's buffer (1 MiB: longer pieces go by write(2) from
# their pointer) and of bytes.rs's PY_PIECE (1 MiB).
SIZES = [37, 1 << 20, 5, (1 << 20) - 1, 3 << 20, 1, 200_000]


class ShortWriter:
    """A raw-file-like object that takes at most `most` bytes a call."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.calls: list[int] = []
        self.out = bytearray()

    def write(self, b) -> int:
        n = min(len(b), self.most)
        self.calls.append(len(b))
        self.out += bytes(memoryview(b)[:n])
        return n


def _write(target, data: np.ndarray) -> None:
    with sts.Writer(target, [("a", "U8", data.shape)], metadata={"k": "v"}) as w:
        at = 0
        for i, n in enumerate(SIZES):
            piece = data[at : at + n]
            # numpy, bytearray and memoryview chunks on both paths
            w.write("a", [piece, bytearray(piece.tobytes()), memoryview(piece)][i % 3])
            at += n


def test_pieces_either_side_of_the_threshold_make_the_reference_bytes(tmp_path):
    data = np.random.default_rng(1).integers(0, 256, sum(SIZES), dtype=np.uint8)
    ref.save_file({"a": data}, tmp_path / "ref.safetensors", metadata={"k": "v"})
    want = (tmp_path / "ref.safetensors").read_bytes()

    _write(tmp_path / "path.safetensors", data)
    assert (tmp_path / "path.safetensors").read_bytes() == want

    with open(tmp_path / "fd.safetensors", "wb") as f:  # through a descriptor of its own
        f.write(b"PREFIX")
        _write(f, data)
    assert (tmp_path / "fd.safetensors").read_bytes() == b"PREFIX" + want

    out = io.BytesIO()
    _write(out, data)
    assert out.getvalue() == want


def test_a_python_file_object_gets_bounded_pieces_and_short_writes_are_finished():
    data = np.random.default_rng(2).integers(0, 256, sum(SIZES), dtype=np.uint8)
    out = ShortWriter(most=300_000)
    _write(out, data)
    assert ref.load(bytes(out.out))["a"].tobytes() == data.tobytes()
    # a 3 MiB chunk is handed over a MiB at a time, not as one 3 MiB copy
    assert max(out.calls) <= 1 << 20


MUTATED = r"""
import io, sys, threading
import numpy as np
import safetensors.numpy as ref
import safetensors_stream as sts

MIB = 1 << 20
a = np.full(8 * MIB, 0x11, dtype=np.uint8)   # numpy fills it with the GIL released
ba = bytearray(b"\x11" * (8 * MIB))          # Python code fills it, with the GIL
stop = threading.Event()

def mutate():
    k = 0
    while not stop.is_set():
        v = (0x11, 0x22)[k % 2]
        a[:] = v
        ba[: 4 * MIB] = bytes([v]) * (4 * MIB)
        k += 1

threads = [threading.Thread(target=mutate) for _ in range(2)]
for t in threads:
    t.start()
rounds = 12
n = rounds * (a.nbytes + len(ba) + 64 * 4096)
specs = [("t", "U8", (n,))]
mixed = 0

def write_all(target):
    with sts.Writer(target, specs, sync=False) as w:
        for _ in range(rounds):
            w.write("t", a)                           # one 8 MiB piece: write(2) from the pointer
            w.write("t", ba)
            for i in range(64):                       # small pieces: copied by CPython
                w.write("t", a[i * 4096 : (i + 1) * 4096])
        return w.file_len

path = sys.argv[1]
lens = {"path": write_all(path + ".p")}
with open(path + ".f", "wb") as f:
    lens["fd"] = write_all(f)
memory = io.BytesIO()
lens["bytesio"] = write_all(memory)
stop.set()
for t in threads:
    t.join()

blobs = {
    "path": open(path + ".p", "rb").read(),
    "fd": open(path + ".f", "rb").read(),
    "bytesio": memory.getvalue(),
}
for name, blob in blobs.items():
    assert len(blob) == lens[name], (name, len(blob), lens[name])
    t = ref.load(blob)["t"]                            # a valid header, the right length
    assert t.shape == (n,), (name, t.shape)
    counts = np.bincount(t, minlength=256)
    others = counts.sum() - counts[0x11] - counts[0x22]
    assert others == 0, (name, "bytes from outside the buffers", others)
    mixed += int(counts[0x11] > 0 and counts[0x22] > 0)
print("ok", mixed)
"""


def test_a_buffer_mutated_while_written_gives_a_well_formed_file(tmp_path):
    # In a child process, so that a crash is this test failing, not pytest dying.
    run = subprocess.run(
        [sys.executable, "-c", MUTATED, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("ok"), run.stdout
