#!/usr/bin/env python3
"""Benchmark harness for `convert` (issue 7, and the Performance part of issue 3).

One command:

    python3 benches/bench.py [--size-gib 1] [--runs 5] [--only W1,W2] [--out benches/results.md]
    python3 benches/bench.py --quick          # everything tiny, 1 run: a smoke test of the harness

It builds `cargo build --release`, generates deterministic inputs in a temporary directory,
then for each workload times, interleaved round by round (A B C, A B C, ...), with a warm page
cache, each tool's wall time and peak RSS (`/usr/bin/time -v`):

  cp            cp of the input file into the output directory (the physical limit)
  cp+sync       the same, then fsync of the copy and of its directory (pairs with convert's
                default mode, which fsyncs the file and the directory)
  python        the reference a user would run instead (np.load / load_file + save_file);
                it does not fsync, so it pairs with `convert --no-sync`
  convert --no-sync, convert (default, fsync)

Every convert output is verified (convert validate, then every tensor compared with the input's
arrays) so that a broken fast path cannot win. See benches/README.md for the columns and caveats.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import shlex
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import formats  # the workloads of issue 43 (ONNX, Flax MsgPack, HDF5), beside this file

REPO = Path(__file__).resolve().parent.parent
GIB = 1 << 30
MIB = 1 << 20
CHUNK = 8 * MIB

WORKLOADS = ["npz-stored", "npz-deflated", "npy", "safetensors", "safetensors-many", "reshard", "npz-small", "plan-1m", "pytorch", "gguf", "dcp-fsdp", "dcp-tp", "onnx", "onnx-external", "msgpack", "hdf5", "hdf5-chunked"]

# Targets of issues 7 and 15 (ratios of medians measured side by side in one run).
T_COPY = 1.10  # convert / cp (stored npz, npy, safetensors, resharding)
T_DEFLATE_PY = 0.40  # deflated npz: convert / Python
T_DEFLATE_ZLIB = 0.55  # deflated npz: convert / one thread of zlib, with and without fsync (issue 15)
T_SMALL_PY = 0.05  # 20,000 small arrays: convert / Python
T_SMALL_AMN = 0.5  # 20,000 small arrays: convert / amn (crate anamnesis), the fastest peer
AMN_TOOL = "amn convert (anamnesis 0.7.10)"
T_PLAN_S = 1.0  # planning 1,000,000 tensors, seconds
T_PLAN_GROWTH = 1.25  # t(n_max)/t(n_min) at most this times what n log n predicts
T_RSS_MIB = 32.0  # peak RSS of convert, every data workload
T_HEADER_RSS = 3.0  # plan-1m: peak RSS of convert at most this many times the header's bytes (issue 15)
T_PYTORCH = 1.20  # PyTorch checkpoint: convert --no-sync / cp (issue 12)
T_DCP_TORCH = 0.5  # distributed checkpoint: convert --no-sync / (dcp_to_torch_save + save_file) (issue 38)
T_DCP_CP = 1.0  # distributed checkpoint: convert --no-sync / cp of its .distcp bytes (issue 38)
T_GGUF_AMN = 0.5  # GGUF to BF16: convert --no-sync / amn (issue 28)
GGUF_AMN_TOOL = "amn convert --to safetensors"
GGUF_PY_TOOL = "gguf-py dequantize + save_file"

# GGUF workload (issue 28): a llama.cpp-like file, written by gguf-py's GGUFWriter from random
# blocks with sane f16 scales, and the reference that dequantizes it with gguf-py and saves BF16
# (as the u16 bit patterns: numpy has no bfloat16) with safetensors.numpy.
GGUF_GEN_PY = r'''
import sys
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
path, total = sys.argv[1], int(sys.argv[2])
# f16 scale fields per block (d, dmin): everything else is random code bits.
F16 = {T.Q4_K: [0, 2], T.Q6_K: [208], T.Q8_0: [0]}
rng = np.random.default_rng(28)
def blocks(qtype, rows, cols):
    bs, ts = GGML_QUANT_SIZES[qtype]
    n = rows * cols // bs
    b = rng.integers(0, 256, size=(n, ts), dtype=np.uint8)
    for at in F16[qtype]:
        d = (rng.uniform(-1, 1, n) * 2.0**-6).astype(np.float16)
        b[:, at:at + 2] = d.view(np.uint8).reshape(n, 2)
    return b.reshape(rows, cols // bs * ts)
hidden, ffn, vocab = 2048, 5632, 32000
w = GGUFWriter(path, arch="llama")
w.add_name("bench")
w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(vocab)])
w.add_tensor("token_embd.weight", blocks(T.Q8_0, vocab, hidden), raw_dtype=T.Q8_0)
size, i = vocab * hidden * 34 // 32, 0
while size < total:
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", rng.standard_normal(hidden).astype(np.float32))
    for n in ["attn_q", "attn_k", "attn_output"]:
        w.add_tensor(p + n + ".weight", blocks(T.Q4_K, hidden, hidden), raw_dtype=T.Q4_K)
    w.add_tensor(p + "attn_v.weight", blocks(T.Q6_K, hidden, hidden), raw_dtype=T.Q6_K)
    w.add_tensor(p + "ffn_norm.weight", rng.standard_normal(hidden).astype(np.float32))
    w.add_tensor(p + "ffn_gate.weight", blocks(T.Q4_K, ffn, hidden), raw_dtype=T.Q4_K)
    w.add_tensor(p + "ffn_up.weight", blocks(T.Q4_K, ffn, hidden), raw_dtype=T.Q4_K)
    w.add_tensor(p + "ffn_down.weight", blocks(T.Q6_K, hidden, ffn), raw_dtype=T.Q6_K)
    size += hidden * hidden * (3 * 144 + 210) // 256 + hidden * ffn * (2 * 144 + 210) // 256 + 8 * hidden
    i += 1
w.add_tensor("output_norm.weight", rng.standard_normal(hidden).astype(np.float32))
w.add_tensor("output.weight", blocks(T.Q6_K, vocab, hidden), raw_dtype=T.Q6_K)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
'''

# A distributed checkpoint saved by torch on CPU by 4 gloo processes: 16 float32 tensors of
# 1024 rows, cut in row blocks (FSDP: Shard(0)) or column blocks (tensor parallel: Shard(1)).
DCP_GEN_PY = r'''
import sys, tempfile
import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp, torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
def work(rank, out, total, dim, init):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=4)
    mesh = init_device_mesh("cpu", (4,))
    rows = 1024
    cols = max(4, total // (16 * rows * 4))
    g = torch.Generator().manual_seed(1)
    sd = {f"model.layers.{i}.weight": distribute_tensor(torch.randn(rows, cols, generator=g), mesh, [Shard(dim)]) for i in range(16)}
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(out))
    dist.barrier()
    dist.destroy_process_group()
if __name__ == "__main__":
    out, total, dim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(work, args=(out, total, dim, "file://" + tmp + "/rdv"), nprocs=4, join=True)
'''

# torch's own way to one safetensors file: dcp_to_torch_save, then load and save_file.
DCP_REF_PY = r'''
import os, sys
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from safetensors.torch import save_file
src, out = sys.argv[1], sys.argv[2]
pt = out + ".pt"
dcp_to_torch_save(src, pt)
sd = torch.load(pt, weights_only=True)
os.remove(pt)
save_file({k: v.contiguous() for k, v in sd.items()}, out, metadata={"format": "pt"})
'''

GGUF_REF_PY = r'''
import sys
import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as T
from gguf.quants import dequantize
from safetensors.numpy import save_file
src, out = sys.argv[1], sys.argv[2]
r = GGUFReader(src)
tensors = {}
for t in r.tensors:
    if t.tensor_type in (T.F32, T.F16, T.BF16):
        tensors[t.name] = np.asarray(t.data).copy()
        continue
    x = dequantize(t.data, t.tensor_type)
    n = x.view(np.uint32).astype(np.uint64)
    tensors[t.name] = ((n + 0x7FFF + ((n >> 16) & 1)) >> 16).astype(np.uint16)
save_file(tensors, out)
'''

# The Python reference, run as a subprocess: `python3 ref.py MODE IN OUT [ARG]`.
REF_PY = r'''
import json, os, struct, sys, time, zipfile, zlib
mode, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "zlib":
    # One thread of zlib inflating the npz's members: raw deflate over each member's bytes,
    # 1 MiB of input at a time, output discarded. Reading the raw bytes is not timed.
    zf = zipfile.ZipFile(src)
    elapsed, total, expect = 0.0, 0, 0
    with open(src, "rb") as f:
        for zi in zf.infolist():
            f.seek(zi.header_offset)
            h = f.read(30)
            n, m = struct.unpack("<HH", h[26:30])
            f.seek(zi.header_offset + 30 + n + m)
            raw = memoryview(f.read(zi.compress_size))
            expect += zi.file_size
            t0 = time.perf_counter()
            d = zlib.decompressobj(-15)
            for i in range(0, len(raw), 1 << 20):
                total += len(d.decompress(raw[i:i + (1 << 20)]))
            total += len(d.flush())
            elapsed += time.perf_counter() - t0
    assert total == expect, (total, expect)
    print(f"{elapsed:.6f} {total}")
    sys.exit(0)
import numpy as np
from safetensors.numpy import load_file, save_file
if mode == "npz":
    d = np.load(src)
    save_file({k: d[k] for k in d.files}, out)
elif mode == "npy":
    save_file({os.path.basename(src)[:-4]: np.load(src)}, out)
elif mode == "safetensors":
    save_file(load_file(src), out)
elif mode == "reshard":
    # What a user writes: greedy shards (huggingface_hub's rule), save_file each, an index.
    limit = int(sys.argv[4])
    tensors = load_file(src)
    shards, cur, size = [], {}, 0
    for k, v in tensors.items():
        if cur and size + v.nbytes > limit:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = v
        size += v.nbytes
    if cur:
        shards.append(cur)
    d, base = os.path.dirname(out), os.path.basename(out)[: -len(".safetensors")]
    wm = {}
    for i, s in enumerate(shards, 1):
        fn = f"{base}-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(s, os.path.join(d, fn))
        wm.update({k: fn for k in s})
    total = sum(v.nbytes for v in tensors.values())
    with open(os.path.join(d, base + ".safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)
else:
    sys.exit(f"unknown mode {mode}")
'''


# ----------------------------------------------------------------------------- measurement


@dataclass
class Sample:
    wall: float
    rss_kib: int
    user: float = 0.0  # CPU seconds in user mode (GNU time; children included)
    sys: float = 0.0  # CPU seconds in the kernel
    round: int = 0  # the round it was measured in, to pair it with its partner


@dataclass
class Row:
    workload: str
    tool: str
    nbytes: int  # bytes the MB/s column divides (input file size; uncompressed bytes for zlib)
    samples: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    cp_ref: str | None = None  # tool this row's "x cp" divides by
    py_ref: str | None = None  # tool this row's "x Python" divides by
    verified: str = ""  # "", "ok", or "WRONG: ..."

    def median(self):
        return statistics.median(s.wall for s in self.samples) if self.samples else None

    def minimum(self):
        return min(s.wall for s in self.samples) if self.samples else None

    def rss_mib(self):
        # Median of the peak RSS over the runs (it barely varies).
        return statistics.median(s.rss_kib for s in self.samples) / 1024 if self.samples else None

    def max_rss_mib(self):
        return max(s.rss_kib for s in self.samples) / 1024 if self.samples else None

    def median_cpu(self, what):
        return statistics.median(getattr(s, what) for s in self.samples) if self.samples else None

    def by_round(self):
        return {s.round: s for s in self.samples}


TIMEOUT_RC = -999


def paired_ratio(row: Row, ref: Row):
    """The median over rounds of row's time / ref's time in the same round: the pair ran back
    to back, so a load that comes and goes hits both members alike."""
    mine, theirs = row.by_round(), ref.by_round()
    q = [mine[k].wall / theirs[k].wall for k in mine if k in theirs and theirs[k].wall > 0]
    return statistics.median(q) if q else None


# Checks a converted GGUF: the first tensor of each ggml type, bit for bit against gguf-py.
GGUF_CHECK_PY = r'''
import sys
import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as T
from gguf.quants import dequantize
import json, struct
src, out = sys.argv[1], sys.argv[2]
# The output's raw bytes (numpy reads no BF16 without ml_dtypes).
data = np.memmap(out, dtype=np.uint8, mode="r")
n = struct.unpack("<Q", bytes(data[:8]))[0]
header = json.loads(bytes(data[8:8 + n]))
def raw(name):
    b, e = header[name]["data_offsets"]
    return bytes(data[8 + n + b:8 + n + e])
seen = set()
for t in GGUFReader(src).tensors:
    if t.tensor_type in seen:
        continue
    seen.add(t.tensor_type)
    if t.tensor_type == T.F32:
        assert raw(t.name) == np.asarray(t.data).tobytes(), t.name
        continue
    x = dequantize(t.data, t.tensor_type).view(np.uint32).astype(np.uint64)
    want = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16)
    assert raw(t.name) == want.tobytes(), t.name
'''


def safetensors_tensors(path: Path):
    """{name: (dtype, shape, sha256 of its bytes)} of a safetensors file, read a tensor at a time."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        for name, t in header.items():
            b, e = t["data_offsets"]
            f.seek(8 + n + b)
            h = hashlib.sha256()
            left = e - b
            while left:
                chunk = f.read(min(left, CHUNK))
                h.update(chunk)
                left -= len(chunk)
            out[name] = (t["dtype"], tuple(t["shape"]), h.hexdigest())
    return out


def timed(cmd, workdir: Path, timefile: Path, timeout=None):
    """Run cmd under /usr/bin/time -v. Returns (wall s, (peak RSS KiB, user s, sys s), returncode,
    stdout, stderr).
    A run longer than timeout seconds is killed and returns TIMEOUT_RC."""
    if timefile.exists():
        timefile.unlink()
    t0 = time.perf_counter()
    # Its own process group, so that a timeout kills the tool and not only /usr/bin/time.
    p = subprocess.Popen(
        ["/usr/bin/time", "-v", "-o", str(timefile), *map(str, cmd)],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return time.perf_counter() - t0, (0, 0.0, 0.0), TIMEOUT_RC, "", f"killed after {timeout:g} s (--timeout)"
    except BaseException:  # Ctrl-C: leave nothing running
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    wall = time.perf_counter() - t0
    rss, user, sys_s = 0, 0.0, 0.0
    try:
        for line in timefile.read_text().splitlines():
            line = line.strip()
            if line.startswith("Maximum resident set size"):
                rss = int(line.rsplit(":", 1)[1])
            elif line.startswith("User time (seconds)"):
                user = float(line.rsplit(":", 1)[1])
            elif line.startswith("System time (seconds)"):
                sys_s = float(line.rsplit(":", 1)[1])
    except FileNotFoundError:
        pass
    return wall, (rss, user, sys_s), p.returncode, stdout, stderr


# The fair pairs: each convert mode runs right beside the copy it is judged against (and
# beside the --baseline binary's same mode, when one is given).
PAIRS = [
    ("cp", "convert --no-sync", "baseline --no-sync", AMN_TOOL),
    ("cp+sync", "convert (fsync)", "baseline (fsync)"),
]


def paired_order(tools, r):
    """The tools' order in round r: each group of PAIRS back to back, rotated by one every
    round (A B, then B A; or A B C, B C A, C A B) so that none always runs first; then the
    other tools, Python and the in-process references last."""
    by = {t[0]: t for t in tools}
    order = []
    for group in PAIRS:
        present = [by[x] for x in group if x in by]
        if present:
            k = r % len(present)
            order += present[k:] + present[:k]
    rest = [t for t in tools if t not in order]
    rest.sort(key=lambda t: t[2] in ("py", "inner"))
    return order + rest


def warm(paths):
    """Untimed read of every input, so that the page cache is warm for every tool alike."""
    buf = bytearray(CHUNK)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def clear_dir(d: Path):
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)


def settle():
    # Drop the dirty pages left by the last tool before the next one starts (untimed).
    os.sync()


def sha256(path: Path):
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(memoryview(buf)[:n])
    return h.hexdigest()


# ----------------------------------------------------------------------------- inputs


def member_bytes(total, members=16, align=64 * 1024):
    return max(align, (int(total) // members) // align * align)


def layer_names(n):
    # Unpadded numbers, so that canonical (byte) order differs from the inputs' order: 0, 1, 10, 11...
    return [f"model.layers.{i}.mlp.weight" for i in range(n)]


def write_npz(path: Path, arrays, compress: bool):
    """Members written one by one as np.savez / np.savez_compressed write them (same zip calls),
    so a 1 GiB archive never needs more than one member in memory."""
    comp = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, mode="w", compression=comp, allowZip64=True) as zf:
        for name, make in arrays:
            arr = make()
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, arr, allow_pickle=False)
            del arr


def gen_npz_stored(path, total):
    per = member_bytes(total)
    rows = per // 4 // 1024

    def mk(i):
        return lambda: np.random.default_rng(1000 + i).standard_normal((rows, 1024), dtype=np.float32)

    write_npz(path, [(n, mk(i)) for i, n in enumerate(layer_names(16))], compress=False)


def gen_npz_deflated(path, total):
    per = member_bytes(total)
    rows = per // 4 // 1024

    def mk(i):
        # Compressible float32: small integers (the high bytes repeat), about 3x with zlib -6.
        def f():
            g = np.random.default_rng(2000 + i)
            return g.integers(0, 256, size=(rows, 1024), dtype=np.uint8).astype(np.float32)

        return f

    write_npz(path, [(n, mk(i)) for i, n in enumerate(layer_names(16))], compress=True)


def gen_npy(path, total):
    rows = member_bytes(total, members=1) // 4 // 1024
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, 1024))
    g = np.random.default_rng(3000)
    step = max(1, CHUNK // 4096)
    for r in range(0, rows, step):
        mm[r : r + step] = g.standard_normal((min(step, rows - r), 1024), dtype=np.float32)
    mm.flush()
    del mm


ST_DTYPES = [np.float32, np.float16, np.int64, np.float32]


def gen_safetensors(path, total, members=16):
    from safetensors.numpy import save_file

    per = member_bytes(total, members)
    tensors = {}
    for i, name in enumerate(layer_names(members)):
        dt = np.dtype(ST_DTYPES[i % len(ST_DTYPES)])
        g = np.random.default_rng(4000 + i)
        n = per // dt.itemsize
        if dt.kind == "f":
            a = g.standard_normal(n, dtype=np.float32).astype(dt)
        else:
            a = g.integers(-(1 << 40), 1 << 40, size=n, dtype=dt)
        tensors[name] = a.reshape(-1, 1024)
    save_file(tensors, str(path))  # the reference writer: canonical bytes


# The many-tensor layout (issue 24): the same bytes cut into this many tensors,
# so that a cost paid per tensor, not per byte, shows against cp.
MANY_TENSORS = 4096


def gen_safetensors_many(path, total):
    gen_safetensors(path, total, members=MANY_TENSORS)


def _pt_str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _pt_int(v):
    return b"J" + struct.pack("<i", v) if v < (1 << 31) else b"\x8a\x08" + struct.pack("<q", v)


def _pt_tuple(vals):
    return b"(" + b"".join(_pt_int(v) for v in vals) + b"t"


def gen_pytorch(path, total):
    """A torch.save zip checkpoint of float32 tensors, written without torch: data.pkl in the
    opcodes torch writes (protocol 2, _rebuild_tensor_v2, persistent storage ids), storages
    stored and 64-byte aligned. Mixed sizes like a model: 8 large tensors and 128 small ones.
    A sidecar NAME.json maps each tensor to its storage key and shape for verification."""
    big, small = member_bytes(total * 0.5, members=8), member_bytes(total * 0.5, members=128)
    entries = [(f"model.layers.{i}.mlp.weight", big) for i in range(8)]
    entries += [(f"model.layers.{i}.attn.weight", small) for i in range(128)]
    pkl = bytearray(b"\x80\x02}(")
    layout = {}
    for key, (name, nbytes) in enumerate(entries):
        shape = (nbytes // 4 // 1024, 1024)
        layout[name] = {"key": str(key), "shape": shape}
        numel = shape[0] * shape[1]
        pkl += _pt_str(name) + b"ctorch._utils\n_rebuild_tensor_v2\n("
        pkl += b"(" + _pt_str("storage") + b"ctorch\nFloatStorage\n" + _pt_str(str(key)) + _pt_str("cpu") + _pt_int(numel) + b"tQ"
        pkl += _pt_int(0) + _pt_tuple(shape) + _pt_tuple((shape[1], 1)) + b"\x89ccollections\nOrderedDict\n)RtR"
    pkl += b"u."
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        members = [("archive/data.pkl", lambda: bytes(pkl)), ("archive/byteorder", lambda: b"little")]
        for key, (name, nbytes) in enumerate(entries):
            g = np.random.default_rng(6000 + key)
            members.append((f"archive/data/{key}", lambda g=g, n=nbytes: g.standard_normal(n // 4, dtype=np.float32).tobytes()))
        members.append(("archive/version", lambda: b"3\n"))
        for name, data in members:
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            at = z.fp.tell() + 30 + len(name)
            pad = (-(at + 4)) % 64
            zi.extra = struct.pack("<HH", 0xCAFE, pad) + b"Z" * pad
            z.writestr(zi, data())
    path.with_suffix(".json").write_text(json.dumps(layout))


SMALL_DTYPES = [np.float32, np.float16, np.int64, np.int32, np.uint8, np.bool_, np.float64]


def gen_npz_small(path, count):
    g = np.random.default_rng(5000)
    arrays = {}
    for i in range(count):
        dt = np.dtype(SMALL_DTYPES[i % len(SMALL_DTYPES)])
        shape = tuple(int(x) for x in g.integers(1, 24, size=int(g.integers(0, 3))))
        a = g.integers(0, 100, size=shape).astype(dt)
        arrays[f"blocks.{i}.{['w', 'b', 'scale'][i % 3]}"] = a
    np.savez(path, **arrays)


def header_bytes(path):
    """A safetensors file's 8-byte prefix and the N bytes of JSON it announces."""
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


def plan_name(i):
    return f"t.{i:07d}"


def gen_plan(path, n):
    """A safetensors file with n tensors of one F32 each, tensor t.i holding the value i.

    Written directly (save_file of 1M tensors is slow). Offsets follow the names' order, so the
    data is one contiguous stretch, but the header's keys are in a shuffled order: a converter
    must parse and sort n entries to plan the canonical layout."""
    order = np.random.default_rng(6000 + n).permutation(n)
    parts = ["{"]
    first = True
    for i in order.tolist():
        parts.append(("" if first else ",") + f'"{plan_name(i)}":{{"dtype":"F32","shape":[1],"data_offsets":[{4 * i},{4 * i + 4}]}}')
        first = False
    parts.append("}")
    header = "".join(parts).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(np.arange(n, dtype="<f4").tobytes())


# ----------------------------------------------------------------------------- verification


def expected_arrays(kind, src: Path):
    """(name, loader) for every tensor the input holds."""
    if kind == "npz":
        d = np.load(src)
        return [(k, (lambda k=k: d[k])) for k in d.files]
    if kind == "npy":
        return [(src.stem, lambda: np.load(src, mmap_mode="r"))]
    if kind == "safetensors":
        from safetensors import safe_open

        f = safe_open(str(src), framework="numpy")
        return [(k, (lambda k=k: f.get_tensor(k))) for k in f.keys()]
    if kind == "pytorch":
        layout = json.loads(src.with_suffix(".json").read_text())
        zf = zipfile.ZipFile(src)

        def member(e):
            return np.frombuffer(zf.read(f"archive/data/{e['key']}"), dtype=np.float32).reshape(e["shape"])

        return [(k, (lambda e=e: member(e))) for k, e in layout.items()]
    raise ValueError(kind)


def same_array(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"dtype/shape {a.dtype}{list(a.shape)} vs expected {b.dtype}{list(b.shape)}"
    a = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    b = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
    return None if np.array_equal(a, b) else "bytes differ"


def output_files(out: Path):
    """The safetensors files an output path stands for (one file, or the shards of an index)."""
    if out.exists():
        return [out]
    idx = out.with_name(out.name[: -len(".safetensors")] + ".safetensors.index.json")
    if idx.exists():
        wm = json.loads(idx.read_text())["weight_map"]
        return sorted({out.parent / v for v in wm.values()})
    return []


def verify_tensors(binary, out: Path, kind, src: Path, expect_shards=None):
    """'ok' or 'WRONG: why'. convert validate, then every tensor against the input's."""
    from safetensors import safe_open

    idx = out.with_name(out.name[: -len(".safetensors")] + ".safetensors.index.json")
    target = idx if expect_shards else out
    if not target.exists():
        return f"WRONG: {target.name} was not written"
    p = subprocess.run([binary, "validate", "-q", target], capture_output=True, text=True)
    if p.returncode != 0:
        return f"WRONG: convert validate: {(p.stderr or p.stdout).strip()[:300]}"
    files = output_files(out)
    if expect_shards is not None and len(files) != expect_shards:
        return f"WRONG: {len(files)} shards, expected {expect_shards}"
    got = {}
    handles = []
    for fpath in files:
        h = safe_open(str(fpath), framework="numpy")
        handles.append(h)
        for k in h.keys():
            if k in got:
                return f"WRONG: tensor {k!r} in two shards"
            got[k] = h
    exp = expected_arrays(kind, src)
    if kind == "npy" and len(exp) == 1 and len(got) == 1:
        # The tensor's name for a lone .npy is the tool's choice; compare the one tensor.
        (name, load), (gk, gh) = exp[0], next(iter(got.items()))
        why = same_array(gh.get_tensor(gk), load())
        return f"WRONG: {gk}: {why}" if why else "ok"
    if set(got) != {k for k, _ in exp}:
        missing = sorted({k for k, _ in exp} - set(got))[:3]
        extra = sorted(set(got) - {k for k, _ in exp})[:3]
        return f"WRONG: tensor names differ (missing {missing}, unexpected {extra})"
    for k, load in exp:
        why = same_array(got[k].get_tensor(k), load())
        if why:
            return f"WRONG: {k}: {why}"
    return "ok"


def verify_plan(binary, out: Path, n):
    p = subprocess.run([binary, "validate", "-q", out], capture_output=True, text=True)
    if p.returncode != 0:
        return f"WRONG: convert validate: {(p.stderr or p.stdout).strip()[:300]}"
    with open(out, "rb") as f:
        hlen = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(hlen))
        data = np.frombuffer(f.read(), dtype="<f4")
    header.pop("__metadata__", None)
    if len(header) != n:
        return f"WRONG: {len(header)} tensors, expected {n}"
    for i in (0, n // 3, n - 1):
        e = header.get(plan_name(i))
        if e is None or e["dtype"] != "F32" or e["shape"] != [1]:
            return f"WRONG: entry {plan_name(i)}: {e}"
        b, _ = e["data_offsets"]
        if data[b // 4] != i:
            return f"WRONG: tensor {plan_name(i)} holds {data[b // 4]}"
    if not np.array_equal(data, np.arange(n, dtype="<f4")):
        return "WRONG: data is not the tensors in canonical order"
    return "ok"


# ----------------------------------------------------------------------------- the bench


class Bench:
    def __init__(self, args):
        self.args = args
        self.amn = args.amn
        self.rows: list[Row] = []
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}
        self.targets: list[tuple[str, str, str, str]] = []  # workload, target, measured, verdict
        self.plan_points: list[tuple[int, float]] = []
        self.plan_rss: list[tuple[int, int, float]] = []  # (n, header bytes, peak RSS MiB)
        if args.reuse:  # a directory a run with --keep left: its inputs are not generated again
            self.tmp = Path(args.reuse)
            args.keep = True
        else:
            self.tmp = Path(tempfile.mkdtemp(prefix="ststream-bench-", dir=args.tmpdir))
        self.out = self.tmp / "out"
        self.timefile = self.tmp / "time.txt"
        self.ref = self.tmp / "ref.py"
        self.ref.write_text(REF_PY)
        self.binary = self.tmp / "convert"  # a private copy: others may rebuild target/ meanwhile
        self.baseline = None
        if args.baseline:  # another build, timed beside this one in the same rounds (before/after)
            self.baseline = self.tmp / "baseline"
            shutil.copy2(args.baseline, self.baseline)
        self.gen_s = {}
        self.load_start = os.getloadavg()

    def log(self, msg):
        print(msg, flush=True)

    # -- build

    def build(self):
        # The binary where cargo puts it ($CARGO_TARGET_DIR when set); `convert` and
        # `safetensors-convert` are the same program, so one is built.
        src = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release" / "convert"
        if not self.args.no_build:
            self.log("== cargo build --release --bin convert")
            p = subprocess.run(["cargo", "build", "--release", "--bin", "convert"], cwd=REPO, capture_output=True, text=True)
            if p.returncode != 0:
                sys.stderr.write(p.stderr[-4000:])
                sys.exit("bench: cargo build --release failed (use --no-build to time the existing binary)")
        if not src.exists():
            sys.exit(f"bench: {src} does not exist")
        shutil.copy2(src, self.binary)

    # -- one workload: tools, interleaved rounds, verification

    def run_workload(self, name, inputs, tools, nbytes, verify, probe, runs, single_output=lambda o: None):
        """tools: list of (tool name, argv builder(outdir) -> argv, kind) where kind is cp/py/convert/other.
        probe: argv builder for a convert run whose failure means 'cannot do this yet'."""
        # Python last in the round, so that its aftermath (it frees about twice the data's size)
        # falls on the next round's warm-up and reset steps rather than on a convert run.
        tools = sorted(tools, key=lambda t: t[2] in ("py", "inner"))
        self.log(f"== {name}: {', '.join(t[0] for t in tools)}; {runs} run(s)")
        clear_dir(self.out)
        warm(inputs)
        settle()
        wall, _, rc, _, err = timed(probe(self.out), self.out, self.timefile, self.args.timeout)
        if rc != 0:
            msg = (err.strip().splitlines() or ["(no message)"])[-1]
            what = "too slow" if rc == TIMEOUT_RC else f"convert exits {rc}"
            self.skipped[name] = f"{what}: {msg}"
            self.log(f"   SKIPPED: {self.skipped[name]}")
            return None
        verdict0 = verify(self.out)
        single = single_output(self.out)
        conv_hash = sha256(single) if single and single.exists() else None
        self.log(f"   probe run: {wall:.3f} s, verify: {verdict0}")
        if wall > self.args.slow and runs > 1:
            runs = 1
            self.notes.append(f"{name}: convert's untimed first run took {wall:.1f} s (> --slow {self.args.slow:g} s): 1 timed run only.")
        clear_dir(self.out)
        settle()

        rows = {}
        for tname, _, kind in tools:
            rows[tname] = Row(name, tname, nbytes)
        ref_hash = None
        rng = random.Random(7)
        for r in range(runs):
            warm(inputs)
            order = list(tools)
            if self.args.shuffle:  # a seeded shuffle per round, Python still last
                rng.shuffle(order)
                order.sort(key=lambda t: t[2] in ("py", "inner"))
            else:
                order = paired_order(tools, r)
            for tname, argv, kind in order:
                row = rows[tname]
                if any("--timeout" in e for e in row.errors):
                    continue  # timed out once: not again
                # The reset: every timed tool follows the same untimed step, a cp of the input,
                # deleted and synced. On this VM a writer is up to 2x slower right after convert's
                # output was deleted, or after a Python run freed its memory, than after a cp.
                clear_dir(self.out)
                subprocess.run(["cp", "--reflink=never", inputs[0], self.out / "reset"], check=True)
                clear_dir(self.out)
                settle()
                wall, (rss, user, sys_s), rc, stdout, err = timed(argv(self.out), self.out, self.timefile, self.args.timeout)
                if rc != 0:
                    why = "timed out" if rc == TIMEOUT_RC else f"exit {rc}"
                    row.errors.append(f"run {r + 1}: {why}: {err.strip()[-300:]}")
                    self.log(f"   {tname}: FAILED {why}: {err.strip()[-200:]}")
                else:
                    if kind == "py" and ref_hash is None and conv_hash:
                        f = single_output(self.out)
                        ref_hash = sha256(f) if f and f.exists() else ""
                    if kind == "inner":  # the tool reports its own time (zlib reference)
                        wall = float(stdout.split()[0])
                    row.samples.append(Sample(wall, rss, user, sys_s, r))
                    if kind == "convert" and not row.verified:
                        row.verified = verdict0 if "--no-sync" in tname else verify(self.out)
                clear_dir(self.out)
                settle()
            self.log(
                f"   round {r + 1}: "
                + "  ".join(f"{t}={rows[t].samples[-1].wall:.3f}s" for t, _, _ in order if rows[t].samples)
            )
        if conv_hash and ref_hash:
            same = conv_hash == ref_hash
            self.notes.append(f"{name}: convert's output is {'byte-identical' if same else 'NOT byte-identical'} "
                              f"to the Python reference's (save_file) output.")
        self.rows.extend(rows.values())
        return rows

    # -- standard tool sets

    def cp_tools(self, src: Path, dest_name: str):
        def cp(o):
            return ["cp", "--reflink=never", src, o / dest_name]

        def cp_sync(o):
            return ["sh", "-c", 'cp --reflink=never "$1" "$2" && sync "$2" "$3"', "sh", src, o / dest_name, o]

        return [("cp", cp, "cp"), ("cp+sync", cp_sync, "cp")]

    def py_tool(self, mode, src, dest_name, *extra):
        if self.args.no_python:
            return []
        return [("python (load + save_file)", lambda o: [sys.executable, self.ref, mode, src, o / dest_name, *extra], "py")]

    def convert_tools(self, src, dest_name, *extra):
        tools = []
        for label, b in [("convert", self.binary)] + ([("baseline", self.baseline)] if self.baseline else []):
            tools += [
                (f"{label} --no-sync", lambda o, b=b: [b, src, "-q", "--no-sync", *extra, "-o", o / dest_name], "convert"),
                (f"{label} (fsync)", lambda o, b=b: [b, src, "-q", *extra, "-o", o / dest_name], "convert"),
            ]
        return tools

    def link(self, rows):
        """Set which row each ratio divides by."""
        if not rows:
            return
        for r in rows.values():
            if r.tool in ("convert --no-sync", "baseline --no-sync", "python (load + save_file)", "zlib inflate (python, 1 thread)"):
                r.cp_ref = "cp"
            if r.tool in ("convert (fsync)", "baseline (fsync)"):
                r.cp_ref = "cp+sync"
            if r.tool.startswith("convert") and "python (load + save_file)" in rows:
                r.py_ref = "python (load + save_file)"

    def copy_like(self, name, src: Path, kind, mode, extra=(), shards=None, peers=()):
        dest = "model.safetensors"
        tools = self.cp_tools(src, dest) + list(peers)
        tools += self.py_tool(mode, src, dest, *([str(x) for x in extra[1:]] if extra else []))
        tools += self.convert_tools(src, dest, *extra)
        rows = self.run_workload(
            name,
            [src],
            tools,
            src.stat().st_size,
            lambda o: verify_tensors(self.binary, o / dest, kind, src, expect_shards=shards),
            lambda o: [self.binary, src, "-q", "--no-sync", *extra, "-o", o / dest],
            self.args.runs,
            single_output=(lambda o: None) if shards else (lambda o: o / dest),
        )
        self.link(rows)
        return rows

    def convert_workload(self, name, inputs, src, tools, verify):
        """run_workload of `convert SRC -o model.safetensors` (one output file) against `tools`,
        reading `inputs` (all their bytes counted); the rows linked to their references."""
        dest = "model.safetensors"
        rows = self.run_workload(
            name,
            inputs,
            tools,
            sum(Path(f).stat().st_size for f in inputs),
            verify,
            lambda o: [self.binary, src, "-q", "--no-sync", "-o", o / dest],
            self.args.runs,
            single_output=lambda o: o / dest,
        )
        self.link(rows)
        return rows

    # -- inputs, generated once each

    def input(self, key, gen, *a):
        path = self.tmp / key
        if not path.exists():
            t0 = time.perf_counter()
            gen(path, *a)
            os.sync()  # the new input's dirty pages are written back now, not during a timed run
            self.gen_s[key] = time.perf_counter() - t0
            size = sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size
            self.log(f"   generated {key}: {size / MIB:.1f} MiB in {self.gen_s[key]:.1f} s")
        return path

    # -- workloads

    def w_npz_stored(self):
        src = self.input("stored.npz", gen_npz_stored, self.size)
        rows = self.copy_like("npz-stored", src, "npz", "npz")
        self.copy_targets("npz-stored", rows)

    def w_npz_deflated(self):
        src = self.input("deflated.npz", gen_npz_deflated, self.size / 4)
        dest = "model.safetensors"
        unc = sum(zi.file_size for zi in zipfile.ZipFile(src).infolist())
        tools = self.cp_tools(src, dest) + [
            ("zlib inflate (python, 1 thread)", lambda o: [sys.executable, self.ref, "zlib", src, "-"], "inner"),
        ] + self.py_tool("npz", src, dest) + self.convert_tools(src, dest)
        rows = self.convert_workload("npz-deflated", [src], src, tools, lambda o: verify_tensors(self.binary, o / dest, "npz", src))
        if not rows:
            return
        rows["zlib inflate (python, 1 thread)"].nbytes = unc
        rows["zlib inflate (python, 1 thread)"].cp_ref = None
        self.notes.append(
            f"npz-deflated: {src.stat().st_size / MIB:.1f} MiB compressed, {unc / MIB:.1f} MiB of float32 "
            f"inflated (MB/s columns: compressed file bytes, except the zlib row: inflated bytes); "
            f"the zlib row is the inflate time alone, measured inside Python (zlib {__import__('zlib').ZLIB_RUNTIME_VERSION})."
        )
        c = rows["convert --no-sync"]
        if "python (load + save_file)" in rows:
            self.ratio_target("npz-deflated", "convert --no-sync / python <= 0.40", c, rows["python (load + save_file)"], T_DEFLATE_PY)
        zlib = rows["zlib inflate (python, 1 thread)"]
        self.ratio_target("npz-deflated", f"convert --no-sync / zlib 1 thread <= {T_DEFLATE_ZLIB}", c, zlib, T_DEFLATE_ZLIB)
        if "convert (fsync)" in rows:
            self.ratio_target("npz-deflated", f"convert (fsync) / zlib 1 thread <= {T_DEFLATE_ZLIB}", rows["convert (fsync)"], zlib, T_DEFLATE_ZLIB)
        self.rss_target("npz-deflated", rows)

    def w_npy(self):
        src = self.input("array.npy", gen_npy, self.size / 2)
        rows = self.copy_like("npy", src, "npy", "npy")
        self.copy_targets("npy", rows)

    def w_safetensors(self):
        src = self.input("model.safetensors", gen_safetensors, self.size)
        rows = self.copy_like("safetensors", src, "safetensors", "safetensors")
        self.copy_targets("safetensors", rows)

    def w_safetensors_many(self):
        src = self.input("many.safetensors", gen_safetensors_many, self.size)
        rows = self.copy_like("safetensors-many", src, "safetensors", "safetensors")
        self.notes.append(f"safetensors-many: the safetensors workload's bytes as {MANY_TENSORS} tensors.")
        self.copy_targets("safetensors-many", rows)

    def w_reshard(self):
        src = self.input("model.safetensors", gen_safetensors, self.size)
        total = member_bytes(self.size) * 16
        limit = total // 4
        rows = self.copy_like("reshard", src, "safetensors", "reshard", extra=("--max-shard-size", str(limit)), shards=4)
        self.notes.append(f"reshard: --max-shard-size {limit} ({limit / MIB:.2f} MiB): 4 shards of 4 tensors.")
        self.copy_targets("reshard", rows)

    def w_npz_small(self):
        count = self.args.small_count
        src = self.input(f"small-{count}.npz", gen_npz_small, count)
        peer = []
        if self.amn:
            # The fastest peer found (issue 15): anamnesis's `amn convert X.npz --to safetensors`.
            peer = [(AMN_TOOL, lambda o: [self.amn, "convert", src, "--to", "safetensors", "-o", o / "amn.safetensors"], "peer")]
        rows = self.copy_like("npz-small", src, "npz", "npz", peers=peer)
        if not rows:
            return
        c, p = rows["convert --no-sync"], rows.get("python (load + save_file)", Row("npz-small", "python", 0))
        if p.median():
            self.notes.append(f"npz-small: {count} arrays; python {1e6 * p.median() / count:.0f} us a tensor, "
                              f"convert --no-sync {1e6 * (c.median() or 0) / count:.1f} us a tensor.")
        self.ratio_target("npz-small", f"convert --no-sync / python <= {T_SMALL_PY}", c, p, T_SMALL_PY)
        if AMN_TOOL in rows:
            self.ratio_target("npz-small", f"convert --no-sync / amn <= {T_SMALL_AMN}", c, rows[AMN_TOOL], T_SMALL_AMN)
        else:
            self.notes.append("npz-small: amn (cargo install anamnesis@0.7.10 --features cli,npz) not found: no peer column; pass --amn PATH.")
        self.rss_target("npz-small", rows)

    def w_pytorch(self):
        src = self.input("pytorch_model.bin", gen_pytorch, self.size)
        dest = "model.safetensors"
        tools = self.cp_tools(src, dest) + self.convert_tools(src, dest)
        rows = self.convert_workload("pytorch", [src], src, tools, lambda o: verify_tensors(self.binary, o / dest, "pytorch", src))
        self.copy_targets("pytorch", rows, T_PYTORCH)

    def w_gguf(self):
        """GGUF (llama.cpp) to BF16 safetensors: mixed Q4_K/Q6_K/Q8_0/F32, self.size bytes."""
        py = self.args.gguf_python
        probe = subprocess.run([py, "-c", "import gguf, safetensors"], capture_output=True)
        if probe.returncode != 0:
            self.skipped["gguf"] = f"{py} cannot import gguf and safetensors (pass --gguf-python)"
            return
        gen = self.tmp / "gguf_gen.py"
        gen.write_text(GGUF_GEN_PY)
        ref = self.tmp / "gguf_ref.py"
        ref.write_text(GGUF_REF_PY)

        def make(path, total):
            subprocess.run([py, gen, path, str(int(total))], check=True)

        src = self.input("model.gguf", make, self.size)
        dest = "model.safetensors"
        tools = self.cp_tools(src, dest)[:1] + self.convert_tools(src, dest)
        if self.amn:
            # -o and --force: amn refuses to replace its output of the last round.
            tools.append((GGUF_AMN_TOOL, lambda o: [self.amn, "convert", src, "--to", "safetensors", "-o", o / "amn.safetensors", "--force"], "other"))
        if not self.args.no_python:
            tools.append((GGUF_PY_TOOL, lambda o: [py, ref, src, o / dest], "py"))

        def verify(o):
            # Every tensor's bytes against gguf-py's, for the first tensors of each type.
            check = subprocess.run([py, "-c", GGUF_CHECK_PY, src, o / dest], capture_output=True, text=True)
            return "ok" if check.returncode == 0 else f"WRONG: {check.stderr.strip()[-300:]}"

        rows = self.run_workload(
            "gguf",
            [src],
            tools,
            src.stat().st_size,
            verify,
            lambda o: [self.binary, src, "-q", "--no-sync", "-o", o / dest],
            self.args.runs,
        )
        if not rows:
            return
        conv = rows["convert --no-sync"]
        if self.amn:
            self.notes.append(f"gguf: {self.compare_with_amn(src, tools)}")
        if GGUF_AMN_TOOL in rows:
            self.ratio_target("gguf", f"convert --no-sync / amn <= {T_GGUF_AMN}", conv, rows[GGUF_AMN_TOOL], T_GGUF_AMN)
        else:
            self.notes.append("gguf: amn (cargo install anamnesis --features cli,gguf) not found: no peer column; pass --amn PATH.")
        if GGUF_PY_TOOL in rows:
            self.ratio_target("gguf", "convert --no-sync / gguf-py (reported)", conv, rows[GGUF_PY_TOOL], float("inf"))
        self.rss_target("gguf", rows)

    def w_dcp(self, name, dim):
        """A distributed checkpoint (4 ranks, a quarter of --size-gib) against torch's
        dcp_to_torch_save + save_file and a cp of its files; the same Python as gguf's."""
        py = self.args.gguf_python
        probe = subprocess.run([py, "-c", "import torch, safetensors"], capture_output=True)
        if probe.returncode != 0:
            self.skipped[name] = f"{py} cannot import torch and safetensors (pass --gguf-python)"
            return
        gen, ref = self.tmp / "dcp_gen.py", self.tmp / "dcp_ref.py"
        gen.write_text(DCP_GEN_PY)
        ref.write_text(DCP_REF_PY)

        def make(path, total):
            subprocess.run([py, gen, path, str(int(total)), str(dim)], check=True, capture_output=True)

        src = self.input(name, make, self.size / 4)
        files = sorted(src.iterdir())
        nbytes = sum(f.stat().st_size for f in files)
        dest = "model.safetensors"
        tools = [
            ("cp", lambda o: ["cp", "-r", "--reflink=never", src, o / "ckpt"], "cp"),
        ] + self.convert_tools(src, dest)
        if not self.args.no_python:
            tools.append(("torch (dcp_to_torch_save + save_file)", lambda o: [py, ref, src, o / dest], "py"))
        want = {}

        def verify(o):
            # Every tensor's bytes against torch's own reconstruction, by name.
            if not want:
                theirs = self.tmp / f"{name}-torch.safetensors"
                subprocess.run([py, ref, src, theirs], check=True, capture_output=True)
                want.update(safetensors_tensors(theirs))
                theirs.unlink()
            got = safetensors_tensors(o / dest)
            return "ok" if got == want else f"WRONG: {len(got)} tensors, {sum(got.get(k) != v for k, v in want.items())} differ from torch's"

        rows = self.run_workload(
            name,
            [f for f in files if f.name != ".metadata"] + [src / ".metadata"],
            tools,
            nbytes,
            verify,
            lambda o: [self.binary, src, "-q", "--no-sync", "-o", o / dest],
            self.args.runs,
            single_output=lambda o: o / dest,
        )
        if not rows:
            return
        conv = rows["convert --no-sync"]
        self.notes.append(f"{name}: 16 float32 tensors of 1024 rows cut by 4 ranks at dim {dim}, {nbytes / MIB:.1f} MiB of .distcp files.")
        self.ratio_target(name, f"convert --no-sync / cp <= {T_DCP_CP}", conv, rows["cp"], T_DCP_CP)
        torch_row = rows.get("torch (dcp_to_torch_save + save_file)")
        if torch_row:
            self.ratio_target(name, f"convert --no-sync / torch <= {T_DCP_TORCH}", conv, torch_row, T_DCP_TORCH)
        self.rss_target(name, rows)

    def compare_with_amn(self, src, tools):
        """Both BF16: every tensor's bytes in convert's output against amn's, by name."""
        clear_dir(self.out)
        for tname, argv, _ in tools:
            if tname in ("convert --no-sync", GGUF_AMN_TOOL):
                subprocess.run(argv(self.out), check=True, capture_output=True)
        ours, theirs = self.out / "model.safetensors", self.out / "amn.safetensors"
        a, b = safetensors_tensors(ours), safetensors_tensors(theirs)
        differ = [k for k in a if k not in b or a[k] != b[k]]
        clear_dir(self.out)
        if differ or len(a) != len(b):
            return f"convert's output DIFFERS from amn's: {len(differ)} of {len(a)} tensors ({differ[:3]}), {len(b)} in amn's"
        return f"convert's output equals amn's, tensor by tensor ({len(a)} tensors: names, dtypes, shapes, bytes)"

    def w_plan(self):
        sizes = self.args.plan_sizes
        for n in sizes:
            src = self.input(f"plan-{n}.safetensors", gen_plan, n)
            dest = "plan.safetensors"
            b = self.binary
            tools = self.cp_tools(src, dest)[:1] + [
                ("convert validate (header only)", lambda o, src=src: [b, "validate", "-q", src], "other"),
                ("convert --no-sync", lambda o, src=src: [b, src, "-q", "--no-sync", "-o", o / dest], "convert"),
            ]
            rows = self.run_workload(
                f"plan-1m (n={n})",
                [src],
                tools,
                src.stat().st_size,
                lambda o, n=n: verify_plan(self.binary, o / dest, n),
                lambda o, src=src: [b, src, "-q", "--no-sync", "-o", o / dest],
                self.args.runs,
            )
            if not rows:
                break  # a larger n would fail or time out too
            self.link(rows)
            self.plan_points.append((n, rows["convert --no-sync"].median()))
            self.plan_rss.append((n, header_bytes(src), rows["convert --no-sync"].max_rss_mib() or 0))
        pts = [(n, t) for n, t in self.plan_points if t]
        if not pts:
            return
        (n0, t0), (n1, t1) = pts[0], pts[-1]
        pts_s = ", ".join(f"{n}: {t:.3f} s" for n, t in pts)
        self.notes.append(f"plan-1m: convert --no-sync of n one-element tensors (header keys shuffled): {pts_s}.")
        if n1 < sizes[-1] and sizes[-1] >= 1_000_000:
            self.targets.append(("plan-1m", f"plan of {sizes[-1]} tensors < {T_PLAN_S} s", "not measured (see Notes)", "FAIL"))
        elif n1 >= 1_000_000:
            self.targets.append(("plan-1m", f"plan of {n1} tensors < {T_PLAN_S} s", f"{t1:.3f} s", "PASS" if t1 < T_PLAN_S else "FAIL"))
        else:
            self.targets.append(("plan-1m", f"plan of 1,000,000 tensors < {T_PLAN_S} s", f"{t1:.3f} s at n={n1}", "n/a (n < 1M)"))
        if n1 > n0:
            pred = (n1 * math.log(n1)) / (n0 * math.log(n0))
            got = t1 / t0
            self.targets.append(
                ("plan-1m", f"growth ~ n log n: t({n1})/t({n0}) <= {T_PLAN_GROWTH} x {pred:.2f}",
                 f"{got:.2f} (exponent {math.log(got) / math.log(n1 / n0):.2f})",
                 "PASS" if got <= T_PLAN_GROWTH * pred else "FAIL"))
        # Memory in proportion to the header: the file is all header (4 data bytes a tensor).
        n, header, rss = self.plan_rss[-1]
        times = rss * MIB / header
        self.targets.append(
            ("plan-1m", f"peak RSS of convert <= {T_HEADER_RSS:.0f} x the header ({header / MIB:.1f} MiB) at n={n}",
             f"{rss:.1f} MiB ({times:.2f}x)", "PASS" if times <= T_HEADER_RSS else "FAIL"))
        growth = ", ".join(f"{n}: {rss:.1f} MiB ({rss * MIB / h:.2f}x)" for n, h, rss in self.plan_rss)
        self.notes.append(f"plan-1m: peak RSS of convert --no-sync against the header's bytes: {growth}.")

    # -- targets

    def wrong(self, row):
        return row.verified.startswith("WRONG")

    def ratio_target(self, wl, label, num: Row, den: Row, limit):
        if not num.median() or not den.median():
            self.targets.append((wl, label, "no data", "FAIL"))
            return
        q = num.median() / den.median()
        verdict = "PASS" if q <= limit else "FAIL"
        if self.wrong(num):
            verdict = "FAIL (wrong output)"
        paired = paired_ratio(num, den)
        shown = f"{q:.2f}" + (f" (paired {paired:.2f})" if paired else "")
        self.targets.append((wl, label, shown, verdict))

    def copy_targets(self, wl, rows, limit=T_COPY):
        """convert against cp (--no-sync) and cp+sync (durable) at most `limit` times, and the RSS target."""
        if not rows:
            return
        self.ratio_target(wl, f"convert --no-sync / cp <= {limit}", rows["convert --no-sync"], rows["cp"], limit)
        self.ratio_target(wl, f"convert (fsync) / cp+sync <= {limit}", rows["convert (fsync)"], rows["cp+sync"], limit)
        self.rss_target(wl, rows)

    def rss_target(self, wl, rows, quiet=False):
        conv = [r for r in rows.values() if r.tool.startswith("convert ") and r.samples and "validate" not in r.tool]
        if not conv or quiet:
            return
        rss = max(r.max_rss_mib() for r in conv)
        self.targets.append((wl, f"peak RSS of convert <= {T_RSS_MIB:.0f} MiB", f"{rss:.1f} MiB", "PASS" if rss <= T_RSS_MIB else "FAIL"))

    # -- report

    def table(self):
        by = {}
        for r in self.rows:
            by.setdefault(r.workload, {})[r.tool] = r

        def fmt(x, d=3):
            return "-" if x is None else f"{x:.{d}f}"

        out = [
            "| workload | tool | median s | min s | user s | sys s | MB/s | peak RSS MiB | x cp | paired x cp | sys x cp | x Python | output |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in self.rows:
            med = r.median()
            mbs = r.nbytes / 1e6 / med if med else None
            xcp = xpy = paired = xsys = None
            ref = by[r.workload].get(r.cp_ref) if r.cp_ref else None
            if med and ref and ref.median():
                xcp = med / ref.median()
                paired = paired_ratio(r, ref)
                if ref.median_cpu("sys"):
                    xsys = r.median_cpu("sys") / ref.median_cpu("sys")
            if med and r.py_ref and by[r.workload].get(r.py_ref) and by[r.workload][r.py_ref].median():
                xpy = med / by[r.workload][r.py_ref].median()
            status = r.verified
            if r.errors:
                status = (status + "; " if status else "") + f"{len(r.errors)} failed run(s)"
            tool = r.tool + (f" (vs {r.cp_ref})" if r.cp_ref == "cp+sync" else "")
            out.append(
                f"| {r.workload} | {tool} | {fmt(med)} | {fmt(r.minimum())} | {fmt(r.median_cpu('user'), 2)} | "
                f"{fmt(r.median_cpu('sys'), 2)} | {fmt(mbs, 0)} | "
                f"{fmt(r.rss_mib(), 1)} | {fmt(xcp, 2)} | {fmt(paired, 2)} | {fmt(xsys, 2)} | {fmt(xpy, 3)} | {status} |"
            )
        return "\n".join(out)

    def targets_table(self):
        out = ["| workload | target (issues 7 and 15) | measured | verdict |", "|---|---|---:|---|"]
        for t in self.targets:
            out.append("| " + " | ".join(t) + " |")
        return "\n".join(out)

    def environment(self):
        def sh(*c):
            try:
                return subprocess.run(c, cwd=REPO, capture_output=True, text=True).stdout.strip()
            except OSError:
                return "?"

        rev = sh("git", "describe", "--always", "--dirty")
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
        return (
            f"- commit `{rev}`, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n"
            f"- {os.cpu_count()} CPUs, {mem:.1f} GiB RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}, numpy {np.__version__}, "
            f"safetensors {__import__('safetensors').__version__}, {sh('cp', '--version').splitlines()[0]}\n"
            f"- inputs scaled by --size-gib {self.size_gib:g}; {self.args.runs} run(s) a tool, interleaved"
            f"{' (order shuffled each round)' if self.args.shuffle else ''}; "
            f"warm page cache; temp dir on `{self.tmp.parent}`\n"
            f"- load average (1 min) {self.load_start[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end "
            f"(above 0.5 or so, other work shared the {os.cpu_count()} CPUs: expect noise)\n"
            f"- command: `python3 benches/bench.py {shlex.join(sys.argv[1:])}`"
        )

    def report(self):
        md = ["# convert benchmark", "", self.environment(), "", self.table(), "", "## Targets", "", self.targets_table()]
        if self.notes or self.skipped:
            md += ["", "## Notes", ""]
            md += [f"- {n}" for n in self.notes]
            md += [f"- SKIPPED {w}: {why}" for w, why in self.skipped.items()]
        errs = [(r, e) for r in self.rows for e in r.errors]
        if errs:
            md += ["", "## Failed runs", ""] + [f"- {r.workload} / {r.tool}: {e}" for r, e in errs]
        return "\n".join(md) + "\n"

    def run(self):
        a = self.args
        self.size_gib = a.size_gib
        self.size = a.size_gib * GIB
        only = a.only or WORKLOADS
        fns = {
            "npz-stored": self.w_npz_stored,
            "npz-deflated": self.w_npz_deflated,
            "npy": self.w_npy,
            "safetensors": self.w_safetensors,
            "safetensors-many": self.w_safetensors_many,
            "reshard": self.w_reshard,
            "npz-small": self.w_npz_small,
            "plan-1m": self.w_plan,
            "pytorch": self.w_pytorch,
            "gguf": self.w_gguf,
            "dcp-fsdp": lambda: self.w_dcp("dcp-fsdp", 0),
            "dcp-tp": lambda: self.w_dcp("dcp-tp", 1),
            "onnx": lambda: formats.w_onnx(self, external=False),
            "onnx-external": lambda: formats.w_onnx(self, external=True),
            "msgpack": lambda: formats.w_msgpack(self),
            "hdf5": lambda: formats.w_hdf5(self, chunked=False),
            "hdf5-chunked": lambda: formats.w_hdf5(self, chunked=True),
        }
        try:
            self.build()
            for w in WORKLOADS:
                if w in only:
                    fns[w]()
        finally:
            if a.keep:
                self.log(f"kept {self.tmp}")
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
        md = self.report()
        print()
        print(md)
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(a.out).write_text(md)
            print(f"written to {a.out}")
        bad = any(r.verified.startswith("WRONG") for r in self.rows)
        return 1 if bad else 0


# ---- quantized safetensors (issue 29): --quantized -------------------------------------

QUANT_REFERENCE = r"""
import sys, torch
from safetensors.torch import load_file, save_file
kind, src, dst = sys.argv[1:4]
t = load_file(src)
if kind == "fp8":
    w, s = t["w.weight"], t["w.weight_scale_inv"]
    full = s.repeat_interleave(128, 0)[: w.shape[0]].repeat_interleave(128, 1)[:, : w.shape[1]]
    out = (w.to(torch.float32) * full).to(torch.bfloat16)
else:  # gptq v1, 4-bit, groups of 128 (AutoGPTQ's general_qlinear_converter)
    qw, qz, sc = t["w.qweight"], t["w.qzeros"], t["w.scales"]
    wf = torch.arange(0, 32, 4, dtype=torch.int32).unsqueeze(0)
    z = torch.bitwise_right_shift(qz.unsqueeze(2).expand(-1, -1, 8), wf.unsqueeze(0)).to(torch.int8)
    z = (torch.bitwise_and(z, 15) + 1).reshape(sc.shape)
    w = torch.bitwise_right_shift(qw.unsqueeze(1).expand(-1, 8, -1), wf.unsqueeze(-1)).to(torch.int8)
    w = torch.bitwise_and(w, 15).reshape(-1, qw.shape[1])
    g = torch.arange(w.shape[0]) // 128
    out = (sc[g] * (w - z[g])).t().contiguous().to(torch.bfloat16)
save_file({"w.weight": out}, dst)
"""

# transformers' and compressed-tensors' own dequantization (issue 39): the functions their
# loaders call, then save_file.
LOWBIT_REFERENCE = r"""
import sys, torch
from safetensors.torch import load_file, save_file
kind, src, dst = sys.argv[1:4]
t = load_file(src)
if kind == "mxfp4":
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    out = convert_moe_packed_tensors(t["w.gate_up_proj_blocks"], t["w.gate_up_proj_scales"], dtype=torch.bfloat16)
    save_file({"w.gate_up_proj": out}, dst)
else:  # compressed-tensors pack-quantized int4, groups of 128, symmetric
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=4, type="int", symmetric=True, strategy="group", group_size=128))
    state = {k.removeprefix("w."): v for k, v in t.items()}
    out = PackedQuantizationCompressor.decompress(state, scheme)["weight"]
    save_file({"w.weight": out.to(torch.bfloat16)}, dst)
"""

LOWBIT_CONFIG = {
    "mxfp4": {"quant_method": "mxfp4"},
    "int4": {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {
        "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                        "strategy": "group", "group_size": 128}}}},
}


def gen_quantized(kind: str, path: Path, size: int):
    """FP8: `size` bytes of E4M3 codes (no NaN) with 128x128 block scales. GPTQ 4-bit: a weight
    whose BF16 output is `size` bytes, groups of 128, F16 scales."""
    rng = np.random.default_rng(29)
    tensors = {}
    if kind == "fp8":
        n = 8192
        m = max(128, size // n // 128 * 128)
        codes = rng.integers(0, 256, (m, n), dtype=np.uint8)
        codes[(codes & 0x7F) == 0x7F] &= 0xFE
        scales = (rng.random((m // 128, n // 128)) * 0.01 + 1e-4).astype(np.float32)
        tensors["w.weight"] = ("F8_E4M3", codes)
        tensors["w.weight_scale_inv"] = ("F32", scales)
    elif kind == "mxfp4":
        # gpt-oss-120b's gate_up_proj: experts of 5760 rows of 90 blocks (8.3 MB each).
        rows, groups = 5760, 90
        experts = max(1, size // (rows * groups * 16))
        tensors["w.gate_up_proj_blocks"] = ("U8", rng.integers(0, 256, (experts, rows, groups, 16), dtype=np.uint8))
        tensors["w.gate_up_proj_scales"] = ("U8", rng.integers(110, 135, (experts, rows, groups), dtype=np.uint8))
    elif kind == "int4":
        # compressed-tensors W4A16: BF16 output of `size` bytes, groups of 128, BF16 scales.
        k = 8192
        n = max(64, size // 2 // k // 64 * 64)
        tensors["w.weight_packed"] = ("I32", rng.integers(0, 2**32, (n, k // 8), dtype=np.uint32).view(np.int32))
        scales = (rng.random((n, k // 128)) * 0.01 + 1e-4).astype(np.float32)
        tensors["w.weight_scale"] = ("BF16", (scales.view(np.uint32) >> 16).astype(np.uint16))
        tensors["w.weight_shape"] = ("I64", np.array([n, k], dtype=np.int64))
    else:
        k = 8192
        n = max(64, size // 2 // k // 64 * 64)
        tensors["w.qweight"] = ("I32", rng.integers(0, 2**32, (k // 8, n), dtype=np.uint32).view(np.int32))
        tensors["w.qzeros"] = ("I32", rng.integers(0, 2**32, (k // 128, n // 8), dtype=np.uint32).view(np.int32))
        tensors["w.scales"] = ("F16", (rng.random((k // 128, n)) * 0.01 + 1e-4).astype(np.float16))
    header, offset = {}, 0
    for name, (dt, a) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, a in tensors.values():
            f.write(a.tobytes())


def tensor_data_digest(path: Path):
    """sha256 of a one-tensor safetensors file's data (headers may be laid out differently)."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    with open(path, "rb", buffering=0) as f:
        (n,) = struct.unpack("<Q", f.read(8))
        f.seek(8 + n)
        while k := f.readinto(buf):
            h.update(memoryview(buf)[:k])
    return h.hexdigest()


def quantized_bench(a) -> int:
    """`--quantized`: 1 GiB (x --size-gib) FP8 and GPTQ inputs dequantized to BF16 by
    `convert --dequantize --no-sync`, by `amn remember` when amn is on PATH, and by torch in
    memory (the libraries' own arithmetic) otherwise; interleaved rounds, medians, peak RSS.
    Every convert output is compared with torch's when torch is importable."""
    binary = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "release" / "convert"
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "--bin", "convert"], cwd=REPO, check=True)
    size = int(a.size_gib * GIB)
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    lines, verdicts, medians = [], [], {}
    with tempfile.TemporaryDirectory(dir=a.tmpdir) as tmp:
        tmp = Path(tmp)
        for kind in a.quantized_kinds:
            src = tmp / f"{kind}.safetensors"
            gen_quantized(kind, src, size)
            if kind == "gptq":  # amn recognises GPTQ by the model's config, as transformers does
                (tmp / "config.json").write_text(json.dumps({"quantization_config": {
                    "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": False}}))
            elif kind in LOWBIT_CONFIG:
                (tmp / "config.json").write_text(json.dumps({"quantization_config": LOWBIT_CONFIG[kind]}))
            tools = [("convert", [binary, src, "-o", tmp / "out-convert.safetensors", "--dequantize", "--no-sync"])]
            if a.amn and kind not in LOWBIT_CONFIG:
                tools.append(("amn remember", [a.amn, "remember", src, "-o", tmp / "out-amn.safetensors", "--force"]))
            if have_torch:
                script = tmp / "reference.py"
                script.write_text(LOWBIT_REFERENCE if kind in LOWBIT_CONFIG else QUANT_REFERENCE)
                tools.append(("torch", [sys.executable, script, kind, src, tmp / "out-torch.safetensors"]))
            warm([src])
            results = {name: [] for name, _ in tools}
            for r in range(a.runs):
                for name, cmd in tools[r % len(tools):] + tools[: r % len(tools)]:
                    wall, (rss, _, _), rc, _, err = timed(cmd, tmp, tmp / "time.txt", timeout=a.timeout)
                    if rc != 0:
                        print(f"{kind}: {name} failed: {err.strip()[-300:]}")
                        continue
                    results[name].append((wall, rss))
            ours, theirs = tmp / "out-convert.safetensors", tmp / "out-amn.safetensors"
            if ours.exists() and theirs.exists():
                mine, peer = safetensors_tensors(ours), safetensors_tensors(theirs)
                same = mine == peer
                line = f"{kind}: convert's output {'equals' if same else 'DIFFERS FROM'} amn's ({sorted(mine)} / {sorted(peer)})"
                print(line)
                lines.append(line)
            if have_torch:
                same = tensor_data_digest(tmp / "out-convert.safetensors") == tensor_data_digest(tmp / "out-torch.safetensors")
                line = f"{kind}: convert's output {'equals' if same else 'DIFFERS FROM'} torch's"
                print(line)
                lines.append(line)
            for name, runs in results.items():
                if runs:
                    wall = statistics.median(w for w, _ in runs)
                    rss = max(r for _, r in runs) / 1024
                    line = f"{kind} {src.stat().st_size / MIB:.0f} MiB in: {name}: median {wall:.2f} s, peak RSS {rss:.1f} MiB ({len(runs)} runs)"
                    print(line)
                    lines.append(line)
                    medians[(kind, name)] = (wall, rss)
            verdicts.extend(quantized_verdicts(kind, medians))
    if a.out and a.out != str(REPO / "benches" / "results.md"):
        write_quantized_results(a, lines, verdicts)
    return 0


# Issue 39's targets: convert --dequantize --no-sync against the libraries' own dequantization.
T_LOWBIT_LIB = 0.25
T_LOWBIT_RSS_MIB = 32.0


def quantized_verdicts(kind, medians):
    """Rows of (workload, target, measured, verdict) for one kind: time against the libraries'
    (torch) medians, and peak RSS."""
    ours, theirs = medians.get((kind, "convert")), medians.get((kind, "torch"))
    rows = []
    if ours and theirs:
        ratio = ours[0] / theirs[0]
        limit = T_LOWBIT_LIB if kind in LOWBIT_CONFIG else float("inf")
        verdict = "PASS" if ratio <= limit else "FAIL"
        target = f"convert / library <= {limit}" if kind in LOWBIT_CONFIG else "convert / torch (reported)"
        rows.append((kind, target, f"{ratio:.2f}", verdict if kind in LOWBIT_CONFIG else "-"))
    if ours:
        rows.append((kind, f"peak RSS <= {T_LOWBIT_RSS_MIB:.0f} MiB", f"{ours[1]:.1f} MiB",
                     "PASS" if ours[1] <= T_LOWBIT_RSS_MIB else "FAIL"))
    return rows


def write_quantized_results(a, lines, verdicts):
    load = os.getloadavg()[0]
    text = [
        "# Dequantization benchmark (`bench.py --quantized`)",
        "",
        f"- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, {os.cpu_count()} CPUs, load average (1 min) {load:.2f} at the end",
        f"- command: `python3 benches/bench.py {' '.join(sys.argv[1:])}`",
        "- `torch`: FP8 and GPTQ by the libraries' arithmetic written in torch; MXFP4 by transformers'"
        " `convert_moe_packed_tensors`, int4 by compressed-tensors' `PackedQuantizationCompressor.decompress`;"
        " each then `save_file`. Whether convert's output equals theirs, tensor for tensor, is in the log.",
        "",
        "```",
        *lines,
        "```",
        "",
        "| workload | target | measured | verdict |",
        "|---|---|---:|---|",
        *[f"| {k} | {t} | {m} | {v} |" for k, t, m, v in verdicts],
        "",
    ]
    Path(a.out).write_text("\n".join(text))
    print(f"written to {a.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=None, help="scale of the big inputs (npz-stored and safetensors are this size; npy half; deflated a quarter). Default 1")
    ap.add_argument("--runs", type=int, default=None, help="timed runs of each tool (median reported). Default 5")
    ap.add_argument("--only", type=lambda s: [w.strip() for w in s.split(",") if w.strip()], help="comma-separated workloads: " + ",".join(WORKLOADS))
    ap.add_argument("--out", default=str(REPO / "benches" / "results.md"), help="markdown file to write ('' for none). Default benches/results.md")
    ap.add_argument("--quick", action="store_true", help="everything tiny, 1 run (smoke test): --size-gib 1/64, --runs 1, 2,000 small arrays, plan 25k/50k/100k")
    ap.add_argument("--small-count", type=int, default=None, help="arrays in npz-small (default 20000)")
    ap.add_argument("--plan-sizes", type=lambda s: [int(x) for x in s.split(",")], default=None, help="tensor counts for plan-1m (default 250000,500000,1000000)")
    ap.add_argument("--tmpdir", default=None, help="where to create the temporary directory (default: $TMPDIR or /tmp)")
    ap.add_argument("--timeout", type=float, default=300, help="kill a run after this many seconds; a tool that times out is not run again in that workload (default 300)")
    ap.add_argument("--slow", type=float, default=60, help="if convert's untimed first run of a workload takes longer than this, time 1 run instead of --runs (default 60)")
    ap.add_argument("--shuffle", action="store_true", help="shuffle the tools' order in each round (seeded; Python stays last) instead of the fixed order, against position effects")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (inputs) afterwards")
    ap.add_argument("--reuse", default=None, help="run in DIR, the temporary directory a run with --keep left, without generating again the inputs it holds (kept afterwards)")
    ap.add_argument("--no-build", action="store_true", help="skip cargo build --release; time target/release/convert as it is")
    ap.add_argument("--baseline", default=None, help="another convert binary (e.g. the last release) timed in the same rounds, each mode beside this build's and cp: before/after figures from one run")
    ap.add_argument("--amn", default=shutil.which("amn"), help="the anamnesis CLI (`amn`, crate anamnesis 0.7.10 with features cli,npz), timed on npz-small as the fastest peer. Default: amn on PATH")
    ap.add_argument("--gguf-python", default=sys.executable, help="a Python with gguf (0.19) and safetensors, for the gguf workload's input and reference. Default: this Python")
    ap.add_argument("--onnx-python", default=sys.executable, help="a Python with onnx (1.23) and safetensors, for the onnx workloads' inputs, checks and reference. Default: this Python")
    ap.add_argument("--flax-python", default=sys.executable, help="a Python with flax (0.12), ml_dtypes and safetensors, for the msgpack workload. Default: this Python")
    ap.add_argument("--h5-python", default=sys.executable, help="a Python with h5py (3.16) and safetensors, for the hdf5 workloads. Default: this Python")
    ap.add_argument("--no-python", action="store_true", help="skip the Python reference (saves most of the run's time; the x Python targets then read 'no data')")
    ap.add_argument("--quantized", action="store_true", help="time only the dequantization workloads: FP8 and GPTQ (issue 29), MXFP4 experts and compressed-tensors int4 (issue 39)")
    ap.add_argument("--quantized-kinds", dest="quantized_kinds", type=lambda s: [w.strip() for w in s.split(",") if w.strip()],
                    default=["fp8", "gptq", "mxfp4", "int4"], help="with --quantized: which of fp8,gptq,mxfp4,int4 (default all)")
    a = ap.parse_args()
    if a.quantized:
        a.size_gib = a.size_gib or (1 / 64 if a.quick else 1.0)
        a.runs = a.runs or (1 if a.quick else 3)
        sys.exit(quantized_bench(a))
    if a.quick:
        a.size_gib = a.size_gib or 1 / 64
        a.runs = a.runs or 1
        a.small_count = a.small_count or 2000
        a.plan_sizes = a.plan_sizes or [25_000, 50_000, 100_000]
    a.size_gib = 1.0 if a.size_gib is None else a.size_gib
    a.runs = 5 if a.runs is None else a.runs
    a.small_count = a.small_count or 20_000
    a.plan_sizes = sorted(a.plan_sizes or [250_000, 500_000, 1_000_000])
    if a.only:
        bad = [w for w in a.only if w not in WORKLOADS]
        if bad:
            ap.error(f"unknown workload(s) {bad}; choose from {WORKLOADS}")
    if a.runs < 1 or a.size_gib <= 0:
        ap.error("--runs must be >= 1 and --size-gib > 0")
    if not Path("/usr/bin/time").exists():
        sys.exit("bench: /usr/bin/time (GNU time) is needed for peak RSS")
    sys.exit(Bench(a).run())


if __name__ == "__main__":
    main()
