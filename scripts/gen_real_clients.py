#!/usr/bin/env python3
"""Writes fixtures/real-clients/: tiny models saved by transformers itself, in the forms real
clients hand us, with the reference tensors and logits to check conversions against.

Run once, by hand, never by CI (see scripts/requirements-real-clients.txt for the pinned
versions): transformers 4.57 is the writer, because `save_pretrained(safe_serialization=False)`
is gone from transformers 5. With /work/venvs/torch (torch 2.15.0) and transformers 4.57.6
installed with `pip install --target DIR`:

    PYTHONPATH=DIR python scripts/gen_real_clients.py

No network: every model is built from a tiny config, seeded; nothing comes from the Hub.

Per architecture (fixtures/real-clients/<arch>/):
  config.json                 what save_pretrained wrote (fp32)
  single/pytorch_model.bin    save_pretrained(safe_serialization=False), fp32
  sharded/                    the same, max_shard_size=16KB: shards + pytorch_model.bin.index.json
  f16/, bf16/                 single, the model cast first (config.json beside: its dtype)
  legacy.bin                  torch.save(state_dict, _use_new_zipfile_serialization=False)
  training.pt                 {"model": sd, "optimizer": Adam state, "epoch": 3} (gpt2, opt)
  ref-{f32,f16,bf16}.safetensors  every name of the state_dict, tied ones cloned, written by
                              safetensors.torch.save_file: what each conversion must equal
  kept.json                   the names transformers' own save_pretrained (safetensors) keeps,
                              and the tied groups: what --dedupe-tied must keep
  logits.safetensors          input_ids and the logits of each dtype, from the model in memory
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "fixtures" / "real-clients"
SEQ = 8


def configs():
    t = transformers
    common = dict(vocab_size=64)
    return {
        # GPT-2: wte tied to lm_head (lm_head sorts first).
        "gpt2": (t.GPT2LMHeadModel, t.GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=16, **common)),
        # LLaMA, untied embeddings (as Llama 2/3 8B+).
        "llama": (t.LlamaForCausalLM, t.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, num_key_value_heads=1,
                                                    max_position_embeddings=16, tie_word_embeddings=False, **common)),
        # BERT masked LM: two pairs (decoder weight = word embeddings, decoder bias = predictions bias).
        "bert": (t.BertForMaskedLM, t.BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                                 intermediate_size=32, max_position_embeddings=16, **common)),
        # T5 (v1.0, tied): shared, encoder/decoder embed_tokens and lm_head are one tensor.
        "t5": (t.T5ForConditionalGeneration, t.T5Config(d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
                                                        relative_attention_num_buckets=8, **common)),
        # OPT: decoder.embed_tokens tied to lm_head (lm_head sorts first).
        "opt": (t.OPTForCausalLM, t.OPTConfig(hidden_size=16, ffn_dim=32, num_hidden_layers=2, num_attention_heads=2,
                                              max_position_embeddings=16, word_embed_proj_dim=16, **common)),
    }


def logits(model, ids, grad=False):
    with torch.set_grad_enabled(grad):
        if model.config.is_encoder_decoder:
            return model(input_ids=ids, decoder_input_ids=ids).logits
        return model(input_ids=ids).logits


def reference(sd):
    """Every name, tied ones cloned: safetensors.torch.save_file refuses shared tensors."""
    return {k: v.detach().clone().contiguous() for k, v in sd.items()}


def tied_groups(sd):
    by = {}
    for k, v in sd.items():
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()), v.dtype)
        by.setdefault(key, []).append(k)
    return [g for g in by.values() if len(g) > 1]


def save_folder(model, dest, **kw):
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=False, **kw)
        dest.mkdir(parents=True)
        for f in Path(tmp).iterdir():
            if f.name != "generation_config.json":
                shutil.copy(f, dest / f.name)


def main():
    if not transformers.__version__.startswith("4.57"):
        sys.exit(f"needs transformers 4.57 (save_pretrained safe_serialization=False), got {transformers.__version__}")
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    ids = torch.tensor([[1, 5, 9, 13, 2, 7, 11, 3]])
    for arch, (cls, config) in configs().items():
        d = OUT / arch
        torch.manual_seed(0)
        model = cls(config).eval()
        save_folder(model, d / "single")
        shutil.copy(d / "single" / "config.json", d / "config.json")
        save_folder(model, d / "sharded", max_shard_size="16KB")
        sd = model.state_dict()
        torch.save(sd, d / "legacy.bin", _use_new_zipfile_serialization=False)
        if arch in ("gpt2", "opt"):
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            loss = logits(model.train(), ids, grad=True).float().pow(2).mean()
            loss.backward()
            opt.step()
            model.eval()
            sd = model.state_dict()
            # The step moved the weights: the training checkpoint has a reference of its own.
            torch.save({"model": sd, "optimizer": opt.state_dict(), "epoch": 3}, d / "training.pt")
            save_file(reference(sd), d / "ref-training.safetensors", metadata={"format": "pt"})
            torch.manual_seed(0)
            model = cls(config).eval()
            sd = model.state_dict()
        groups = tied_groups(sd)
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            kept = sorted(load_file(Path(tmp) / "model.safetensors"))
        (d / "kept.json").write_text(json.dumps({"kept": kept, "tied_groups": groups}, indent=1) + "\n")
        out = {"input_ids": ids}
        for tag, dtype in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
            m = model.to(dtype)
            if tag != "f32":
                save_folder(m, d / tag)
            save_file(reference(m.state_dict()), d / f"ref-{tag}.safetensors", metadata={"format": "pt"})
            out[tag] = logits(m, ids).contiguous()
        save_file(out, d / "logits.safetensors")
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    (OUT / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
