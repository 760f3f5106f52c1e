#!/usr/bin/env python3
"""Peak RSS growth of save_file on a 1 GiB state_dict of CPU tensors: ours
(safetensors_stream.torch) against safetensors.torch 0.8. Not CI (needs torch).

    python scripts/rss_torch_save.py ours|reference OUT.safetensors [GIB] [transposed]

`transposed`: every matrix is passed as a transposed view (ours writes it in C order in
4 MiB pieces; the reference refuses non-contiguous tensors).

Prints the state_dict's bytes, the peak RSS before the call (tensors made)
and the growth of the peak during the call, from getrusage's ru_maxrss.
"""

import resource
import sys
import time


def peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    which, out = sys.argv[1], sys.argv[2]
    gib = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    transposed = "transposed" in sys.argv[4:]
    import torch

    if which == "ours":
        from safetensors_stream.torch import save_file
    else:
        from safetensors.torch import save_file
    g = torch.Generator().manual_seed(0)
    total = int(gib * (1 << 30))
    # A model's mix: big f32 and bf16 matrices, small vectors.
    sd, made, k = {}, 0, 0
    while made < total:
        dtype = torch.bfloat16 if k % 2 else torch.float32
        n = min(32 << 20, total - made) // (4 if dtype == torch.float32 else 2)
        # Filled in place: no temporary raises the peak before the call.
        sd[f"layer.{k}.weight"] = torch.empty(n // 1024, 1024, dtype=dtype).normal_(generator=g)
        sd[f"layer.{k}.bias"] = torch.zeros(1024, dtype=dtype)
        made += sd[f"layer.{k}.weight"].numel() * sd[f"layer.{k}.weight"].element_size() + 1024 * dtype.itemsize
        k += 1
    if transposed:
        sd = {k: v.t() for k, v in sd.items()}
    before = peak_kib()
    t = time.perf_counter()
    save_file(sd, out)
    took = time.perf_counter() - t
    growth = peak_kib() - before
    print(f"{which}: {made / (1 << 20):.0f} MiB of tensors, peak RSS before {before / 1024:.0f} MiB, "
          f"growth during save_file {growth / 1024:.1f} MiB, {took:.2f} s")


if __name__ == "__main__":
    main()
