#!/usr/bin/env python3
"""Checks a tools/serve_bench.py JSON report: every field the report promises is there with the
right type, every request completed, and the prefix cache hit where it should (--cache on: hits
at every rate, off: none). Prints one line per run and rate for FileCheck; exits 1 naming the
first field that is wrong. No timing is asserted: these are figures, not pass marks.

    serve_bench_check.py REPORT.json --cache on|off|on,off [--hits-when-on]
"""
import argparse
import json
import sys

RATE_NUMBERS = ["duration_s", "request_throughput", "output_tokens_per_s"]
RATE_COUNTS = ["requests", "completed", "prompt_tokens", "output_tokens", "cached_prompt_tokens",
               "kv_pages_used_peak", "kv_pages_total", "preemptions"]
DISTRIBUTIONS = ["ttft_ms", "tpot_ms", "itl_ms"]
META = ["date", "command", "hardware", "engine", "model", "max_model_len", "workload",
        "workload_description", "num_requests", "seed", "slo_ttft_ms", "slo_itl_ms"]


def fail(where, what):
    sys.exit(f"serve_bench_check: {where}: {what}")


def check_rate(where, r, cache):
    for k in RATE_NUMBERS:
        if not isinstance(r.get(k), (int, float)) or r[k] <= 0:
            fail(where, f"{k}: expected a number > 0, got {r.get(k)!r}")
    for k in RATE_COUNTS:
        if not isinstance(r.get(k), int) or r[k] < 0:
            fail(where, f"{k}: expected a count, got {r.get(k)!r}")
    for k in DISTRIBUTIONS:
        for p in ("p50", "p90", "p99", "mean"):
            v = r.get(k, {}).get(p)
            if not isinstance(v, float) or v < 0:
                fail(where, f"{k}.{p}: expected milliseconds, got {v!r}")
        if not r[k]["p50"] <= r[k]["p90"] <= r[k]["p99"]:
            fail(where, f"{k}: percentiles out of order: {r[k]}")
    if r["errors"] or r["completed"] != r["requests"]:
        fail(where, f"{r['completed']} of {r['requests']} completed, errors {r['errors']} "
                    f"{r['error_examples']}")
    hit = r.get("prefix_cache_hit_rate")
    if not isinstance(hit, float) or not 0 <= hit <= 1:
        fail(where, f"prefix_cache_hit_rate: expected a fraction, got {hit!r}")
    if cache == "on" and (hit == 0 or r["cached_prompt_tokens"] == 0):
        fail(where, f"the prefix cache found nothing (hit rate {hit}, cached tokens "
                    f"{r['cached_prompt_tokens']})")
    if cache == "off" and (hit != 0 or r["cached_prompt_tokens"] != 0):
        fail(where, f"--no-prefix-cache found prompt tokens in the cache (hit rate {hit}, cached "
                    f"tokens {r['cached_prompt_tokens']})")
    return hit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--cache", required=True, help="on|off per run, comma-separated")
    ap.add_argument("--hits-when-on", action="store_true",
                    help="a run with the cache on must find cached tokens at every rate")
    args = ap.parse_args()
    with open(args.report) as f:
        report = json.load(f)
    for k in META:
        if k not in report.get("meta", {}):
            fail("meta", f"{k} is missing")
    modes = args.cache.split(",")
    if len(report["runs"]) != len(modes):
        fail("runs", f"expected {len(modes)}, got {len(report['runs'])}")
    for mode, run in zip(modes, report["runs"]):
        if run["prefix_cache"] is not (mode == "on"):
            fail("runs", f"prefix_cache: expected {mode == 'on'}, got {run['prefix_cache']!r}")
        if "goodput_rate" not in run:
            fail("runs", "goodput_rate is missing")
        for r in run["rates"]:
            where = f"run {mode}, rate {r['rate']}"
            expect = mode if mode == "off" or args.hits_when_on else None
            hit = check_rate(where, r, expect)
            print(f"cache {mode} rate {r['rate']}: {r['completed']}/{r['requests']} completed, "
                  f"hits {'> 0' if hit > 0 else '0'}")
    if len(modes) == 2:
        ratios = report.get("comparison", [])
        if len(ratios) != len(report["runs"][0]["rates"]) or not all(
                isinstance(c["ttft_p50_ratio"], float) for c in ratios):
            fail("comparison", f"expected a TTFT ratio per rate, got {ratios}")
        print(f"comparison: {len(ratios)} rates")


if __name__ == "__main__":
    main()
