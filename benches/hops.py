#!/usr/bin/env python3
"""Counts the file-to-file hops of the README's first conversion.

    python benches/hops.py                  # this checkout
    python benches/hops.py . ../old-tree    # this checkout and another (a git worktree)
    python benches/hops.py --edges          # also print every hop, grouped by file pair

For each tree: builds its `convert` without optimisation (nothing inlined,
so every call the code makes is a call in the binary), runs
`convert fixtures/example/model.npz -o OUT.safetensors` under
`valgrind --tool=callgrind`, and reads the call graph of the crate's own
functions (those defined under the tree's `src/`). A hop is a call edge
(caller function -> callee function) whose two ends are in different
files; each edge counts once, however often it ran. Printed per tree: the
hops, the file pairs they join, the files the run passes through, the
files entered most, and how many times the output path was resolved.

Counted the same way for every tree, so two revisions compare; the count
is of what ran, which reading the code by hand approximates
(benches/README.md, "Hops").

Needs valgrind and cargo. Each tree is built into its own target folder
(`TREE/target`, or $CARGO_TARGET_DIR/hops-N when that is set).
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

LINE = re.compile(r"\((\d+)\)(?: (.*))?$")


def build(tree, n):
    env = dict(os.environ)
    if "CARGO_TARGET_DIR" in env:
        env["CARGO_TARGET_DIR"] = os.path.join(env["CARGO_TARGET_DIR"], f"hops-{n}")
    target = env.get("CARGO_TARGET_DIR", os.path.join(tree, "target"))
    # The crate's own line tables, whatever the environment says of the dev
    # profile's debug info (CARGO_PROFILE_DEV_DEBUG=0 leaves callgrind no
    # file to put a function in: 0 hops): the dependencies build as they are.
    debug = 'profile.dev.package.safetensors-stream.debug="line-tables-only"'
    cmd = ["cargo", "build", "--quiet", "--bin", "safetensors-convert", "--config", debug]
    subprocess.run(cmd, cwd=tree, env=env, check=True)
    return os.path.join(target, "debug", "safetensors-convert")


def profile(tree, binary, tmp):
    out = os.path.join(tmp, "cg.out")
    model = os.path.join(tree, "fixtures", "example", "model.npz")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, model,
           "-o", os.path.join(tmp, "out.safetensors")]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def call_graph(path):
    """(function -> its file, (caller, callee) -> calls) from a callgrind file."""
    names = {"fl": {}, "fn": {}}

    def name(kind, text):
        m = LINE.match(text)
        if not m:
            return text
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1))

    file_of, edges = {}, collections.Counter()
    fl = fn = cfl = cfn = None
    with open(path, errors="replace") as f:
        for line in f:
            key, _, text = line.rstrip("\n").partition("=")
            if key == "fl":
                fl = name("fl", text)
            elif key in ("fi", "fe"):
                name("fl", text)
            elif key == "fn":
                fn, cfl = name("fn", text), None
                file_of.setdefault(fn, fl)
            elif key in ("cfl", "cfi"):
                cfl = name("fl", text)
            elif key == "cfn":
                cfn = name("fn", text)
                if cfl is not None:
                    file_of.setdefault(cfn, cfl)
            elif key == "calls":
                edges[(fn, cfn)] += int(text.split()[0])
                cfl = None
    return file_of, edges


def short(function):
    """A function's path without its crate and generic arguments."""
    return re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", function or "")).removeprefix("safetensors_stream::")


def count(tree, cg, show_edges=False):
    src = os.path.join(os.path.realpath(tree), "src") + os.sep
    file_of, edges = call_graph(cg)
    hops, files, entered, resolved = 0, set(), collections.Counter(), 0
    pairs = collections.defaultdict(list)
    for (caller, callee), calls in edges.items():
        a, b = file_of.get(caller), file_of.get(callee)
        if callee and callee.endswith("target::resolve"):
            resolved += calls
        if not (a and b and a.startswith(src) and b.startswith(src)):
            continue
        files.update((a, b))
        if a != b:
            hops += 1
            pairs[(a[len(src):], b[len(src):])].append((short(caller), short(callee)))
            entered[b[len(src):]] += 1
    top = ", ".join(f"{f} {n}" for f, n in entered.most_common(4))
    print(f"{tree}: {hops} hops, {len(pairs)} file pairs, {len(files)} files; "
          f"output path resolved {resolved} times; entered most: {top}")
    if show_edges:
        for (a, b), calls in sorted(pairs.items(), key=lambda p: (-len(p[1]), p[0])):
            print(f"  {len(calls):3} {a} -> {b}")
            for caller, callee in sorted(calls):
                print(f"        {caller} -> {callee}")


def main():
    args = sys.argv[1:]
    show_edges = "--edges" in args
    args = [a for a in args if a != "--edges"]
    trees = args or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    for n, tree in enumerate(trees):
        binary = build(tree, n)
        with tempfile.TemporaryDirectory() as tmp:
            count(tree, profile(tree, binary, tmp), show_edges)


if __name__ == "__main__":
    main()
