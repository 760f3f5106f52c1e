#!/usr/bin/env python3
"""Where the wall time of one S3 -> S3 run goes: the copy, then the wait for completions.

    phases.py --server-pid PID --watch DIR [--every 0.1] -- CMD...

Runs CMD and samples, every EVERY seconds, its CPU seconds (user + sys, /proc of it and of
every process under it),
the server's (PID: s3s-fs), and which files have appeared under DIR (s3s-fs writes an object
there only when its CompleteMultipartUpload or PUT is done). Prints one line of figures:
- wall: CMD's wall time;
- copy: when CMD had spent 99% of its CPU seconds (the conversion is over: what follows is
  waiting on the server);
- tail: wall - copy, the wait for completions after the copy;
- first / last: when the first and the last object appeared;
- client / server CPU seconds, in all and within the tail.
Then, on standard error, the objects, each with when it appeared. Linux only.
"""

import argparse
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def stat(pid):
    """(ppid, CPU seconds of it and of its children it has waited for), or None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # After the ")": ppid is the 2nd field; utime, stime, cutime, cstime the 12th to 15th.
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / TICK


def cpu_seconds(pid):
    """CPU seconds of pid, or None once gone."""
    got = stat(pid)
    return got and got[1]


def tree_cpu(root):
    """CPU seconds of root and every process under it (a child reaped counts in its parent's)."""
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            got = stat(int(name))
            if got:
                stats[int(name)] = got
    total = 0.0
    for pid, (ppid, cpu) in stats.items():
        p = pid
        while p in stats and p != root:
            p = stats[p][0]
        if p == root:
            total += cpu
    return total


def objects(root):
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        found.update(os.path.join(dirpath, f) for f in filenames if not f.startswith("."))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server-pid", type=int, required=True)
    ap.add_argument("--watch", required=True)
    ap.add_argument("--every", type=float, default=0.1)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    before = objects(a.watch)
    s0 = cpu_seconds(a.server_pid)
    t0 = time.monotonic()
    child = subprocess.Popen(cmd)
    samples = []  # (t, client cpu, server cpu)
    appeared = {}
    client = 0.0
    while child.poll() is None:
        now = time.monotonic() - t0
        client = max(client, tree_cpu(child.pid))
        samples.append((now, client, cpu_seconds(a.server_pid) - s0))
        for path in objects(a.watch) - before - appeared.keys():
            appeared[path] = now
        time.sleep(a.every)
    wall = time.monotonic() - t0
    server = cpu_seconds(a.server_pid) - s0
    for path in objects(a.watch) - before - appeared.keys():
        appeared[path] = wall
    total = samples[-1][1] if samples else 0.0
    copy = next((t for t, c, _ in samples if c >= 0.99 * total), wall)
    server_at_copy = next((s for t, _, s in samples if t >= copy), server)
    times = sorted(appeared.values()) or [float("nan")]
    print(
        f"wall {wall:.2f} s, copy {copy:.2f} s, tail {wall - copy:.2f} s, "
        f"first {times[0]:.2f} s, last {times[-1]:.2f} s, "
        f"client {total:.1f} CPU-s, server {server:.1f} CPU-s "
        f"({server - server_at_copy:.1f} in the tail), exit {child.returncode}"
    )
    for path, t in sorted(appeared.items(), key=lambda kv: kv[1]):
        print(f"  {t:7.2f} s  {os.path.relpath(path, a.watch)}", file=sys.stderr)


if __name__ == "__main__":
    main()
