"""The workloads of issue 43, for bench.py: ONNX (raw_data inline, and external data), Flax
MsgPack, HDF5 (Keras 2 / TF `tf_model.h5` layout, contiguous) and HDF5 chunked (gzip + shuffle).

Each input is written by the format's own writer (onnx.save_model, flax.serialization's
msgpack_serialize, h5py), run in a Python that has it (--onnx-python, --flax-python,
--h5-python); each convert output is checked tensor by tensor, bytes, dtype and shape, against
what that library reads back from the input. The model is the same in all four: GPT-2-like
float32 layers (LayerNorm vectors, attention and MLP kernels, biases) and an embedding of about
a quarter of the bytes, named as each format names them.

Targets (issue 43): throughput >= 0.8 x cp, i.e. convert's time <= 1.25 x cp's (--no-sync
against plain cp, fsync against cp+sync), and peak RSS <= 32 MiB (+ the header, small here).
"""

from __future__ import annotations

import subprocess

T_FORMAT_CP = 1.25  # convert / cp: throughput >= 0.8 x cp (issue 43)

# The model every generator writes, and the check's reader of a safetensors output. Prepended
# to each script below.
COMMON_PY = r'''
import json, mmap, struct, sys
import numpy as np

PARTS = [("ln_1.weight", "ln_1/gamma:0", "ln_1.scale", "h"),
         ("ln_1.bias", "ln_1/beta:0", "ln_1.bias", "h"),
         ("attn.c_attn.weight", "attn/c_attn/weight:0", "attn.c_attn.kernel", "h,3h"),
         ("attn.c_attn.bias", "attn/c_attn/bias:0", "attn.c_attn.bias", "3h"),
         ("attn.c_proj.weight", "attn/c_proj/weight:0", "attn.c_proj.kernel", "h,h"),
         ("attn.c_proj.bias", "attn/c_proj/bias:0", "attn.c_proj.bias", "h"),
         ("ln_2.weight", "ln_2/gamma:0", "ln_2.scale", "h"),
         ("ln_2.bias", "ln_2/beta:0", "ln_2.bias", "h"),
         ("mlp.c_fc.weight", "mlp/c_fc/weight:0", "mlp.c_fc.kernel", "h,4h"),
         ("mlp.c_fc.bias", "mlp/c_fc/bias:0", "mlp.c_fc.bias", "4h"),
         ("mlp.c_proj.weight", "mlp/c_proj/weight:0", "mlp.c_proj.kernel", "4h,h"),
         ("mlp.c_proj.bias", "mlp/c_proj/bias:0", "mlp.c_proj.bias", "h")]

def model(total):
    """[(torch name, TF name, Flax path, shape)] of a GPT-2-like float32 model of about `total`
    bytes: an embedding of a quarter of them, then as many layers as fill the rest."""
    h = 1024 if total >= (256 << 20) else 128
    vocab = max(16, int(total // 4 // (4 * h)))
    out = [("transformer.wte.weight", "wte/weight:0", "transformer.wte.embedding", (vocab, h))]
    dims = lambda s: tuple({"h": h, "3h": 3 * h, "4h": 4 * h}[d] for d in s.split(","))
    per = sum(4 * int(np.prod(dims(s))) for *_, s in PARTS)
    for i in range(max(1, int((total - 4 * vocab * h) // per))):
        for t, tf, fl, s in PARTS:
            out.append((f"transformer.h.{i}.{t}", f"h_._{i}/{tf}", f"transformer.h.{i}.{fl}", dims(s)))
    return out

def array(k, shape, dtype=np.float32):
    return np.random.default_rng(4300 + k).standard_normal(shape, dtype=np.float32).astype(dtype)

ST = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}

def check(out, expected):
    """Every (name, array) of `expected` is in the safetensors file `out` with its dtype, shape
    and bytes, and nothing else is. Exits 1 naming the first difference."""
    f = open(out, "rb")
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    n = struct.unpack("<Q", m[:8])[0]
    header = json.loads(m[8:8 + n])
    header.pop("__metadata__", None)
    seen = 0
    for name, a in expected:
        e = header.get(name)
        if e is None:
            sys.exit(f"{name}: missing (have {sorted(header)[:3]}...)")
        a = np.asarray(a)
        a = a.astype(a.dtype.newbyteorder("<"), order="C", copy=False)
        if e["dtype"] != ST.get(a.dtype.name) or tuple(e["shape"]) != a.shape:
            sys.exit(f"{name}: {e['dtype']}{e['shape']}, expected {a.dtype.name}{list(a.shape)}")
        b, end = e["data_offsets"]
        got = np.frombuffer(m, dtype=np.uint8, count=end - b, offset=8 + n + b)
        if not np.array_equal(got, a.reshape(-1).view(np.uint8)):
            sys.exit(f"{name}: bytes differ")
        seen += 1
    if seen != len(header):
        sys.exit(f"{len(header)} tensors in the output, {seen} in the input")
'''

# --- ONNX: onnx.save_model of Identity nodes over the initializers (a graph the reader skips),
# raw_data inline (numpy_helper.from_array), or every initializer over 1 KiB in one external
# file beside the model. One f16 kernel.
ONNX_GEN_PY = COMMON_PY + r'''
import os
import onnx
from onnx import TensorProto, helper, numpy_helper
path, total, external = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
inits, nodes, outputs = [], [], []
for k, (name, _, _, shape) in enumerate(model(total)):
    dt = np.float16 if name == "transformer.h.0.mlp.c_fc.weight" else np.float32
    inits.append(numpy_helper.from_array(array(k, shape, dt), name))
    nodes.append(helper.make_node("Identity", [name], [name + ".out"]))
    elem = TensorProto.FLOAT16 if dt == np.float16 else TensorProto.FLOAT
    outputs.append(helper.make_tensor_value_info(name + ".out", elem, list(shape)))
graph = helper.make_graph(nodes, "bench", [], outputs, initializer=inits)
m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
del inits, graph
if external:
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(path) + ".data", size_threshold=1024)
else:
    onnx.save_model(m, path)
'''

ONNX_CHECK_PY = COMMON_PY + r'''
import onnx
from onnx import numpy_helper
src, out = sys.argv[1], sys.argv[2]
m = onnx.load(src)  # external data from the model's folder
check(out, ((t.name, numpy_helper.to_array(t)) for t in m.graph.initializer))
'''

ONNX_REF_PY = r'''
import sys
import onnx
from onnx import numpy_helper
from safetensors.numpy import save_file
m = onnx.load(sys.argv[1])
save_file({t.name: numpy_helper.to_array(t) for t in m.graph.initializer}, sys.argv[2])
'''

# --- Flax MsgPack: flax.serialization.msgpack_serialize of the nested params (what
# transformers' save_pretrained writes to flax_model.msgpack). One bf16 kernel. Flax writes an
# array over MAX_CHUNK_SIZE (2^30 bytes) as {"__msgpack_chunked_array__", "shape", "chunks"};
# the limit is lowered here to a third of the embedding's bytes so that the embedding takes
# that form at any --size-gib (the form, not the limit, is what a reader meets).
MSGPACK_GEN_PY = COMMON_PY + r'''
import ml_dtypes
import flax.serialization as fs
path, total = sys.argv[1], int(sys.argv[2])
tree = {}
for k, (_, _, flax_path, shape) in enumerate(model(total)):
    dt = ml_dtypes.bfloat16 if flax_path == "transformer.h.0.mlp.c_fc.kernel" else np.float32
    a = array(k, shape, dt)
    *up, leaf = flax_path.split(".")
    d = tree
    for p in up:
        d = d.setdefault(p, {})
    d[leaf] = a
emb = tree["transformer"]["wte"]["embedding"]
fs.MAX_CHUNK_SIZE = min(fs.MAX_CHUNK_SIZE, emb.nbytes // 3 + 1)
with open(path, "wb") as f:
    f.write(fs.msgpack_serialize(tree))
'''


MSGPACK_FLAT_PY = r'''
import flax.serialization as fs
def flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, prefix + k + ".")
        else:
            yield prefix + k, v
with open(sys.argv[1], "rb") as f:
    tree = fs.msgpack_restore(f.read())
'''

MSGPACK_CHECK_PY = COMMON_PY + MSGPACK_FLAT_PY + r'''
check(sys.argv[2], flat(tree))
'''

MSGPACK_REF_PY = r'''
import sys
from safetensors.numpy import save_file
''' + MSGPACK_FLAT_PY + r'''
save_file(dict(flat(tree)), sys.argv[2])
'''

# --- HDF5: Keras 2 `save_weights` as transformers' TF classes write tf_model.h5: the root's
# layer_names, backend and keras_version; one layer group `transformer` with its weight_names;
# each weight a dataset at transformer/tf_gpt2_model/transformer/<TF name> (GPT-2's TF biases
# (1, n)). Contiguous (h5py's default), or chunked by h5py's own guess with shuffle + gzip.
H5_GEN_PY = COMMON_PY + r'''
import h5py
path, total, chunked = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
kw = dict(chunks=True, shuffle=True, compression="gzip") if chunked else {}
names = []
with h5py.File(path, "w") as f:
    f.attrs["layer_names"] = [b"transformer"]
    f.attrs["backend"] = b"tensorflow"
    f.attrs["keras_version"] = b"2.19.0"
    g = f.create_group("transformer")
    for k, (name, tf, _, shape) in enumerate(model(total)):
        a = array(k, shape)
        if "attn/c_" in tf or "mlp/c_" in tf:
            a = a.reshape(1, -1) if a.ndim == 1 else a
        n = "tf_gpt2_model/transformer/" + tf
        g.create_dataset(n, data=a, track_times=False, **kw)
        names.append(n.encode())
    g.attrs["weight_names"] = names
'''

H5_FLAT_PY = r'''
import h5py
def datasets(path):
    found = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: found.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in found:
            yield name, f[name][()]
'''

H5_CHECK_PY = COMMON_PY + H5_FLAT_PY + r'''
check(sys.argv[2], datasets(sys.argv[1]))
'''

H5_REF_PY = r'''
import sys
from safetensors.numpy import save_file
''' + H5_FLAT_PY + r'''
save_file(dict(datasets(sys.argv[1])), sys.argv[2])
'''


def _script(bench, name, text):
    path = bench.tmp / name
    path.write_text(text)
    return path


def _have(bench, workload, py, modules, flag):
    p = subprocess.run([py, "-c", f"import {modules}"], capture_output=True)
    if p.returncode != 0:
        bench.skipped[workload] = f"{py} cannot import {modules} (pass {flag})"
        return False
    return True


def _cp_files(files):
    """cp and cp+sync of several files (a model and its external data) into the output folder,
    which holds nothing else: cp+sync fsyncs each copy and the folder, in one sync command."""

    def cp(o):
        return ["cp", "--reflink=never", *files, o]

    def cp_sync(o):
        cmd = 'out="$1"; shift; cp --reflink=never "$@" "$out" && cd "$out" && sync -- * .'
        return ["sh", "-c", cmd, "sh", o, *files]

    return [("cp", cp, "cp"), ("cp+sync", cp_sync, "cp")]


def _workload(bench, name, py, files, model_path, check, ref, note):
    """Times cp, cp+sync, convert (both modes) and the library's own load + save_file on `files`
    (the model and anything it reads), checks every output with `check`, and records the
    targets."""
    dest = "model.safetensors"
    tools = _cp_files(files) if len(files) > 1 else bench.cp_tools(files[0], dest)
    if not bench.args.no_python:
        label = "python (load + save_file)"
        tools.append((label, lambda o: [py, ref, model_path, o / dest], "py"))
    tools += bench.convert_tools(model_path, dest)

    def verify(o):
        p = subprocess.run([py, check, model_path, o / dest], capture_output=True, text=True)
        return "ok" if p.returncode == 0 else f"WRONG: {(p.stderr or p.stdout).strip()[-300:]}"

    rows = bench.convert_workload(name, files, model_path, tools, verify)
    if not rows:
        return
    bench.notes.append(f"{name}: {note}")
    bench.copy_targets(name, rows, T_FORMAT_CP)


def w_onnx(bench, external: bool):
    name = "onnx-external" if external else "onnx"
    py = bench.args.onnx_python
    if not _have(bench, name, py, "onnx, safetensors", "--onnx-python"):
        return
    gen = _script(bench, "onnx_gen.py", ONNX_GEN_PY)

    def make(path, total):
        path.mkdir()
        subprocess.run([py, gen, path / "model.onnx", str(int(total)), "1" if external else "0"], check=True)

    folder = bench.input(name, make, bench.size)
    model_path = folder / "model.onnx"
    files = [model_path] + ([folder / "model.onnx.data"] if external else [])
    how = "every initializer over 1 KiB in model.onnx.data beside the model (onnx.save_model save_as_external_data)" if external else "initializers in raw_data inside model.onnx"
    note = f"{how}; {sum(f.stat().st_size for f in files) / (1 << 20):.1f} MiB, checked against onnx.load + numpy_helper.to_array."
    _workload(bench, name, py, files, model_path, _script(bench, "onnx_check.py", ONNX_CHECK_PY), _script(bench, "onnx_ref.py", ONNX_REF_PY), note)


def w_msgpack(bench):
    py = bench.args.flax_python
    if not _have(bench, "msgpack", py, "flax, ml_dtypes, safetensors", "--flax-python"):
        return
    gen = _script(bench, "msgpack_gen.py", MSGPACK_GEN_PY)

    def make(path, total):
        subprocess.run([py, gen, path, str(int(total))], check=True)

    src = bench.input("flax_model.msgpack", make, bench.size)
    note = (f"flax.serialization.msgpack_serialize of the params ({src.stat().st_size / (1 << 20):.1f} MiB), the embedding "
            "in flax's chunked form (3 chunks: MAX_CHUNK_SIZE lowered from 2^30 to a third of it), one bf16 kernel; "
            "checked against flax.serialization.msgpack_restore.")
    _workload(bench, "msgpack", py, [src], src, _script(bench, "msgpack_check.py", MSGPACK_CHECK_PY),
              _script(bench, "msgpack_ref.py", MSGPACK_REF_PY), note)


def w_hdf5(bench, chunked: bool):
    name = "hdf5-chunked" if chunked else "hdf5"
    py = bench.args.h5_python
    if not _have(bench, name, py, "h5py, safetensors", "--h5-python"):
        return
    gen = _script(bench, "h5_gen.py", H5_GEN_PY)

    def make(path, total):
        subprocess.run([py, gen, path, str(int(total)), "1" if chunked else "0"], check=True)

    src = bench.input(f"{name}.h5", make, bench.size)
    how = "chunked by h5py's guess, shuffle + gzip (level 4)" if chunked else "contiguous (h5py's default)"
    note = (f"Keras 2 save_weights layout (tf_model.h5 of a GPT-2-like model), every dataset {how}; "
            f"{src.stat().st_size / (1 << 20):.1f} MiB; checked against h5py.")
    _workload(bench, name, py, [src], src, _script(bench, "h5_check.py", H5_CHECK_PY), _script(bench, "h5_ref.py", H5_REF_PY), note)
