#!/usr/bin/env python3
"""Fan a conversion out over a Dask cluster: one task per shard, then the index.

Every worker runs the same `convert` command with `--shard K`; each plans
the whole conversion from the inputs' headers, so they agree on the layout
without talking, and each writes exactly shard K. The index is written last
(`--index-only`), after every shard task succeeded: it is the commit point.

    python deploy/dask_fanout.py --convert /opt/sts/bin/safetensors-convert \\
        --scheduler tcp://host:8786 -- \\
        s3://in/model.safetensors.index.json --cast-all BF16 \\
        --max-shard-size 5GB -o s3://out/model.safetensors

Without --scheduler a local cluster is started (`--workers N`).

Retries: a shard that failed on I/O (exit 3: a store that timed out, a
dropped connection) is retried, and its retry writes the same bytes. A
refused input or a usage error (exit 1 or 2) is final: retrying cannot
change the answer, so the driver stops at once with convert's own message. Every run is given the
plan id the driver planned (`--expect-plan`): an input replaced while the
fan-out runs makes the shards that see it, and the index, refuse, so a set
built from two versions of the inputs is never committed.

The binary: `--convert PATH` (default: `convert` on PATH) is checked to be
safetensors-stream's, not ImageMagick's `convert`, before anything runs.
Each `convert` dies with the worker that ran it (it gets SIGTERM, which
aborts its uploads, when its worker process exits).

Credentials: the driver itself only runs `convert --dry-run` (which reads
the inputs' headers) and, at the end, `convert --index-only` (which checks
every shard and writes the index): it needs read access to the inputs and
write access to the output prefix, like the workers. All of them take
credentials from the environment (AWS_*, GOOGLE_*, AZURE_*), never from the
command line.
"""

import argparse
import ctypes
import json
import re
import signal
import subprocess
import sys
import time

# convert's exit codes that retrying cannot change: 1 refused input, 2 usage.
FINAL = (1, 2)


class ConvertFailed(Exception):
    """A convert run that failed; `code` is its exit code."""

    def __init__(self, what, code, message):
        super().__init__(f"convert {what}: exit {code}: {message}")
        self.code = code


def _die_with_parent():
    """In the child, before exec: SIGTERM when the worker that started us exits (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the worker's own shutdown has to stop it


def convert_run(convert, args, *extra):
    """One `convert` run: its stdout, or ConvertFailed with its one-line message."""
    done = subprocess.run(
        [convert, *args, *extra],
        capture_output=True,
        text=True,
        preexec_fn=_die_with_parent,
    )
    if done.returncode != 0:
        message = done.stderr.strip().splitlines()[-1:] or ["(no message)"]
        raise ConvertFailed(" ".join(extra) or "", done.returncode, message[0])
    return done.stdout


def shard_task(convert, args, k):
    """A shard on a worker. Final failures are returned, not raised, so Dask does not retry them."""
    try:
        convert_run(convert, args, "--shard", str(k), "--quiet")
        return (k, 0, "")
    except ConvertFailed as e:
        if e.code in FINAL:
            return (k, e.code, str(e))
        raise  # exit 3 and above: worth a retry


def check_binary(convert):
    """Refuses to run anything but safetensors-stream's `safetensors-convert`."""
    try:
        version = subprocess.run([convert, "--version"], capture_output=True, text=True).stdout
    except OSError as e:
        sys.exit(f"dask_fanout: cannot run {convert!r}: {e}")
    if not re.match(r"safetensors-convert \d+\.\d+", version):
        sys.exit(
            f"dask_fanout: {convert!r} is not safetensors-stream's safetensors-convert "
            f"(it says {version.strip()[:60]!r}); pass --convert PATH"
        )


def plan(convert, args):
    """N and the plan id, from `--dry-run --json`: one entry per shard in "outputs"."""
    shown = json.loads(convert_run(convert, args, "--dry-run", "--json"))
    return len(shown["outputs"]), shown["plan_id"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scheduler", help="a Dask scheduler address; default: a local cluster")
    p.add_argument("--workers", type=int, default=4, help="local cluster size")
    p.add_argument("--convert", default="safetensors-convert", help="the safetensors-convert binary (checked to be ours)")
    p.add_argument("--retries", type=int, default=2, help="retries of a shard that failed on I/O")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then convert's arguments")
    opts = p.parse_args()
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args

    check_binary(opts.convert)
    started = time.monotonic()
    try:
        n, plan_id = plan(opts.convert, args)
    except ConvertFailed as e:
        sys.exit(f"dask_fanout: planning failed: {e}")
    # Every run checks it plans the same version of the inputs: a shard
    # (or its retry) that sees a replaced input refuses (exit 1, final), and
    # so does the index, so no set mixing two versions is ever committed.
    args = [*args, "--expect-plan", plan_id]

    from dask.distributed import Client, LocalCluster

    cluster = None if opts.scheduler else LocalCluster(
        n_workers=opts.workers, threads_per_worker=1, processes=True
    )
    client = Client(opts.scheduler or cluster)
    try:
        shards = [
            client.submit(shard_task, opts.convert, args, k, retries=opts.retries, pure=False)
            for k in range(1, n + 1)
        ]
        try:
            results = client.gather(shards)
        except ConvertFailed as e:
            sys.exit(f"dask_fanout: a shard failed after {opts.retries} retries: {e}")
        failed = [r for r in results if r[1] != 0]
        if failed:
            k, code, message = failed[0]
            sys.exit(f"dask_fanout: shard {k} refused (exit {code}, not retried): {message}")
        for k, _, _ in results:
            print(f"done: shard {k}", file=sys.stderr)
        # The commit point, for any N: with one shard, --index-only checks the file.
        try:
            convert_run(opts.convert, args, "--index-only", "--quiet")
        except ConvertFailed as e:
            sys.exit(f"dask_fanout: the index was not written: {e}")
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    print(f"{n} shard(s) and the index in {time.monotonic() - started:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
