#!/usr/bin/env python3
"""Make the tiny Hugging Face checkpoints Telos ships as its default model and test fixtures.

Runs wherever torch and transformers are installed (our H200 machine has both; CI does not need
to run it: its outputs are committed). Each checkpoint gets random weights from a fixed seed,
created by transformers itself, and a golden.json with what transformers computes for it in fp32:
for a few prompts, the prompt ids, the greedy continuation (32 tokens, no EOS stop) and the
last-position logits of the prompt.

    python3 tools/make_fixtures.py OUTDIR        # writes OUTDIR/{tiny-llama,tiny-qwen2,tiny-qwen3}
"""
import json
import os
import sys

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

GREEDY_TOKENS = 32
PROMPTS = [[1, 17, 42, 99, 256, 7], [5], [300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310,
                                          311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322]]


def make_config(cls, rope, **kw):
    """Build a config with RoPE settings in whichever form this transformers version takes."""
    try:
        return cls(rope_parameters=rope, **kw)
    except TypeError:
        legacy = dict(rope)
        theta = legacy.pop("rope_theta")
        scaling = legacy if legacy.get("rope_type", "default") != "default" else None
        return cls(rope_theta=theta, rope_scaling=scaling, **kw)


def specs():
    common = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  bos_token_id=1, eos_token_id=2, attn_implementation="eager",
                  # Wider than the default 0.02, so that attention and MLP move the residual
                  # stream enough to make greedy continuations vary (with 0.02 and tied
                  # embeddings a tiny model just repeats its last input token).
                  initializer_range=0.1)
    return [
        # Llama 3 style: llama3 RoPE scaling, tied embeddings (as Llama-3.2-1B), bf16 weights.
        ("tiny-llama", LlamaForCausalLM,
         make_config(LlamaConfig, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 64},
                     rms_norm_eps=1e-5, tie_word_embeddings=True,
                     # The special ids of its tokenizer (tools/make_tiny_tokenizer.py).
                     **dict(common, bos_token_id=509, eos_token_id=[511, 509])),
         torch.bfloat16, None),
        # Qwen2: QKV bias, tied embeddings (as Qwen2.5-1.5B), fp16 weights.
        ("tiny-qwen2", Qwen2ForCausalLM,
         make_config(Qwen2Config, {"rope_type": "default", "rope_theta": 1000000.0},
                     rms_norm_eps=1e-6, tie_word_embeddings=True, **common),
         torch.float16, None),
        # Qwen3: per-head QK RMSNorm, explicit head_dim, untied embeddings, fp32 weights, sharded.
        ("tiny-qwen3", Qwen3ForCausalLM,
         make_config(Qwen3Config, {"rope_type": "default", "rope_theta": 1000000.0},
                     rms_norm_eps=1e-6, tie_word_embeddings=False, head_dim=32, **common),
         torch.float32, "600KB"),
    ]


def main(out):
    torch.manual_seed(0)
    for name, cls, cfg, dtype, shard in specs():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(1234)
        model = cls(cfg)
        # Default init is std 0.02; widen norms off 1.0 so that a missing norm weight shows up.
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                elif n.endswith("bias"):
                    p.copy_(0.05 * torch.randn_like(p))
                # Telos packs matrices as bf16: make every weight bf16-exact, so that an artifact
                # holds exactly the values transformers used and the fp32 CPU reference engine can
                # be held to 1e-4 of the golden logits whatever the checkpoint's storage dtype.
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
        model = model.to(dtype)
        kw = {"max_shard_size": shard} if shard else {}
        model.save_pretrained(d, **kw)
        # Golden outputs: reload the saved weights in fp32, so the reference sees exactly the
        # values a reader of the checkpoint sees.
        ref = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        cases = []
        for prompt in PROMPTS:
            ids = list(prompt)
            with torch.no_grad():
                logits = ref(torch.tensor([ids])).logits[0, -1].tolist()
                for _ in range(GREEDY_TOKENS):
                    nxt = int(ref(torch.tensor([ids])).logits[0, -1].argmax())
                    ids.append(nxt)
            cases.append({"prompt_ids": prompt, "greedy_ids": ids[len(prompt):],
                          "last_logits": logits})
        golden = {"generator": "tools/make_fixtures.py", "torch": torch.__version__,
                  "transformers": transformers.__version__, "dtype": "float32",
                  "cases": cases}
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f)
        print(name, "->", sorted(os.listdir(d)))
        for c in cases:
            print("  greedy", c["greedy_ids"])
        print(open(os.path.join(d, "config.json")).read())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures-out")
