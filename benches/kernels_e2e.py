#!/usr/bin/env python3
"""The kernels end to end (issue 40): one `convert` binary on its vector path and forced onto
the scalar reference (`SAFETENSORS_STREAM_KERNELS=scalar`), each against the same binary's
`--no-sync` copy of a plain safetensors file of max(input, output) bytes.

    python3 benches/kernels_e2e.py --binary target/release/convert [--size-gib 1] [--runs 5] [--kernels]
        [--baseline OTHER_BINARY] [--no-scalar] [--only fp8-bf16,gptq-bf16]

`--kernels` first prints the Gelem/s of every kernel on every path this CPU has (scalar, AVX2,
AVX-512), from `cargo bench --features internals --bench kernels` in this checkout, beside amn's
published figures.

Workloads: `f32-bf16` (16 F32 tensors, `--cast-all BF16`), `bf16-f32` (16 BF16 tensors,
`--cast-all F32`: the output twice the input), `nf4-bf16` (bitsandbytes NF4, blocks of 64, BF16
output of the size given), `fp8-bf16` (DeepSeek-style E4M3
codes with 128 x 128 F32 block scales, `--dequantize`, generated as `bench.py --quantized`
does), `gptq-bf16` (GPTQ 4-bit, groups of 128, F16 scales), `mxfp4-bf16` (gpt-oss experts, to
BF16 transposed: 4 x the input's bytes) and `gguf-bf16` (a Q4_K_M-like GGUF: Q4_K and Q6_K, to BF16). Each round runs the three tools of a workload in an order rotated by one a round, each
after an untimed `sync`, its output deleted and synced after it; inputs are read once before
the rounds (warm cache). Printed: median wall time, peak RSS, and the median over rounds of
each run's time over its round's copy (the paired ratio), with the load average around it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (its generators, timer and page-cache warmer)

import numpy as np  # noqa: E402


def plain(path: Path, size: int, dtype=np.float32, count=16):
    """A safetensors file of `count` tensors, `size` bytes of data in all (`dtype` "BF16": F32
    normals with their low halves dropped)."""
    rng = np.random.default_rng(40)
    width = 2 if dtype == "BF16" else np.dtype(dtype).itemsize
    per = size // count // width
    def one():
        if dtype == np.uint8:
            return rng.integers(0, 256, per, dtype=np.uint8)
        if dtype == "BF16":
            return (rng.standard_normal(per, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return rng.standard_normal(per, dtype=np.float32)

    arrays = {f"model.layers.{i}.weight": one() for i in range(count)}
    code = {np.float32: "F32", np.uint8: "U8", "BF16": "BF16"}[dtype]
    write_safetensors(path, {name: (code, [per], a) for name, a in arrays.items()})


def write_safetensors(path: Path, tensors):
    """`tensors`: name -> (dtype code, shape, array), laid out in order."""
    header, offset = {}, 0
    for name, (code, shape, a) in tensors.items():
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, a in tensors.values():
            f.write(a.tobytes())


# bitsandbytes' NF4 code book (`get_4bit_type("nf4")`), the file's `quant_map`.
NF4 = np.array([0xbf800000, 0xbf3239b1, 0xbf066b30, 0xbeca32a0, 0xbe91a24d, 0xbe3d353f, 0xbdba7871, 0,
                0x3da2faff, 0x3e24cae3, 0x3e7c04dd, 0x3ead033a, 0x3ee1a4b8, 0x3f1007ab, 0x3f3913b3,
                0x3f800000], dtype=np.uint32).view(np.float32)


def nf4(path: Path, size: int):
    """bitsandbytes NF4 as transformers saves it (`.weight` packed U8, `.absmax` F32 per block of
    64, `.quant_map`, the `quant_state.bitsandbytes__nf4` record; BF16 weights, no nested
    statistics): 8 tensors of 8192 columns whose BF16 output is `size` bytes in all."""
    rng = np.random.default_rng(41)
    cols, count = 8192, 8
    rows = max(1, size // 2 // count // cols)
    n = rows * cols
    tensors = {}
    for i in range(count):
        w = f"model.layers.{i}.mlp.up_proj.weight"
        record = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [rows, cols]})
        record = np.frombuffer(record.encode(), dtype=np.uint8)
        tensors[w] = ("U8", [n // 2, 1], rng.integers(0, 256, n // 2, dtype=np.uint8))
        tensors[f"{w}.absmax"] = ("F32", [n // 64], (rng.random(n // 64, dtype=np.float32) * 0.1 + 1e-3))
        tensors[f"{w}.quant_map"] = ("F32", [16], NF4)
        tensors[f"{w}.quant_state.bitsandbytes__nf4"] = ("U8", [record.size], record)
    write_safetensors(path, tensors)
    return count * n


def gguf(path: Path, size: int):
    """A Q4_K_M-like GGUF of about `size` bytes, no metadata: 16 tensors of 2048 x 8192 elements
    (or fewer rows to fit), three Q4_K to each Q6_K, random code bits under sane f16 scales."""
    rng = np.random.default_rng(40)
    kinds = {12: (144, [0, 2]), 14: (210, [208])}  # ggml type: block bytes, its f16 scale fields
    cols, count = 8192, 16
    rows = max(1, size // count // (cols // 256 * 160))
    tensors = []
    for i in range(count):
        ty = 14 if i % 4 == 3 else 12
        bb, f16s = kinds[ty]
        n = rows * cols // 256
        b = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
        for at in f16s:
            d = (rng.uniform(-1, 1, n) * 2.0**-6).astype(np.float16)
            b[:, at:at + 2] = d.view(np.uint8).reshape(n, 2)
        tensors.append((f"blk.{i}.ffn_up.weight", ty, b))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 0)
    offset = 0
    for name, ty, b in tensors:
        head += struct.pack("<Q", len(name)) + name.encode()
        head += struct.pack("<IQQIQ", 2, cols, rows, ty, offset)
        offset += b.nbytes + (-b.nbytes % 32)
    head += b"\0" * (-len(head) % 32)
    with open(path, "wb") as f:
        f.write(head)
        for _, _, b in tensors:
            f.write(b.tobytes() + b"\0" * (-b.nbytes % 32))
    return count * rows * cols


# amn's published dequantization throughput (issue 40), for the kernel table.
AMN_GELEM_S = "0.66-2.0"


def kernel_table(repo: Path, filters):
    """Gelem/s per kernel and path: `cargo bench --bench kernels` (divan, every path this CPU
    has) over the casts, FP8, GGUF and 4-bit kernels, its median item throughput per case."""
    cmd = ["cargo", "bench", "--features", "internals", "--bench", "kernels", "--", *filters]
    text = subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout
    scale = {"": 1e-9, "K": 1e-6, "M": 1e-3, "G": 1.0, "T": 1e3}
    rows, name = {}, None
    for line in text.splitlines():
        # "│  ├─ F32->BF16 scalar   211.2 µs   │ ...": a case and its times; the lines under it
        # its throughputs, fastest, slowest, median, mean.
        case = re.search(r"─ (\S.*?)\s+[\d.]+ (?:ns|µs|ms|s)\b", line)
        if case:
            name = case.group(1)
            continue
        items = re.findall(r"([\d.]+) ([KMGT]?)item/s", line)
        if name and len(items) >= 3:
            value, unit = items[2]
            *what, path = name.split()
            rows.setdefault(" ".join(what), {})[path] = float(value) * scale[unit]
            name = None
    paths = ["scalar", "avx2", "avx512"]
    print("| kernel | " + " | ".join(paths) + " | amn (published) |")
    print("|---|" + "---:|" * (len(paths) + 1))
    for what, by_path in rows.items():
        cells = [f"{by_path[p]:.2f}" if p in by_path else "-" for p in paths]
        print(f"| {what} | " + " | ".join(cells) + f" | {AMN_GELEM_S} |")


def wait_quiet():
    """Starts nothing while the lead's quiet window (/work/QUIET, or $QUIET_FILE) is open."""
    flag = os.environ.get("QUIET_FILE", "/work/QUIET")
    while os.path.exists(flag):
        time.sleep(20)


# A second binary (`--baseline`), run interleaved beside the vector path as `baseline`.
BASELINE = None
NO_SCALAR = False


def run_workload(name, tools, tmp: Path, runs: int, inputs):
    if BASELINE:
        tools = tools + [("baseline", [BASELINE, *cmd[1:]]) for t, cmd in tools if t == "vector"]
    if NO_SCALAR:
        tools = [t for t in tools if t[0] != "scalar"]
    wait_quiet()
    bench.warm(inputs)
    subprocess.run(["sync"], check=True)
    times = {t: [] for t, _ in tools}
    rss = {t: [] for t, _ in tools}
    cpu = {t: [] for t, _ in tools}
    ratios = {t: [] for t, _ in tools}
    for r in range(runs):
        order = tools[r % len(tools):] + tools[: r % len(tools)]
        this = {}
        wait_quiet()
        for tool, cmd in order:
            subprocess.run(["sync"], check=True)
            wall, (kib, user, sys_s), rc, _, err = bench.timed(cmd, tmp, tmp / "time.txt")
            if rc != 0:
                sys.exit(f"{name}: {tool} failed: {err.strip()[-400:]}")
            for out in tmp.glob("out-*"):
                out.unlink()
            subprocess.run(["sync"], check=True)
            this[tool] = wall
            times[tool].append(wall)
            rss[tool].append(kib / 1024)
            cpu[tool].append(user + sys_s)
        for tool in this:
            ratios[tool].append(this[tool] / this["copy"])
    for tool, _ in tools:
        print(
            f"| {name} | {tool} | {statistics.median(times[tool]):.3f} | "
            f"{statistics.median(ratios[tool]):.2f} | {max(rss[tool]):.1f} | "
            f"{statistics.median(cpu[tool]):.2f} |"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", type=Path, required=True)
    ap.add_argument("--size-gib", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tmpdir", type=Path, default=None)
    ap.add_argument("--only", default="f32-bf16,bf16-f32,fp8-bf16,gptq-bf16,nf4-bf16,mxfp4-bf16,gguf-bf16",
                    help="comma-separated workloads (default: all)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a second binary (say, the base commit's) run interleaved as `baseline`")
    ap.add_argument("--no-scalar", action="store_true", help="leave out the scalar reference runs")
    ap.add_argument("--kernels", action="store_true",
                    help="first, the Gelem/s table of every kernel and path (cargo bench, this checkout)")
    a = ap.parse_args()
    if a.kernels:
        print("Gelem/s of input elements, divan median (`cargo bench --features internals --bench kernels`):")
        kernel_table(Path(__file__).resolve().parent.parent, ["cast", "fp8", "ggml", "four_bit"])
        print()
    size = int(a.size_gib * bench.GIB)
    binary = a.binary.resolve()
    scalar = ["env", "SAFETENSORS_STREAM_KERNELS=scalar", binary]
    print(f"load average at start: {os.getloadavg()}")
    global BASELINE, NO_SCALAR
    BASELINE = a.baseline.resolve() if a.baseline else None
    NO_SCALAR = a.no_scalar
    print("| workload | tool | median s | paired x copy | peak RSS MiB | user+sys s |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(dir=a.tmpdir) as tmp:
        tmp = Path(tmp)
        if "f32-bf16" in a.only:
            src = tmp / "f32.safetensors"
            plain(src, size)
            args = [src, "-o", tmp / "out-x.safetensors", "--no-sync", "-q"]
            tools = [
                ("copy", [binary, *args]),
                ("vector", [binary, *args, "--cast-all", "BF16"]),
                ("scalar", [*scalar, *args, "--cast-all", "BF16"]),
            ]
            run_workload("F32 -> BF16", tools, tmp, a.runs, [src])
            src.unlink()
        if "bf16-f32" in a.only:
            # `size` bytes of BF16 in, twice that out: the copy is of the output's size.
            src, big = tmp / "bf16.safetensors", tmp / "plain.safetensors"
            plain(src, size, dtype="BF16")
            plain(big, 2 * size, dtype=np.uint8)
            args = [src, "-o", tmp / "out-x.safetensors", "--no-sync", "-q", "--cast-all", "F32"]
            tools = [
                ("copy", [binary, big, "-o", tmp / "out-x.safetensors", "--no-sync", "-q"]),
                ("vector", [binary, *args]),
                ("scalar", [*scalar, *args]),
            ]
            run_workload("BF16 -> F32", tools, tmp, a.runs, [src, big])
            src.unlink()
            big.unlink()
        if "nf4-bf16" in a.only:
            src, big = tmp / "nf4.safetensors", tmp / "plain.safetensors"
            elems = nf4(src, size)
            (tmp / "config.json").write_text(json.dumps(
                {"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}))
            plain(big, 2 * elems, dtype=np.uint8)
            args = [src, "-o", tmp / "out-x.safetensors", "--no-sync", "-q", "--dequantize"]
            tools = [
                ("copy", [binary, big, "-o", tmp / "out-x.safetensors", "--no-sync", "-q"]),
                ("vector", [binary, *args]),
                ("scalar", [*scalar, *args]),
            ]
            run_workload("NF4 -> BF16", tools, tmp, a.runs, [src, big])
            src.unlink()
            big.unlink()
            (tmp / "config.json").unlink()
        # Quantized safetensors: (workload, bench.py's generator, its size argument, the
        # output's bytes over the input's, config.json's quantization_config).
        quantized = [
            ("fp8-bf16", "FP8 block -> BF16", "fp8", size, 2, None),
            ("gptq-bf16", "GPTQ int4 -> BF16", "gptq", size, 1, {
                "quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": False}),
            ("mxfp4-bf16", "MXFP4 (gpt-oss) -> BF16", "mxfp4", size // 4, 4, bench.LOWBIT_CONFIG["mxfp4"]),
        ]
        for key, title, kind, gen_size, factor, config in quantized:
            if key not in a.only:
                continue
            src = tmp / f"{kind}.safetensors"
            bench.gen_quantized(kind, src, gen_size)
            config_path = tmp / "config.json"
            if config:
                config_path.write_text(json.dumps({"quantization_config": config}))
            big = tmp / "plain.safetensors"
            # The copy: max(input, output) bytes (the GPTQ generator's size is its output's).
            plain(big, max(src.stat().st_size, factor * gen_size if kind != "gptq" else gen_size), dtype=np.uint8)
            args = [src, "-o", tmp / "out-x.safetensors", "--no-sync", "-q", "--dequantize"]
            tools = [
                ("copy", [binary, big, "-o", tmp / "out-x.safetensors", "--no-sync", "-q"]),
                ("vector", [binary, *args]),
                ("scalar", [*scalar, *args]),
            ]
            run_workload(title, tools, tmp, a.runs, [src, big])
            src.unlink()
            big.unlink()
            config_path.unlink(missing_ok=True)
        if "gguf-bf16" in a.only:
            src = tmp / "q4km.gguf"
            elems = gguf(src, size)
            big = tmp / "plain.safetensors"
            plain(big, 2 * elems, dtype=np.uint8)
            args = [src, "-o", tmp / "out-x.safetensors", "--no-sync", "-q"]
            tools = [
                ("copy", [binary, big, "-o", tmp / "out-x.safetensors", "--no-sync", "-q"]),
                ("vector", [binary, *args]),
                ("scalar", [*scalar, *args]),
            ]
            run_workload("GGUF Q4_K/Q6_K -> BF16", tools, tmp, a.runs, [src, big])
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
