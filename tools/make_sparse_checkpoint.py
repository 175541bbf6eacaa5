#!/usr/bin/env python3
"""A Llama-family checkpoint with every weight zero, written as a sparse file, for timing what
does not depend on the weights' values (the engine's host work per step, load and compile times)
at a real model's shapes without generating gigabytes of random numbers.

    python3 tools/make_sparse_checkpoint.py CONFIG_DIR OUT_DIR

CONFIG_DIR holds a Hugging Face config.json (e.g. test/telosc/Inputs/configs/Llama-3.1-8B);
OUT_DIR gets that config.json and one model.safetensors whose header names every tensor (bf16)
and whose data is a hole (truncate): 16 GB for the 8B shape, taking no disk until read.
"""
import json
import math
import os
import struct
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cfg_dir, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(cfg_dir, "config.json")) as f:
        c = json.load(f)
    h, inter, layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim", h // hq)
    shapes = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h]}
    if not c.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = [vocab, h]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = [h]
        shapes[p + "post_attention_layernorm.weight"] = [h]
        shapes[p + "self_attn.q_proj.weight"] = [hq * d, h]
        shapes[p + "self_attn.k_proj.weight"] = [hkv * d, h]
        shapes[p + "self_attn.v_proj.weight"] = [hkv * d, h]
        shapes[p + "self_attn.o_proj.weight"] = [h, hq * d]
        shapes[p + "mlp.gate_proj.weight"] = [inter, h]
        shapes[p + "mlp.up_proj.weight"] = [inter, h]
        shapes[p + "mlp.down_proj.weight"] = [h, inter]
    header, offset = {}, 0
    for name, shape in shapes.items():
        end = offset + 2 * math.prod(shape)  # bf16
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, end]}
        offset = end
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + offset)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    print(f"{out}: {offset / 1e9:.2f} GB of zero bf16 weights (sparse)")


if __name__ == "__main__":
    main()
