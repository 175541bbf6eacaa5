#!/usr/bin/env python3
"""Make broken copies of a checkpoint for telosc's bad-input lit tests, at test time, so that no
broken binary is committed. Each command changes one thing and leaves the rest intact:

  break_checkpoint.py copy SRC DST                  config.json, *.safetensors and the index
  break_checkpoint.py truncate FILE N               keep the first N bytes
  break_checkpoint.py header-length FILE N          overwrite the 8-byte header length with N
  break_checkpoint.py offsets FILE TENSOR BEGIN END rewrite one tensor's data_offsets
  break_checkpoint.py shape FILE TENSOR D1,D2,...   rewrite one tensor's shape
  break_checkpoint.py dtype FILE TENSOR DTYPE       rewrite one tensor's dtype
  break_checkpoint.py drop FILE TENSOR              remove one tensor from the header
  break_checkpoint.py config DIR KEY JSON           set config.json's KEY to the JSON value
                                                    (null deletes it)
  break_checkpoint.py config-null DIR KEY           set config.json's KEY to null
  break_checkpoint.py set-element FILE TENSOR I V   store V (a float: nan, inf, -inf, 1e39, ...)
                                                    as element I of TENSOR, in its dtype
Header rewrites keep the data section byte for byte; only the header and its length change.
"""
import json
import os
import shutil
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_safetensors(path, header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def edit_tensor(path, tensor, change):
    header, data = read_safetensors(path)
    if tensor not in header:
        sys.exit(f"break_checkpoint: {path} has no tensor {tensor}")
    change(header)
    write_safetensors(path, header, data)


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "copy":
        src, dst = args
        os.makedirs(dst, exist_ok=True)
        for name in os.listdir(src):
            if name == "config.json" or name.endswith(".safetensors") or name.endswith(".index.json"):
                shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    elif cmd == "truncate":
        path, n = args[0], int(args[1])
        with open(path, "rb") as f:
            blob = f.read()
        with open(path, "wb") as f:
            f.write(blob[:n])
    elif cmd == "header-length":
        path, n = args[0], int(args[1])
        with open(path, "r+b") as f:
            f.write(struct.pack("<Q", n))
    elif cmd == "offsets":
        path, tensor, begin, end = args[0], args[1], int(args[2]), int(args[3])
        edit_tensor(path, tensor, lambda h: h[tensor].update(data_offsets=[begin, end]))
    elif cmd == "shape":
        path, tensor, dims = args[0], args[1], [int(d) for d in args[2].split(",")]
        edit_tensor(path, tensor, lambda h: h[tensor].update(shape=dims))
    elif cmd == "dtype":
        path, tensor, dtype = args
        edit_tensor(path, tensor, lambda h: h[tensor].update(dtype=dtype))
    elif cmd == "drop":
        path, tensor = args
        edit_tensor(path, tensor, lambda h: h.pop(tensor))
    elif cmd == "set-element":
        path, tensor, index, value = args[0], args[1], int(args[2]), float(args[3])
        header, data = read_safetensors(path)
        entry = header[tensor]
        begin = entry["data_offsets"][0]
        if entry["dtype"] == "BF16":
            raw = struct.pack("<f", value)[2:]  # the high half of the f32: bf16, truncated
        elif entry["dtype"] == "F16":
            raw = struct.pack("<e", value)
        else:
            raw = struct.pack("<f", value)
        at = begin + index * len(raw)
        write_safetensors(path, header, data[:at] + raw + data[at + len(raw):])
    elif cmd == "config-null":
        directory, key = args
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            config = json.load(f)
        config[key] = None
        with open(path, "w") as f:
            json.dump(config, f, indent=2)
    elif cmd == "config":
        directory, key, value = args
        path = os.path.join(directory, "config.json")
        with open(path) as f:
            config = json.load(f)
        value = json.loads(value)
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
        with open(path, "w") as f:
            json.dump(config, f, indent=2)
    else:
        sys.exit(f"break_checkpoint: unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
