"""The Python package's Writer: memory while streaming, and throughput
against safetensors.numpy.save_file of the same arrays (issue 13).

    python benches/python_writer.py [--gib 1] [--tensors 3] [--tmpdir DIR]

Needs the package installed (`pip install ./python`, a release build) and
`pip install -r python/requirements-test.txt`. Each run is in a fresh
process so that one's peak RSS does not hide another's; the table gives
the median time and the largest RSS growth over the rounds. Linux only (reads
/proc/self/status).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def run_stream(path: str, gib: float, tensors: int, sync: bool) -> None:
    """Streams `tensors` x `gib` GiB of F32 in 1 MiB chunks; prints seconds
    and peak RSS growth (the chunk itself is made before the baseline)."""
    import numpy as np

    import safetensors_stream as sts

    n = int(gib * (1 << 30)) // 4
    chunk = np.random.default_rng(0).random(MIB // 4, dtype=np.float32)
    base = rss_kib("VmRSS")
    t = time.perf_counter()
    specs = [(f"t{i}", "F32", (n,)) for i in range(tensors)]
    with sts.Writer(path, specs, sync=sync) as w:
        for name in w.order:
            left = n
            while left:
                k = min(left, chunk.size)
                w.write(name, chunk[:k])
                left -= k
    secs = time.perf_counter() - t
    grow = (rss_kib("VmHWM") - base) / 1024
    print(f"{secs:.3f} {grow:.1f}")


def run_save(path: str, gib: float, tensors: int, which: str) -> None:
    """save_file of `tensors` arrays of `gib` GiB each, made before timing."""
    import numpy as np

    n = int(gib * (1 << 30)) // 4
    arrays = {f"t{i}": np.full(n, i, dtype=np.float32) for i in range(tensors)}
    base = rss_kib("VmRSS")
    t = time.perf_counter()
    if which == "writer":
        import safetensors_stream as sts

        step = MIB // 4
        specs = [(k, "F32", a.shape) for k, a in arrays.items()]
        with sts.Writer(path, specs, sync=False) as w:
            for name in w.order:
                a = arrays[name]
                for i in range(0, a.size, step):
                    w.write(name, a[i : i + step])
    elif which == "ref":
        import safetensors.numpy as ref

        ref.save_file(arrays, path)
    else:
        import safetensors_stream as sts

        sts.save_file(arrays, path)
    secs = time.perf_counter() - t
    grow = (rss_kib("VmHWM") - base) / 1024
    print(f"{secs:.3f} {grow:.1f}")


def child(*args: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    secs, grow = out.stdout.split()
    return float(secs), float(grow)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--tensors", type=int, default=3)
    p.add_argument("--tmpdir", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--child", nargs="+")
    a = p.parse_args()
    if a.child:
        kind, path, gib, tensors, extra = a.child
        if kind == "stream":
            run_stream(path, float(gib), int(tensors), extra == "sync")
        else:
            run_save(path, float(gib), int(tensors), extra)
        return
    total = a.gib * a.tensors
    with tempfile.TemporaryDirectory(dir=a.tmpdir) as d:
        path = os.path.join(d, "out.safetensors")
        rows = [
            ("sts.Writer, 1 MiB chunks, no fsync", ("stream", path, str(a.gib), str(a.tensors), "nosync")),
            ("sts.Writer, 1 MiB chunks, fsync", ("stream", path, str(a.gib), str(a.tensors), "sync")),
            ("sts.Writer of the same arrays, 1 MiB views, no fsync", ("save", path, str(a.gib), str(a.tensors), "writer")),
            ("sts.save_file (fsync)", ("save", path, str(a.gib), str(a.tensors), "sts")),
            ("safetensors.numpy.save_file 0.8.0", ("save", path, str(a.gib), str(a.tensors), "ref")),
        ]
        print(f"{a.tensors} x {a.gib} GiB F32 ({total:.2f} GiB), median of {a.rounds} interleaved rounds")
        results: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in rows}
        for _ in range(a.rounds):
            for label, args in rows:
                # The previous run's dirty pages are flushed untimed, so no
                # run pays for another's writeback.
                os.sync()
                results[label].append(child(*args))
                os.unlink(path)
        print("| run | seconds (median) | GiB/s | peak RSS growth | every round (s) |")
        print("| --- | --- | --- | --- | --- |")
        for label, runs in results.items():
            secs = sorted(r[0] for r in runs)[len(runs) // 2]
            grow = max(r[1] for r in runs)
            every = ", ".join(f"{r[0]:.2f}" for r in runs)
            print(f"| {label} | {secs:.2f} | {total / secs:.2f} | {grow:.1f} MiB | {every} |")

if __name__ == "__main__":
    main()
