#!/usr/bin/env python3
"""The output's write lane of one conversion (issue 40): when a computed route is as slow as the
output's `pwrite`s allow, and where it leaves them idle.

    python3 benches/write_lane.py [--runs 3] [--rt] [--writes-only] --output OUT -- CONVERT_BINARY ARGS... -o OUT

Runs the command under `perf record` with the `pwrite64` and `pread64` system-call tracepoints
(root, or `kernel.perf_event_paranoid` -1) and prints, a run a line: the wall time; the lane's
span (first `pwrite` in to last out); the sum of the `pwrite`s' times and their median; the
time no thread was inside a `pwrite` (idle), and of it the gaps over 1 ms; and the idle time
during which every thread that reads was inside its `pread`s (a GPTQ part reader reads its
4 MiB strip of words, 1024 `pread`s, between chunks). Two threads writing one ext4 file take its
inode lock in turn, and one that finds it held spins (`rwsem_spin_on_owner`): overlapping
`pwrite`s are counted once, so the lane is busy while either writes.

`--rt` runs the command as `chrt -f 1` (SCHED_FIFO, root only): its threads then take both cores
from everything else for the run's fraction of a second, the way a quiet machine would give
them. Timings under it are comparable with each other, not with an unprioritised run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EVENTS = ["syscalls:sys_enter_pwrite64", "syscalls:sys_exit_pwrite64",
          "syscalls:sys_enter_pread64", "syscalls:sys_exit_pread64"]


def intervals(data: Path):
    """The (start, end, thread) of every pwrite and every pread in a perf.data."""
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,time,event"],
                          check=True, capture_output=True, text=True).stdout
    writes, reads, open_ = [], [], {}
    for line in text.splitlines():
        tid, at, event = line.split()[:3]
        key = (int(tid), "pwrite" in event)
        t = float(at.rstrip(":"))
        if "enter" in event:
            open_[key] = t
        elif key in open_:
            (writes if key[1] else reads).append((open_.pop(key), t, key[0]))
    return sorted(writes), sorted(reads)


def lane(writes, reads):
    """Span, busy time, idle time, idle in gaps over 1 ms, idle with every reader reading."""
    # The threads that read and write (the main thread reads the header too).
    readers = {tid for _, _, tid in reads} & {tid for _, _, tid in writes}
    start, end, busy, last = writes[0][0], writes[0][0], 0.0, writes[0][0]
    gaps = []
    for s, e, _ in writes:
        if s > end:
            busy += end - last
            gaps.append((end, s))
            last = s
        end = max(end, e)
    busy += end - last
    all_reading = 0.0
    for g0, g1 in gaps:
        # Inside the gap, the time each reader spent in preads; the least of them bounds
        # from above the time all were reading at once (exact when each read in one run).
        each = [sum(min(e, g1) - max(s, g0) for s, e, t in reads if t == tid and e > g0 and s < g1)
                for tid in readers]
        all_reading += min(each, default=0.0)
    idle = sum(g1 - g0 for g0, g1 in gaps)
    long_ = sum(g1 - g0 for g0, g1 in gaps if g1 - g0 > 1e-3)
    return end - start, busy, idle, long_, all_reading


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rt", action="store_true", help="run as chrt -f 1 (root only)")
    ap.add_argument("--writes-only", action="store_true",
                    help="trace the pwrites alone: each traced pread costs ~1 us, which lengthens a strip's read")
    ap.add_argument("--output", type=Path, required=True, help="the command's output, deleted after each run")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- CONVERT_BINARY ARGS...")
    a = ap.parse_args()
    cmd = [c for c in a.command if c != "--"] if a.command[:1] == ["--"] else a.command
    if not cmd:
        sys.exit("give the command after --")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "lane.data"
        for _ in range(a.runs):
            subprocess.run(["sync"], check=True)
            # A large ring: a GiB of GPTQ is ~150k events, and a lost one loses its interval.
            perf = ["perf", "record", "-q", "-m", "8M", *sum((["-e", e] for e in EVENTS[: 2 if a.writes_only else 4]), []), "-o", str(data), "--"]
            t0 = time.perf_counter()
            subprocess.run((["chrt", "-f", "1"] if a.rt else []) + perf + cmd, check=True)
            wall = time.perf_counter() - t0
            a.output.unlink(missing_ok=True)
            writes, reads = intervals(data)
            if not writes:
                sys.exit("no pwrite64 traced: is the output written by pwrite?")
            span, busy, idle, long_, all_reading = lane(writes, reads)
            took = [e - s for s, e, _ in writes]
            print(f"wall {wall:.3f} s (perf's included) | lane {span * 1e3:.0f} ms: {len(writes)} pwrites, "
                  f"sum {sum(took) * 1e3:.0f} ms, median {statistics.median(took) * 1e6:.0f} us | "
                  f"idle {idle * 1e3:.1f} ms, {long_ * 1e3:.1f} in gaps > 1 ms, "
                  f"{'-' if a.writes_only else f'{all_reading * 1e3:.1f}'} with every reader in pread | "
                  f"busy {busy * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
