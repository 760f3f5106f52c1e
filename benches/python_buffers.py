"""Two builds of the Python package, interleaved: the cost of writing numpy
buffers without Rust reading them (issue 24, python/src/bytes.rs).

    python benches/python_buffers.py --old DIR --new DIR [--rounds 5] [--tmpdir DIR] [--null]

DIR: an unpacked wheel of each build (`maturin build --release -o W` then
`python -m zipfile -e W/*.whl DIR`), put first on the child's PYTHONPATH.
Each run is a fresh process writing 1 GiB of numpy arrays made before the
clock starts; the table gives the median time of each build, the ratio of
the medians (new / old), the median CPU time (user + system) and the largest
peak-RSS growth over the rounds. Rounds alternate which build goes first.
`--null` writes to /dev/null (a descriptor, as a file object's): the kernel
then copies nothing, which leaves the package's own cost, the extra copy of
short pieces included, without the page cache's noise. Linux only
(/proc/self/status).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from python_writer import rss_kib  # this folder is on sys.path when run as a script

MIB = 1 << 20
GIB = 1 << 30

# name: (arrays, bytes each, bytes per write, fsync)
WORKLOADS = {
    "4 x 256 MiB arrays, 1 MiB views, no fsync": (4, 256 * MIB, MIB, False),
    "16384 x 64 KiB arrays, one write each, no fsync": (16384, 64 << 10, 64 << 10, False),
    "65536 x 16 KiB arrays, one write each, no fsync": (65536, 16 << 10, 16 << 10, False),
    "sts.save_file, 4 x 256 MiB arrays (fsync)": (4, 256 * MIB, 0, True),
}


def run(path: str, workload: str, expect: str) -> None:
    import numpy as np

    import safetensors_stream as sts

    assert sts.__file__.startswith(expect), (sts.__file__, expect)
    count, size, step, sync = WORKLOADS[workload]
    arrays = {f"t{i:05d}": np.full(size, i % 251, dtype=np.uint8) for i in range(count)}
    null = path == os.devnull
    target = open(path, "wb") if null else path
    base = rss_kib("VmRSS")
    cpu = os.times()
    t = time.perf_counter()
    if sync:
        sts.save_file(arrays, target)
    else:
        specs = [(k, "U8", a.shape) for k, a in arrays.items()]
        with sts.Writer(target, specs, sync=False) as w:
            for name in w.order:
                a = arrays[name]
                for i in range(0, a.size, step):
                    w.write(name, a[i : i + step])
    secs = time.perf_counter() - t
    end = os.times()
    grow = (rss_kib("VmHWM") - base) / 1024
    print(f"{secs:.4f} {end.user + end.system - cpu.user - cpu.system:.4f} {grow:.1f}")


def child(build: str, path: str, workload: str) -> tuple[float, float, float]:
    env = dict(os.environ, PYTHONPATH=build)
    out = subprocess.run(
        [sys.executable, __file__, "--child", path, workload, build],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    secs, cpu, grow = out.stdout.split()
    return float(secs), float(cpu), float(grow)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old")
    p.add_argument("--new")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tmpdir", default=None)
    p.add_argument("--null", action="store_true")
    p.add_argument("--child", nargs=3)
    a = p.parse_args()
    if a.child:
        run(*a.child)
        return
    builds = {"old": os.path.abspath(a.old), "new": os.path.abspath(a.new)}
    workloads = [w for w in WORKLOADS if not (a.null and WORKLOADS[w][3])]
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {
        (w, b): [] for w in workloads for b in builds
    }
    with tempfile.TemporaryDirectory(dir=a.tmpdir) as d:
        path = os.devnull if a.null else os.path.join(d, "out.safetensors")
        for r in range(a.rounds):
            for w in workloads:
                order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
                for b in order:
                    if not a.null:
                        os.sync()  # no run pays for another's writeback
                    results[(w, b)].append(child(builds[b], path, w))
                    if not a.null:
                        os.unlink(path)
    where = "/dev/null" if a.null else "a file"
    print(f"1 GiB per run to {where}, median of {a.rounds} interleaved rounds")
    print(
        "| workload | old s | new s | new / old | CPU s old / new | CPU new / old "
        "| peak RSS growth old / new | every round old; new (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")

    def median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    for w in workloads:
        secs = {b: median([x[0] for x in results[(w, b)]]) for b in builds}
        cpu = {b: median([x[1] for x in results[(w, b)]]) for b in builds}
        rss = {b: max(x[2] for x in results[(w, b)]) for b in builds}
        every = "; ".join(", ".join(f"{x[0]:.2f}" for x in results[(w, b)]) for b in builds)
        print(
            f"| {w} | {secs['old']:.2f} | {secs['new']:.2f} | {secs['new'] / secs['old']:.2f} "
            f"| {cpu['old']:.2f} / {cpu['new']:.2f} | {cpu['new'] / cpu['old']:.2f} "
            f"| {rss['old']:.1f} / {rss['new']:.1f} MiB | {every} |"
        )


if __name__ == "__main__":
    main()
