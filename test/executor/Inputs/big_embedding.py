#!/usr/bin/env python3
"""Copy a tied-embedding checkpoint with its vocabulary grown to VOCAB rows (the new rows zero),
so that a test can make an artifact of a few hundred MB at test time without committing one.

    big_embedding.py SRC DST VOCAB
"""
import json
import os
import shutil
import struct
import sys

src, dst, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
with open(os.path.join(src, "config.json")) as f:
    config = json.load(f)
if not config.get("tie_word_embeddings"):
    sys.exit("big_embedding: the checkpoint must tie its embeddings")
old_vocab, config["vocab_size"] = config["vocab_size"], vocab
with open(os.path.join(dst, "config.json"), "w") as f:
    json.dump(config, f)
for name in os.listdir(src):
    if name not in ("config.json", "model.safetensors", "golden.json", "model.json"):
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))

with open(os.path.join(src, "model.safetensors"), "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    data = f.read()
meta = header.pop("__metadata__", None)
out, offset = {}, 0
for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
    t = dict(header[name])
    begin, end = t["data_offsets"]
    size = end - begin
    if name == "model.embed_tokens.weight":
        t["shape"] = [vocab] + t["shape"][1:]
        size = size // old_vocab * vocab
    t["data_offsets"] = [offset, offset + size]
    out[name] = t
    offset += size
if meta is not None:
    out["__metadata__"] = meta
text = json.dumps(out, separators=(",", ":")).encode()
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        begin, end = header[name]["data_offsets"]
        f.write(data[begin:end])
        if name == "model.embed_tokens.weight":
            pad = out[name]["data_offsets"][1] - out[name]["data_offsets"][0] - (end - begin)
            chunk = bytes(1 << 24)
            while pad > 0:
                f.write(chunk[:min(pad, len(chunk))])
                pad -= len(chunk)
