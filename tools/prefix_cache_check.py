#!/usr/bin/env python3
"""Tokens with and without a prefix-cache hit, on the engine telos-run picks (the GPU where there
is one; --engine to choose).

For each ARTIFACT two `telos-run serve`s, one with the prefix cache and one with
--no-prefix-cache, get the same requests in the same order, greedy, 16 tokens each:
  1. alone: A, a prompt of three pages and five tokens (its three full pages become cached);
  2. in one batch: B, A's first two pages and a tail of its own; C, A and one page more; D, A's
     three full pages exactly (a hit stops a page short: one prompt token is always computed);
     E, a prompt of its own;
  3. alone: A again.
It passes when every request's tokens are the same from both servers, and the cached prompt
tokens each reports are those the cache should give (B 2 pages, C 3, D 2, E 0, A again 3; all 0
without the cache). Prints a table, one row a request; exit status 1 when a row fails.

    python3 tools/prefix_cache_check.py --telos-run BIN [--engine gpu|cpu] ARTIFACT...
"""
import argparse
import asyncio
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_bench import (BenchError, RequestSpec, Server, Target, describe_server,  # noqa: E402
                         send)

OUTPUT_TOKENS = 16
SALT = "prefix-cache-check"  # every request the same: they share one cache


def manifest(artifact):
    with open(os.path.join(artifact, "manifest.json")) as f:
        m = json.load(f)
    return m["serving"]["kv_page_size"], m["model"]["vocab_size"]


def prompts(page, vocab, seed=7):
    """The five prompts and, in pages, the hit each should get from the cache."""
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(1, vocab) for _ in range(n)]  # noqa: E731
    a = ids(3 * page + 5)
    return {"A": (a, 0), "B": (a[:2 * page] + ids(7), 2), "C": (a + ids(page), 3),
            "D": (a[:3 * page], 2), "E": (ids(2 * page + 3), 0), "A again": (a, 3)}


async def batch(target, named):
    """The requests of `named` at once; their results by name."""
    results = await asyncio.gather(*[send(target, RequestSpec(i, p, OUTPUT_TOKENS), p, SALT)
                                     for i, (_, p) in enumerate(named)])
    return {name: r for (name, _), r in zip(named, results)}


def run_server(args, artifact, plan, prefix_cache):
    cmd = [args.telos_run, "serve", artifact, "--port", "0"]
    if args.engine:
        cmd += ["--engine", args.engine]
    if not prefix_cache:
        cmd.append("--no-prefix-cache")
    server = Server(cmd)
    try:
        target = Target(server.url, engine=server.engine)
        asyncio.run(describe_server(target))
        out = {}
        for phase in (["A"], ["B", "C", "D", "E"], ["A again"]):
            out.update(asyncio.run(batch(target, [(n, plan[n][0]) for n in phase])))
        return out, server.engine
    finally:
        server.stop()


def check(args, artifact):
    page, vocab = manifest(artifact)
    plan = prompts(page, vocab)
    cached, engine = run_server(args, artifact, plan, True)
    plain, _ = run_server(args, artifact, plan, False)
    rows, ok = [], True
    for name, (prompt, hit_pages) in plan.items():
        c, p = cached[name], plain[name]
        errors = [e[:120] for e in (c.error, p.error) if e]
        same = not errors and c.token_ids == p.token_ids
        hits_right = c.cached_tokens == hit_pages * page and p.cached_tokens == 0
        ok = ok and same and hits_right
        rows.append(f"| {os.path.basename(artifact)} ({engine}) | {name} | {len(prompt)} | "
                    f"{c.cached_tokens} (want {hit_pages * page}) | {p.cached_tokens} | "
                    f"{'same' if same else 'DIFFERENT: ' + '; '.join(errors)} | "
                    f"{'pass' if same and hits_right else 'FAIL'} |")
    return rows, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--telos-run", required=True)
    ap.add_argument("--engine", choices=["gpu", "cpu"])
    ap.add_argument("artifacts", nargs="+")
    args = ap.parse_args()
    print("| artifact | request | prompt | cached tokens, cache on | cache off | tokens | result |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    ok = True
    for artifact in args.artifacts:
        try:
            rows, good = check(args, artifact)
        except (BenchError, OSError, KeyError, ValueError) as e:
            rows, good = [f"| {artifact} | - | - | - | - | {e} | FAIL |"], False
        print("\n".join(rows), flush=True)
        ok = ok and good
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
