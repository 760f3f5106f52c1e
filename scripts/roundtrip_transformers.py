#!/usr/bin/env python3
"""The from_pretrained round trip over fixtures/real-clients (not CI: needs torch and
transformers; versions pinned in scripts/requirements-real-clients.txt).

For every architecture and form, converts with the `convert` binary into a fresh folder holding
only config.json and the safetensors output, loads it with `from_pretrained`, and compares the
logits bit for bit with the same model loaded from the reference (`ref-*.safetensors`, every
name, written by safetensors.torch.save_file) through the very same code; a second check compares
with the logits the generator computed from the model in memory (transformers 4.57.6).

    python scripts/roundtrip_transformers.py run --convert target/debug/safetensors-convert --out tf5.json
    PYTHONPATH=/work/venvs/clients-tf4 python scripts/roundtrip_transformers.py run ... --out tf4.json
    python scripts/roundtrip_transformers.py table tf4.json tf5.json   # markdown
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "real-clients"
ARCHS = ["gpt2", "llama", "bert", "t5", "opt"]

# form -> (input relative to the architecture's folder, extra args, dtype tag, reference)
FORMS = {
    "single .bin": ("single/pytorch_model.bin", [], "f32", "f32"),
    "folder": ("single", [], "f32", "f32"),
    "index": ("sharded/pytorch_model.bin.index.json", [], "f32", "f32"),
    "sharded folder": ("sharded", [], "f32", "f32"),
    "resharded": ("single", ["--max-shard-size", "10KB"], "f32", "f32"),
    "legacy": ("legacy.bin", [], "f32", "f32"),
    "fp16": ("f16", [], "f16", "f16"),
    "bf16": ("bf16", [], "bf16", "bf16"),
    "training --pt-root": ("training.pt", ["--pt-root", "model"], "f32", "training"),
    "--dedupe-tied": ("single", ["--dedupe-tied"], "f32", "f32"),
    "--dedupe-tied index": ("sharded/pytorch_model.bin.index.json", ["--dedupe-tied"], "f32", "f32"),
    "--dedupe-tied training": ("training.pt", ["--pt-root", "model", "--dedupe-tied"], "f32", "training"),
}


def run(args):
    import torch
    import transformers
    from safetensors.torch import load_file

    major = int(transformers.__version__.split(".")[0])
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    results = {"transformers": transformers.__version__, "torch": torch.__version__, "cells": {}}

    def load(folder, cls, tag):
        kw = {"dtype" if major >= 5 else "torch_dtype": dtypes[tag]}
        model, info = cls.from_pretrained(folder, output_loading_info=True, **kw)
        return model.eval(), info

    def logits(model, ids):
        with torch.no_grad():
            if model.config.is_encoder_decoder:
                return model(input_ids=ids, decoder_input_ids=ids).logits
            return model(input_ids=ids).logits

    for arch in ARCHS:
        d = CORPUS / arch
        config = json.loads((d / "config.json").read_text())
        cls = getattr(transformers, config["architectures"][0])
        stored = load_file(str(d / "logits.safetensors"))
        ids = stored["input_ids"]
        for form, (rel, extra, tag, ref) in FORMS.items():
            src = d / rel
            if not src.exists():
                continue
            cell = results["cells"].setdefault(form, {})
            with tempfile.TemporaryDirectory() as tmp:
                tmp = Path(tmp)
                cfg = (src if src.is_dir() else src.parent) / "config.json"
                if not cfg.exists():
                    cfg = d / "config.json"
                for name in ("ours", "ref"):
                    (tmp / name).mkdir()
                    shutil.copy(cfg, tmp / name / "config.json")
                shutil.copy(d / f"ref-{ref}.safetensors", tmp / "ref" / "model.safetensors")
                cmd = [args.convert, str(src), "-o", str(tmp / "ours" / "model.safetensors"), "-q", *extra]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    cell[arch] = f"convert failed: {done.stderr.strip()}"
                    continue
                try:
                    want_model, _ = load(tmp / "ref", cls, tag)
                    want = logits(want_model, ids)
                    model, info = load(tmp / "ours", cls, tag)
                    got = logits(model, ids)
                except Exception as e:  # a load or a forward pass that fails is the result
                    traceback.print_exc(file=sys.stderr)
                    cell[arch] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    continue
                mismatched = info.get("mismatched_keys") or []
                unexpected = info.get("unexpected_keys") or []
                if not torch.equal(got.view(torch.uint8) if got.dtype != torch.bool else got,
                                   want.view(torch.uint8) if want.dtype != torch.bool else want):
                    cell[arch] = "logits differ"
                elif mismatched or unexpected:
                    cell[arch] = f"bit-equal, but keys mismatched {mismatched} unexpected {unexpected}"
                else:
                    same_as_memory = ref != "training" and torch.equal(got, stored[tag])
                    cell[arch] = "bit-equal" + (" (= in-memory)" if same_as_memory else "")
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    bad = [(f, a, v) for f, c in results["cells"].items() for a, v in c.items() if not v.startswith("bit-equal")]
    for b in bad:
        print("FAIL", *b)
    print(f"transformers {transformers.__version__}: {sum(len(c) for c in results['cells'].values())} cells, "
          f"{len(bad)} failing -> {args.out}")


def table(args):
    runs = [json.loads(Path(p).read_text()) for p in args.results]
    head = "| form | " + " | ".join(f"{a} (tf {r['transformers']})" for a in ARCHS for r in runs) + " |"
    lines = [head, "|" + "---|" * (1 + len(ARCHS) * len(runs))]
    for form in FORMS:
        row = [form]
        for arch in ARCHS:
            for r in runs:
                v = r["cells"].get(form, {}).get(arch, "—")
                row.append("✓" if v.startswith("bit-equal") else ("—" if v == "—" else v))
        lines.append("| " + " | ".join(row) + " |")
    versions = ", ".join(f"transformers {r['transformers']} / torch {r['torch']}" for r in runs)
    print(f"Round trip ({versions}): ✓ = loads with from_pretrained from a folder holding only config.json "
          "and the converted safetensors, logits bit-equal to the reference's; — = form not in the corpus.\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--convert", default=str(CORPUS.parent.parent / "target" / "debug" / "convert"))
    r.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("results", nargs="+")
    a = p.parse_args()
    run(a) if a.cmd == "run" else table(a)


if __name__ == "__main__":
    main()
