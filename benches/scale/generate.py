#!/usr/bin/env python3
"""A synthetic checkpoint with DeepSeek-V3's structure, every dimension scaled down.

Names, tensor count (91,991), dtypes (FP8 E4M3 weights with F32 `weight_scale_inv`
over 128x128 blocks; BF16 norms, embeddings, router and MTP projection; F32 router
bias), MoE layout (3 dense layers, 58 MoE layers of 256 routed experts and a shared
expert, the multi-token-prediction layer 61), 163 shards named as DeepSeek's,
`model.safetensors.index.json` and `config.json` with its `quantization_config`.
Every dimension is divided by the preset's factor (at least 1); the 128x128 scale
blocks are kept, so a scaled weight has ceil(rows/128) x ceil(cols/128) scales.

Deterministic: the same preset and seed write the same bytes (each shard's data
comes from its own generator, seeded by (seed, shard number)).

    python3 benches/scale/generate.py --preset small OUT_DIR
    python3 benches/scale/generate.py --preset ci --shards 4 OUT_DIR

Needs numpy only. See benches/scale/README.md.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

# DeepSeek-V3's config.json (the values that shape its tensors).
V3 = {
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "num_attention_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "num_nextn_predict_layers": 1,
}

BLOCK = 128  # quantization_config.weight_block_size

# factor: every dimension divided by it; the rest trims the structure (None: V3's).
PRESETS = {
    # Seconds, a few MB: fewer layers, experts and shards, every kind of tensor.
    "ci": {"factor": 56, "dense": 1, "moe": 2, "experts": 64, "shards": 16},
    # ~1.5 GB of FP8 (~3 GB once dequantized to BF16): the whole structure.
    "small": {"factor": 21, "dense": None, "moe": None, "experts": None, "shards": None},
    # ~11 GB of FP8 (~21 GB in BF16).
    "full": {"factor": 8, "dense": None, "moe": None, "experts": None, "shards": None},
}

FP8, F32, BF16 = "F8_E4M3", "F32", "BF16"
WIDTH = {FP8: 1, F32: 4, BF16: 2}


def scaled(dim, factor):
    return max(1, round(dim / factor))


def tensors(p):
    """(name, dtype, shape) of every tensor, in DeepSeek-V3's order."""
    f = p["factor"]
    d = lambda k: scaled(V3[k], f)  # noqa: E731
    hidden, vocab = d("hidden_size"), d("vocab_size")
    heads = d("num_attention_heads")
    q_lora, kv_lora = d("q_lora_rank"), d("kv_lora_rank")
    nope, rope, v_dim = d("qk_nope_head_dim"), d("qk_rope_head_dim"), d("v_head_dim")
    inter, moe_inter = d("intermediate_size"), d("moe_intermediate_size")
    dense = p["dense"] if p["dense"] is not None else V3["first_k_dense_replace"]
    moe = p["moe"] if p["moe"] is not None else V3["num_hidden_layers"] - V3["first_k_dense_replace"]
    experts = p["experts"] if p["experts"] is not None else V3["n_routed_experts"]
    out = []

    def fp8(name, rows, cols):
        out.append((f"{name}.weight", FP8, [rows, cols]))
        out.append((f"{name}.weight_scale_inv", F32, [-(-rows // BLOCK), -(-cols // BLOCK)]))

    def mlp(prefix, width):
        fp8(f"{prefix}.down_proj", hidden, width)
        fp8(f"{prefix}.gate_proj", width, hidden)
        fp8(f"{prefix}.up_proj", width, hidden)

    def layer(i, is_moe):
        pre = f"model.layers.{i}"
        out.append((f"{pre}.input_layernorm.weight", BF16, [hidden]))
        if is_moe:
            for e in range(experts):
                mlp(f"{pre}.mlp.experts.{e}", moe_inter)
            out.append((f"{pre}.mlp.gate.e_score_correction_bias", F32, [experts]))
            out.append((f"{pre}.mlp.gate.weight", BF16, [experts, hidden]))
            mlp(f"{pre}.mlp.shared_experts", moe_inter * V3["n_shared_experts"])
        else:
            mlp(f"{pre}.mlp", inter)
        out.append((f"{pre}.post_attention_layernorm.weight", BF16, [hidden]))
        fp8(f"{pre}.self_attn.kv_a_proj_with_mqa", kv_lora + rope, hidden)
        out.append((f"{pre}.self_attn.kv_a_layernorm.weight", BF16, [kv_lora]))
        fp8(f"{pre}.self_attn.kv_b_proj", heads * (nope + v_dim), kv_lora)
        fp8(f"{pre}.self_attn.o_proj", hidden, heads * v_dim)
        fp8(f"{pre}.self_attn.q_a_proj", q_lora, hidden)
        out.append((f"{pre}.self_attn.q_a_layernorm.weight", BF16, [q_lora]))
        fp8(f"{pre}.self_attn.q_b_proj", heads * (nope + rope), q_lora)

    out.append(("model.embed_tokens.weight", BF16, [vocab, hidden]))
    for i in range(dense):
        layer(i, False)
    for i in range(dense, dense + moe):
        layer(i, True)
    # The multi-token-prediction module: one more MoE layer and its own heads.
    mtp = dense + moe
    layer(mtp, True)
    pre = f"model.layers.{mtp}"
    out.append((f"{pre}.embed_tokens.weight", BF16, [vocab, hidden]))
    out.append((f"{pre}.enorm.weight", BF16, [hidden]))
    out.append((f"{pre}.hnorm.weight", BF16, [hidden]))
    out.append((f"{pre}.eh_proj.weight", BF16, [hidden, 2 * hidden]))
    out.append((f"{pre}.shared_head.norm.weight", BF16, [hidden]))
    out.append((f"{pre}.shared_head.head.weight", BF16, [vocab, hidden]))
    out.append(("model.norm.weight", BF16, [hidden]))
    out.append(("lm_head.weight", BF16, [vocab, hidden]))
    config = dict(V3)
    for k in V3:
        if k.endswith(("_size", "_rank", "_dim")) or k == "num_attention_heads":
            config[k] = d(k)
    config.update(
        num_hidden_layers=dense + moe,
        first_k_dense_replace=dense,
        n_routed_experts=experts,
        num_key_value_heads=config["num_attention_heads"],
    )
    return out, config


def nbytes(dtype, shape):
    return WIDTH[dtype] * int(np.prod(shape, dtype=np.int64))


def split(specs, shards):
    """Cuts the tensors, in order, into `shards` runs of about equal bytes."""
    total = sum(nbytes(t, s) for _, t, s in specs)
    runs, run, acc = [], [], 0
    for spec in specs:
        run.append(spec)
        acc += nbytes(spec[1], spec[2])
        left = len(specs) - sum(map(len, runs)) - len(run)
        if acc >= total * (len(runs) + 1) / shards and len(runs) < shards - 1 and left:
            runs.append(run)
            run = []
    runs.append(run)
    while len(runs) < shards:  # fewer tensors than shards cannot happen at V3's count
        runs.append([])
    return runs


def to_bf16(x):
    """float32 -> bfloat16 bits, round to nearest even."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def data(rng, name, dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == FP8:
        codes = rng.integers(0, 256, n, dtype=np.uint8)
        nan = (codes & 0x7F) == 0x7F  # E4M3FN's NaN codes: make them 448
        codes[nan] ^= 0x01
        return codes.tobytes()
    if dtype == F32:
        if name.endswith("weight_scale_inv"):
            return rng.uniform(1e-4, 1e-3, n).astype("<f4").tobytes()
        return rng.normal(0.0, 1.0, n).astype("<f4").tobytes()
    if name.endswith(("norm.weight", "enorm.weight", "hnorm.weight")):
        return to_bf16(rng.normal(1.0, 0.05, n)).astype("<u2").tobytes()
    return to_bf16(rng.normal(0.0, 0.02, n)).astype("<u2").tobytes()


def write_shard(path, specs, rng):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in specs:
        n = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, dtype, shape in specs:
            f.write(data(rng, name, dtype, shape))
    os.replace(tmp, path)
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="folder to write (created)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="ci")
    ap.add_argument("--factor", type=int, help="override the preset's dimension divisor")
    ap.add_argument("--shards", type=int, help="override the number of shards (163)")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--dry-run", action="store_true", help="print the counts, write nothing")
    args = ap.parse_args()
    p = dict(PRESETS[args.preset])
    if args.factor:
        p["factor"] = args.factor
    shards = args.shards or p["shards"] or 163
    specs, config = tensors(p)
    total = sum(nbytes(t, s) for _, t, s in specs)
    fp8 = [s for _, t, s in specs if t == FP8]
    bf16_out = total + sum(int(np.prod(s)) for s in fp8) - sum(
        nbytes(t, s) for n, t, s in specs if n.endswith("weight_scale_inv"))
    print(f"{args.preset}: factor {p['factor']}, {len(specs)} tensors ({len(fp8)} FP8 weights), "
          f"{shards} shards, {total / 1e9:.3f} GB in, {bf16_out / 1e9:.3f} GB dequantized to BF16",
          file=sys.stderr)
    if args.dry_run:
        return
    os.makedirs(args.out, exist_ok=True)
    weight_map = {}
    digits = 6 if shards >= 100 else 5  # DeepSeek's own: model-00001-of-000163
    runs = split(specs, shards)
    for i, run in enumerate(runs, start=1):
        name = f"model-{i:05d}-of-{shards:0{digits}d}.safetensors"
        rng = np.random.default_rng([args.seed, i])
        write_shard(os.path.join(args.out, name), run, rng)
        for tname, _, _ in run:
            weight_map[tname] = name
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    config.update(
        architectures=["DeepseekV3ForCausalLM"],
        model_type="deepseek_v3",
        torch_dtype="bfloat16",
        quantization_config={
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [BLOCK, BLOCK],
        },
        synthetic={"generator": "benches/scale/generate.py", "preset": args.preset,
                   "factor": p["factor"], "seed": args.seed},
    )
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
