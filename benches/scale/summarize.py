#!/usr/bin/env python3
"""The tables of benches/scale/README.md from run.sh's measurements (stdlib only).

    summarize.py RAW META README

RAW: one line per timed run, `round label seconds peak_rss_kib [cpu_s server_cpu_s]` (run.sh
writes it: the wall time, the largest peak RSS of its processes, their CPU seconds, and the
S3 server's CPU seconds during the run).
META: `key value...` lines (preset, bytes, load before and after, commit, ...).
The tables replace what stands between `<!-- scale:PRESET begin -->` and
`<!-- scale:PRESET end -->` in README (appended at the end when the markers are not
there yet), and are printed.
"""

import statistics
import sys
from collections import defaultdict

MIB = 1 << 20


def load(raw_path, meta_path):
    runs = defaultdict(list)
    with open(raw_path) as f:
        for line in f:
            _, label, secs, rss, *cpu = line.split()
            runs[label].append((float(secs), int(rss), *map(float, cpu)))
    meta = {}
    with open(meta_path) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition(" ")
            meta[key] = value
    return runs, meta


class Table:
    def __init__(self, runs, out_bytes):
        self.runs, self.out_bytes = runs, out_bytes

    def has(self, label):
        return label in self.runs

    def secs(self, label):
        return statistics.median(r[0] for r in self.runs[label])

    def rss(self, label):
        """The largest peak of any one process over the rounds, MiB."""
        return max(r[1] for r in self.runs[label]) / 1024

    def row(self, name, label, ratio="", note="", wrote=True):
        """One table row; `wrote=False` for a run that must write nothing (no throughput)."""
        if not self.has(label):
            return None
        s = self.secs(label)
        spread = [r[0] for r in self.runs[label]]
        rng = f"{min(spread):.2f}-{max(spread):.2f}" if len(spread) > 1 else ""
        mibs = f"{self.out_bytes / MIB / s:.1f} MiB/s" if s > 0 and wrote else ""
        return (f"| {name} | {s:.2f} s | {rng} | {mibs} | {self.rss(label):.0f} MiB "
                f"| {self.cpu(label, 2)} | {self.cpu(label, 3)} | {ratio} | {note} |")

    def cpu(self, label, column):
        """The median of a CPU column (the client's, the server's), or blank."""
        values = [r[column] for r in self.runs[label] if len(r) > column]
        return f"{statistics.median(values):.1f} s" if values else ""

    def ratio(self, num, den, what="time"):
        """num's median time over den's; as throughput: den's over num's."""
        if not (self.has(num) and self.has(den)):
            return ""
        if min(self.secs(num), self.secs(den)) <= 0:
            return ""
        r = self.secs(num) / self.secs(den)
        return f"{r:.2f} x" if what == "time" else f"{1 / r:.2f} x"


def tables(runs, meta):
    out_bytes = int(meta["output_bytes"])
    t = Table(runs, out_bytes)
    rounds = max(len(v) for v in runs.values())
    lines = [
        f"{meta['preset']} preset, {meta['date']}, commit {meta['commit']}, {rounds} interleaved "
        f"round(s), medians (range over rounds); MiB/s are of the output's {out_bytes:,} bytes "
        f"({meta['output_files']} files; input {int(meta['input_bytes']):,} bytes in "
        f"{meta['input_files']} files). Peak RSS: the largest of any one process; CPU: user + sys "
        f"of the run's processes; server CPU: s3s-fs's meanwhile. Load average "
        f"at start {meta['load_start']}, at end {meta['load_end']}.",
        "",
        "| run | time (median) | range | throughput | peak RSS | CPU | server CPU | ratio | |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    rows = [
        t.row("`cp -r` of the output", "cp", note="the target for `local`"),
        t.row("local, `--no-sync`", "local", t.ratio("local", "cp"),
              "time over `cp`'s (target <= 1.25, i.e. >= 0.8 x its throughput)"),
        t.row("`cp -r` + `sync` of the files", "cp-sync"),
        t.row("local, durable (fsync)", "local-sync", t.ratio("local-sync", "cp-sync"),
              "time over `cp` + `sync`'s"),
        t.row("boto3 (TransferConfig defaults): download input + upload output", "boto3"),
        t.row("`aws s3 cp --recursive`: download + upload", "awscli"),
        t.row("S3 -> S3", "s3", ", ".join(
                  f"{t.ratio('s3', k, 'tput')} {name}" for k, name in
                  (("boto3", "boto3"), ("awscli", "aws")) if t.has(k)),
              "throughput over the baseline's (target >= 1.0)"),
        t.row("S3 -> local (`--no-sync`)", "s3-in", note="the read half"),
        t.row("local -> S3", "s3-out", note="the write half"),
        t.row("fan-out S3 -> S3, 1 worker", "fanout-1"),
        t.row("fan-out S3 -> S3, 2 workers", "fanout-2", t.ratio("fanout-2", "fanout-1"),
              "wall time over 1 worker's (target <= 0.6)"),
        t.row("fan-out local -> local, 1 worker", "local-fanout-1"),
        t.row("fan-out local -> local, 2 workers", "local-fanout-2",
              t.ratio("local-fanout-2", "local-fanout-1"),
              "wall time over 1 worker's (no server: target <= 0.6)"),
        t.row("fan-out S3 -> S3, 1 process (`--shard-stride`)", "stride-1"),
        t.row("fan-out S3 -> S3, 2 processes (`--shard-stride 2`)", "stride-2",
              t.ratio("stride-2", "stride-1"), "wall time over 1 process's (target <= 0.6)"),
        t.row("fan-out local, 1 process (`--shard-stride`)", "local-stride-1"),
        t.row("fan-out local, 2 processes (`--shard-stride 2`)", "local-stride-2",
              t.ratio("local-stride-2", "local-stride-1"), "wall time over 1 process's"),
        t.row("Dask driver, LocalCluster of 2, S3 -> S3", "dask", t.ratio("dask", "fanout-1"),
              "wall time over the 1-worker fan-out's"),
        t.row("Dask, one `convert --shard` SIGKILLed mid-shard", "dask-kill",
              note="retried; output byte-equal"),
        t.row("Dask, an input object replaced mid-run", "dask-replaced",
              note="refused: driver failed, no index committed", wrote=False),
    ]
    lines += [r for r in rows if r]
    parts = [("boto3-down", "boto3 download"), ("boto3-up", "boto3 upload"),
             ("aws-down", "aws download"), ("aws-up", "aws upload")]
    split = [f"{name} {t.secs(k):.2f} s" for k, name in parts if t.has(k)]
    if split:
        lines += ["", "Baselines split: " + ", ".join(split) + "."]
    plans = [("plan-local", "local"), ("plan-s3", "S3 (one header read per object)")]
    if any(t.has(k) for k, _ in plans):
        lines += ["", "| plan (`--dry-run`) | time (median) | peak RSS | target |",
                  "| --- | ---: | ---: | --- |"]
        for k, name in plans:
            if t.has(k):
                lines.append(f"| {name} | {t.secs(k):.2f} s | {t.rss(k):.0f} MiB | <= 2 s, <= 256 MiB |")
    extra = [meta[k] for k in ("upload", "server_rss", "probe") if k in meta]
    if extra:
        lines += [""] + extra
    return "\n".join(lines) + "\n"


def main():
    raw, meta_path, readme = sys.argv[1:4]
    runs, meta = load(raw, meta_path)
    text = tables(runs, meta)
    print(text)
    begin = f"<!-- scale:{meta['preset']} begin -->"
    end = f"<!-- scale:{meta['preset']} end -->"
    with open(readme) as f:
        doc = f.read()
    block = f"{begin}\n{text}{end}"
    if begin in doc and end in doc:
        head, _, rest = doc.partition(begin)
        _, _, tail = rest.partition(end)
        doc = head + block + tail
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    with open(readme, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
