"""Two builds of the Python package, interleaved: the cost of writing numpy
buffers without Rust reading them (issue 24, python/src/bytes.rs).

    python benches/python_buffers.py --old DIR --new DIR [--rounds 5] [--tmpdir DIR]

DIR: an unpacked wheel of each build (`maturin build --release -o W` then
`python -m zipfile -e W/*.whl DIR`), put first on the child's PYTHONPATH.
Each run is a fresh process writing 1 GiB of numpy arrays made before the
clock starts; the table gives the median time of each build, the ratio of
the medians (new / old) and the largest peak-RSS growth over the rounds.
Rounds alternate which build goes first. Linux only (/proc/self/status).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
GIB = 1 << 30

# name: (arrays, bytes each, bytes per write, fsync)
WORKLOADS = {
    "4 x 256 MiB arrays, 1 MiB views, no fsync": (4, 256 * MIB, MIB, False),
    "16384 x 64 KiB arrays, one write each, no fsync": (16384, 64 << 10, 64 << 10, False),
    "65536 x 16 KiB arrays, one write each, no fsync": (65536, 16 << 10, 16 << 10, False),
    "sts.save_file, 4 x 256 MiB arrays (fsync)": (4, 256 * MIB, 0, True),
}


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def run(path: str, workload: str, expect: str) -> None:
    import numpy as np

    import safetensors_stream as sts

    assert sts.__file__.startswith(expect), (sts.__file__, expect)
    count, size, step, sync = WORKLOADS[workload]
    arrays = {f"t{i:05d}": np.full(size, i % 251, dtype=np.uint8) for i in range(count)}
    base = rss_kib("VmRSS")
    t = time.perf_counter()
    if sync:
        sts.save_file(arrays, path)
    else:
        specs = [(k, "U8", a.shape) for k, a in arrays.items()]
        with sts.Writer(path, specs, sync=False) as w:
            for name in w.order:
                a = arrays[name]
                for i in range(0, a.size, step):
                    w.write(name, a[i : i + step])
    secs = time.perf_counter() - t
    grow = (rss_kib("VmHWM") - base) / 1024
    print(f"{secs:.4f} {grow:.1f}")


def child(build: str, path: str, workload: str) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=build)
    out = subprocess.run(
        [sys.executable, __file__, "--child", path, workload, build],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    secs, grow = out.stdout.split()
    return float(secs), float(grow)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old")
    p.add_argument("--new")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tmpdir", default=None)
    p.add_argument("--child", nargs=3)
    a = p.parse_args()
    if a.child:
        run(*a.child)
        return
    builds = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    results = {(w, b): [] for w in WORKLOADS for b in builds}
    with tempfile.TemporaryDirectory(dir=a.tmpdir) as d:
        path = os.path.join(d, "out.safetensors")
        for r in range(a.rounds):
            for w in WORKLOADS:
                order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
                for b in order:
                    os.sync()  # no run pays for another's writeback
                    results[(w, b)].append(child(builds[b], path, w))
                    os.unlink(path)
    print(f"1 GiB per run, median of {a.rounds} interleaved rounds (new / old)")
    print("| workload | old s | new s | new / old | old GiB/s | new GiB/s | peak RSS growth old / new | every round old; new (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for w in WORKLOADS:
        med = {}
        for b in builds:
            runs = sorted(s for s, _ in results[(w, b)])
            med[b] = runs[len(runs) // 2]
        rss = {b: max(g for _, g in results[(w, b)]) for b in builds}
        every = "; ".join(", ".join(f"{s:.2f}" for s, _ in results[(w, b)]) for b in builds)
        print(
            f"| {w} | {med['old']:.2f} | {med['new']:.2f} | {med['new'] / med['old']:.2f} "
            f"| {1 / med['old']:.2f} | {1 / med['new']:.2f} | {rss['old']:.1f} / {rss['new']:.1f} MiB | {every} |"
        )


if __name__ == "__main__":
    main()
