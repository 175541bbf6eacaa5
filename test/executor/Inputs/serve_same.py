#!/usr/bin/env python3
"""Serves two artifacts of one model with `telos-run serve --engine cpu` and asks each the same
greedy completions, to show that a serving path gives the same answers on both (tensor-parallel
ranks against one rank).

    serve_same.py TELOS_RUN ARTIFACT_A ARTIFACT_B

For each artifact: starts the server on a free loopback port, sends three completions (prompts as
token ids, temperature 0, 16 tokens, logprobs 1) and stops it. Prints each answer's text and
whether B's texts and logprobs match A's (logprobs within 1e-4); exits 1 when they differ.
"""
import json
import re
import subprocess
import sys
import urllib.request

PROMPTS = [[1, 17, 42, 99, 256, 7], [5], list(range(300, 323))]


def completions(telos_run, artifact):
    server = subprocess.Popen([telos_run, "serve", artifact, "--engine", "cpu", "--port", "0"],
                              stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in server.stderr:
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            sys.exit(f"serve_same.py: {artifact}: the server never said its port")
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(base + "/v1/models", timeout=60) as r:
            model = json.loads(r.read())["data"][0]["id"]
        answers = []
        for prompt in PROMPTS:
            body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0,
                               "logprobs": 1}).encode()
            req = urllib.request.Request(base + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                choice = json.loads(r.read())["choices"][0]
            answers.append((choice["text"], choice["logprobs"]["token_logprobs"]))
        return answers
    finally:
        server.terminate()
        server.wait(timeout=60)


def main():
    telos_run, a, b = sys.argv[1:4]
    first, second = completions(telos_run, a), completions(telos_run, b)
    ok = True
    for i, ((text_a, lp_a), (text_b, lp_b)) in enumerate(zip(first, second)):
        near = len(lp_a) == len(lp_b) and all(abs(x - y) <= 1e-4 for x, y in zip(lp_a, lp_b))
        same = text_a == text_b and near
        ok = ok and same
        print(f"prompt {i}: {len(lp_a)} tokens, {'same' if same else 'DIFFERENT'}: {text_a!r}"
              + ("" if same else f" against {text_b!r}"))
    print("serve: same answers" if ok else "serve: answers differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
