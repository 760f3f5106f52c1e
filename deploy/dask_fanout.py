#!/usr/bin/env python3
"""Fan a conversion out over a Dask cluster: one task per shard, then the index.

Every worker runs the same `convert` command with `--shard K`; each plans
the whole conversion from the inputs' headers, so they agree on the layout
without talking, and each writes exactly shard K. The index is written last
(`--index-only`), after every shard task succeeded: it is the commit point.
A failed task can simply be retried: the same shard gets the same bytes.

    python deploy/dask_fanout.py --scheduler tcp://host:8786 -- \\
        s3://in/model.safetensors.index.json --cast-all BF16 \\
        --max-shard-size 5GB -o s3://out/model.safetensors

Without --scheduler a local cluster is started (`--workers N`). The workers
need `convert` on their PATH (or --convert) and the store's credentials in
their environment (AWS_*, GOOGLE_*, AZURE_*): never on the command line.
"""

import argparse
import json
import subprocess
import sys
import time


def plan_shards(convert, args):
    """N, from the plan: `--dry-run --json` lists one entry per shard in "outputs"."""
    out = subprocess.run(
        [convert, *args, "--dry-run", "--json"], check=True, capture_output=True, text=True
    ).stdout
    return len(json.loads(out)["outputs"])


def run(convert, args, *extra):
    """One `convert` run; raises with its one-line error if it fails."""
    done = subprocess.run([convert, *args, *extra, "--quiet"], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"convert {' '.join(extra)}: exit {done.returncode}: {done.stderr.strip()}")
    return " ".join(extra)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scheduler", help="a Dask scheduler address; default: a local cluster")
    p.add_argument("--workers", type=int, default=4, help="local cluster size")
    p.add_argument("--convert", default="convert", help="the convert binary")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then convert's arguments")
    opts = p.parse_args()
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args

    from dask.distributed import Client, LocalCluster

    cluster = None if opts.scheduler else LocalCluster(
        n_workers=opts.workers, threads_per_worker=1, processes=True
    )
    client = Client(opts.scheduler or cluster)
    started = time.monotonic()
    n = plan_shards(opts.convert, args)
    shards = [
        client.submit(run, opts.convert, args, "--shard", str(k), retries=2, pure=False)
        for k in range(1, n + 1)
    ]
    for done in client.gather(shards):
        print(f"done: {done}", file=sys.stderr)
    if n > 1:
        run(opts.convert, args, "--index-only")
    print(f"{n} shard(s){' and the index' if n > 1 else ''} in {time.monotonic() - started:.2f} s",
          file=sys.stderr)
    client.close()
    if cluster is not None:
        cluster.close()


if __name__ == "__main__":
    main()
