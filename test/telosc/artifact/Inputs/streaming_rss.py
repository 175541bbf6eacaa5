#!/usr/bin/env python3
"""Peak resident memory of `telosc compile` on a synthetic checkpoint much larger than telosc
should ever hold in memory.

    streaming_rss.py TELOSC WORKDIR [LAYERS]

Writes WORKDIR/ckpt (a Llama-shaped bf16 safetensors checkpoint, hidden 1024, intermediate 4096,
vocab 32000, untied head: about 300 MB for 8 layers) with pure Python, compiles it to
WORKDIR/out.telos, and prints the weight bytes and telosc's peak RSS (getrusage of the child).
Pure Python: the CI machine has neither numpy nor torch.
"""
import json
import os
import struct
import subprocess
import sys

HIDDEN, INTER, VOCAB, HEADS, KV_HEADS = 1024, 4096, 32000, 16, 8
HEAD_DIM = HIDDEN // HEADS


def tensors(layers):
    yield "model.embed_tokens.weight", [VOCAB, HIDDEN]
    for l in range(layers):
        p = "model.layers.%d." % l
        yield p + "input_layernorm.weight", [HIDDEN]
        yield p + "self_attn.q_proj.weight", [HEADS * HEAD_DIM, HIDDEN]
        yield p + "self_attn.k_proj.weight", [KV_HEADS * HEAD_DIM, HIDDEN]
        yield p + "self_attn.v_proj.weight", [KV_HEADS * HEAD_DIM, HIDDEN]
        yield p + "self_attn.o_proj.weight", [HIDDEN, HEADS * HEAD_DIM]
        yield p + "post_attention_layernorm.weight", [HIDDEN]
        yield p + "mlp.gate_proj.weight", [INTER, HIDDEN]
        yield p + "mlp.up_proj.weight", [INTER, HIDDEN]
        yield p + "mlp.down_proj.weight", [HIDDEN, INTER]
    yield "model.norm.weight", [HIDDEN]
    yield "lm_head.weight", [VOCAB, HIDDEN]


def write_checkpoint(directory, layers):
    os.makedirs(directory, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
              "intermediate_size": INTER, "num_hidden_layers": layers, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "vocab_size": VOCAB, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
              "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
    json.dump(config, open(os.path.join(directory, "config.json"), "w"))
    header, offset = {}, 0
    for name, shape in tensors(layers):
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    # A repeating run of distinct finite bf16 values (1/64 .. ~2), 1 MiB at a time.
    pattern = struct.pack("<512H", *[0x3C80 + i for i in range(512)]) * 1024
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        left = offset
        while left > 0:
            chunk = pattern[:min(left, len(pattern))]
            f.write(chunk)
            left -= len(chunk)
    return offset


def main():
    telosc, work = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    weight_bytes = write_checkpoint(os.path.join(work, "ckpt"), layers)
    # The first compile fills a kernel cache (NVRTC's own memory is not what this test bounds);
    # the second, measured, packs the weights and takes its kernels from that cache.
    env = dict(os.environ, TELOS_CACHE_DIR=os.path.join(work, "kernel-cache"))
    for _ in range(2):
        child = subprocess.Popen([telosc, "compile", os.path.join(work, "ckpt"), "-o",
                                  os.path.join(work, "out.telos")], env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise SystemExit("telosc failed with exit code %d" % child.returncode)
    peak_kib = usage.ru_maxrss
    # What telosc holds before it reads anything (its shared libraries, NVRTC's among them).
    child = subprocess.Popen([telosc, "--help"], stdout=subprocess.DEVNULL)
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0
    base_kib = usage.ru_maxrss
    print("weights: %d MiB" % (weight_bytes >> 20))
    print("telosc peak RSS: %d MiB (%d MiB at start)" % (peak_kib >> 10, base_kib >> 10))
    # The bound the tests check: peak RSS above the start-up footprint under an eighth of the
    # weights (the buffer is 8 MiB).
    grown = (peak_kib - base_kib) * 1024
    print("peak RSS below 1/8 of the weights: %s" % ("yes" if grown * 8 < weight_bytes else "no"))


if __name__ == "__main__":
    main()
