#!/usr/bin/env python3
"""Header memory and time against the tensor count and the header's size
(issues 15, 17 item 7, 41): peak RSS of the process against the README's
bound (3 x the header's bytes + 64 MiB; 4.5 x for a raw manifest).

Generates, with the standard library only:
  - a safetensors file of n one-element F32 tensors whose header keys are
    shuffled and whose data lies in another shuffled order than the canonical
    one (so a conversion must parse, sort, and read n scattered tensors);
  - an npz of n tiny members (one F32 each, stored);
  - a torch.save zip of n one-float tensors "layer.{i}.w", each on its own
    storage (or --pt-shared: all on one), whose data.pkl is byte for byte
    what torch writes (Python's pickler with torch's persistent ids, the
    torch globals stood in for by stub modules);
then runs `convert IN -o OUT --no-sync -q` (with --dry-run: `convert IN
--dry-run -q`, which plans and lists without writing) under /usr/bin/time -v and prints
peak RSS, wall, user and system time for each n, with the header's bytes
and RSS / header bytes.

    cargo build --release
    python3 benches/header_scale.py --binary target/release/safetensors-convert \
        --sizes 1000 10000 100000 1000000 --npz 1000 10000 100000 1000000 \
        --pt 1000 10000 100000 1000000 --manifest 1000 10000 100000 1000000 \
        --meta-mb 1 10 50 90 100

One process at a time; each input is deleted once measured. While the
file /work/QUIET exists (a quiet window) no run starts.

Inputs are written under --dir (default: a temp folder) and removed after.
"""

import argparse
import io
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile


def gen_safetensors(path, n, seed=17):
    """n tensors "layer.{i}.w" of one F32 each; keys and data both shuffled."""
    rng = random.Random(seed + n)
    data_order = list(range(n))
    rng.shuffle(data_order)  # data_order[k] = tensor whose bytes are k-th
    slot = [0] * n
    for k, i in enumerate(data_order):
        slot[i] = k
    keys = list(range(n))
    rng.shuffle(keys)
    parts = ["{"]
    for j, i in enumerate(keys):
        b = 4 * slot[i]
        parts.append(("," if j else "") + f'"layer.{i}.w":{{"dtype":"F32","shape":[1],"data_offsets":[{b},{b + 4}]}}')
    parts.append("}")
    header = "".join(parts).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(b"".join(struct.pack("<f", float(i)) for i in data_order))
    return len(header)


def gen_metadata(path, mb):
    """A header of `mb` MB that is one `__metadata__` string and a tensor."""
    n = mb * 1000 * 1000
    pre, post = '{"__metadata__":{"m":"', '"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    header = (pre + "a" * (n - len(pre) - len(post)) + post).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(b"\0" * 4)
    return len(header)


def gen_manifest(manifest, dump, n):
    """A raw manifest of n one-float tensors and its dump; the manifest's bytes."""
    text = "[" + ",".join(
        f'{{"name":"layer.{i}.w","dtype":"F32","shape":[1],"offset":{4 * i}}}' for i in range(n)
    ) + "]"
    with open(manifest, "w") as f:
        f.write(text)
    with open(dump, "wb") as f:
        f.write(b"\0" * (4 * n))
    return len(text)


def bound_mib(read, factor=3):
    """The README's bound on what reading `read` bytes of header holds."""
    return (factor * read + (64 << 20)) / 2**20


def npy_bytes(value):
    """An .npy v1.0 of one little-endian F32, as numpy.save writes it."""
    d = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }"
    pad = 64 - (10 + len(d) + 1) % 64
    head = (d + " " * pad + "\n").encode()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + struct.pack("<f", value)


def gen_npz(path, n):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for i in range(n):
            z.writestr(f"arr_{i}.npy", npy_bytes(float(i)))


def gen_pt(path, n, shared=False):
    """A torch.save zip of n one-float tensors; returns data.pkl's length."""
    import collections
    import pickle
    import types
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    saved = {k: sys.modules.get(k) for k in ("torch", "torch._utils")}
    sys.modules.update({"torch": torch, "torch._utils": utils})
    try:
        storage_class = type("FloatStorage", (), {"__module__": "torch"})
        torch.FloatStorage = storage_class

        def _rebuild_tensor_v2(*args):
            raise AssertionError("never called")

        _rebuild_tensor_v2.__module__ = "torch._utils"
        _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
        utils._rebuild_tensor_v2 = _rebuild_tensor_v2

        class Storage:
            def __init__(self, key, numel):
                self.key, self.numel = key, numel

        class Tensor:
            def __init__(self, storage, offset):
                self.storage, self.offset = storage, offset

            def __reduce_ex__(self, proto):
                args = (self.storage, self.offset, tuple([1]), tuple([1]), False, collections.OrderedDict())
                return (_rebuild_tensor_v2, args)

        class Pickler(pickle.Pickler):
            def persistent_id(self, obj):
                if isinstance(obj, Storage):
                    return ("storage", storage_class, obj.key, "cpu", obj.numel)
                return None

        sd = collections.OrderedDict()
        one = Storage("0", n)
        for i in range(n):
            sd[f"layer.{i}.w"] = Tensor(one, i) if shared else Tensor(Storage(str(i), 1), 0)
        buf = io.BytesIO()
        Pickler(buf, protocol=2).dump(sd)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    pkl = buf.getvalue()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", b"little")
        if shared:
            z.writestr("archive/data/0", b"".join(struct.pack("<f", float(i)) for i in range(n)))
        else:
            for i in range(n):
                z.writestr(f"archive/data/{i}", struct.pack("<f", float(i)))
        z.writestr("archive/version", b"3\n")
    return len(pkl)


def wait_quiet():
    """Starts nothing while the lead's quiet window (/work/QUIET, or
    $QUIET_FILE) is open: peak RSS does not depend on the load, but the
    lead's timings do on ours."""
    import time
    flag = os.environ.get("QUIET_FILE", "/work/QUIET")
    while os.path.exists(flag):
        time.sleep(20)


def measure(cmd):
    """(peak RSS MiB, wall s, user s, system s) of one run."""
    wait_quiet()
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    def field(name):
        return re.search(re.escape(name) + r":\s*(\S+)", r.stderr).group(1)
    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    secs = 0.0
    for part in wall.split(":"):
        secs = secs * 60 + float(part)
    rss = int(field("Maximum resident set size (kbytes)")) / 1024
    return rss, secs, float(field("User time (seconds)")), float(field("System time (seconds)"))


def command(args, src, out, extra=()):
    """The run measured: a conversion to `out`, or with --dry-run its plan."""
    if args.dry_run:
        return [args.binary, src, *extra, "--dry-run", "-q"]
    return [args.binary, src, *extra, "-o", out, "--no-sync", "-q"]


def row(kind, n, hdr, rss, wall, user, sys_, factor=3):
    """One line of the table: the run, and its peak RSS against the README's bound."""
    bound = bound_mib(hdr, factor)
    ok = "yes" if rss <= bound else "NO"
    print(f"{kind:<24} {n:>9} {hdr:>11} {rss:>8.1f} {bound:>8.1f} {ok:>6} {wall:>7.2f} {user:>7.2f} {sys_:>6.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/debug/safetensors-convert")
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--npz", type=int, nargs="*", default=[20_000, 200_000])
    ap.add_argument("--pt", type=int, nargs="*", default=[])
    ap.add_argument("--meta-mb", type=int, nargs="*", default=[],
                    help="headers of one __metadata__ string of this many MB (1 .. 100)")
    ap.add_argument("--manifest", type=int, nargs="*", default=[], help="raw manifests of n tensors")
    ap.add_argument("--pt-shared", action="store_true", help="--pt tensors all on one storage")
    ap.add_argument("--dry-run", action="store_true", help="measure `convert --dry-run` instead")
    ap.add_argument("--dir")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="header-scale-")
    os.makedirs(work, exist_ok=True)
    print(f"{'input':<24} {'n':>9} {'header B':>11} {'RSS MiB':>8} {'bound':>8} {'within':>6} {'wall s':>7} {'user s':>7} {'sys s':>6}")
    try:
        for n in args.sizes:
            src = os.path.join(work, f"many-{n}.safetensors")
            hdr = gen_safetensors(src, n)
            out = os.path.join(work, "out.safetensors")
            rss, wall, user, sys_ = measure(command(args, src, out))
            row("safetensors (shuffled)", n, hdr, rss, wall, user, sys_)
            os.remove(src)
            if os.path.exists(out):
                os.remove(out)
        for n in args.npz:
            src = os.path.join(work, f"many-{n}.npz")
            gen_npz(src, n)
            out = os.path.join(work, "out.safetensors")
            if args.dry_run:
                # The header's size from a real run, not measured.
                subprocess.run([args.binary, src, "-o", out, "--no-sync", "-q"], check=True)
            rss, wall, user, sys_ = measure(command(args, src, out))
            hdr = struct.unpack("<Q", open(out, "rb").read(8))[0]
            row("npz (stored, tiny)", n, hdr, rss, wall, user, sys_)
            os.remove(src)
            if os.path.exists(out):
                os.remove(out)
        for n in args.pt:
            src = os.path.join(work, f"many-{n}.pt")
            pkl = gen_pt(src, n, args.pt_shared)
            out = os.path.join(work, "out.safetensors")
            rss, wall, user, sys_ = measure(command(args, src, out))
            kind = "pt (one storage)" if args.pt_shared else "pt (a storage each)"
            row(kind, n, pkl, rss, wall, user, sys_)
            os.remove(src)
            if os.path.exists(out):
                os.remove(out)
        for mb in args.meta_mb:
            src = os.path.join(work, f"meta-{mb}.safetensors")
            hdr = gen_metadata(src, mb)
            out = os.path.join(work, "out.safetensors")
            rss, wall, user, sys_ = measure(command(args, src, out))
            row("one metadata string", 1, hdr, rss, wall, user, sys_)
            os.remove(src)
            if os.path.exists(out):
                os.remove(out)
        for n in args.manifest:
            manifest, dump = os.path.join(work, f"m-{n}.json"), os.path.join(work, f"dump-{n}.bin")
            hdr = gen_manifest(manifest, dump, n)
            out = os.path.join(work, "out.safetensors")
            rss, wall, user, sys_ = measure(command(args, dump, out, ("--raw-manifest", manifest)))
            # A manifest is held twice: the README's bound for it is 4.5 times + 64 MiB.
            row("raw manifest", n, hdr, rss, wall, user, sys_, factor=4.5)
            for p in (manifest, dump, out):
                if os.path.exists(p):
                    os.remove(p)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
