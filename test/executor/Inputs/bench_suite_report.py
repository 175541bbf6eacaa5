#!/usr/bin/env python3
"""tools/bench_suite.py's report from real `telos-run bench --json` output, without a GPU: the
torch-side modules are stand-ins (the report never calls them), the rows are built as bench_model
builds them, with the given JSON as every telos-run run. Prints the report, so that a renamed
key between telos-run bench and bench_suite fails here rather than on the GPU machine at the end
of a benchmark run.

    bench_suite_report.py SRC_ROOT BENCH_JSON OUT_DIR
"""
import json
import os
import sys
import types


def import_bench_suite(src):
    """tools/bench_suite.py with stand-ins for the modules it needs on the GPU machine only."""
    for name in ("torch", "transformers", "e2e_check"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["e2e_check"].make_checkpoint = None
    sys.modules["torch"].no_grad = lambda: (lambda f: f)
    sys.path.insert(0, os.path.join(src, "tools"))
    import bench_suite
    return bench_suite


def model_row(bench_suite, bench_json):
    """A model's row as bench_model makes it, every telos-run run the JSON at bench_json; and the
    report's metadata."""
    with open(bench_json) as f:
        bench = json.load(f)
    run = bench["runs"][0]
    procs = [{k: r.get(k) for k in bench_suite.HOST_KEYS} for r in bench["runs"]]
    telos = {"decode": dict(bench, host_processes=procs), "batch64": dict(bench, host_processes=procs),
             "throughput": bench}
    row = {"model": "Llama-3.2-1B", "weight_bytes": 2471628800, "floor_ms_per_token": 0.59,
           "transformers_ms_per_token": 16.0, "compile_cold_s": 20.0, "compile_warm_s": 3.0,
           "telos_ms_per_token": run["ms_per_token"], "telos_sampled_ms_per_token": run["ms_per_token"],
           "load_s": bench["load_s"], "load_to_first_token_s": bench["load_to_first_token_s"],
           "telos": telos}
    meta = {"date": "today", "gpu": "none", "driver": "none", "cuda": "none", "torch": "none",
            "transformers": "none", "bandwidth": 4.2e12, "flops": 7.0e14, "command": "test"}
    return row, meta


if __name__ == "__main__":
    src, bench_json, out = sys.argv[1:4]
    suite = import_bench_suite(src)
    row, meta = model_row(suite, bench_json)
    os.makedirs(out, exist_ok=True)
    suite.write_report([row, {"model": "Llama-3.1-8B", "error": "not run"}], meta, out)
    print(open(os.path.join(out, "benchmarks.md")).read())
