#!/usr/bin/env bash
# The host's cost per CUDA call of a decode step on the GPU machine: telos-launch-bench twice (two
# passes in one call, so run-to-run spread shows next to the figures), then one table of both passes. tools/gpu_check.sh runs it in full mode:
#
#   bash tools/launch_bench.sh BINARY LOGDIR      (writes LOGDIR/pass1.json, pass2.json)
#
# Exit code: the first failing pass's, else 0.
set -uo pipefail
bench=$1
logs=$2
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for pass in 1 2; do
  timeout 28 "$bench" --json "$logs/pass$pass.json" >/dev/null || {
    rc=$?
    echo "telos-launch-bench pass $pass failed (rc $rc)"
    exit "$rc"
  }
done
python3 - "$logs/pass1.json" "$logs/pass2.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print(f"# {a['device']}, driver {a['driver']}, {a['calls']} calls a row; host us, pass 1 / pass 2")
print(f"{'group':7} {'case':21} {'p50 1':>7} {'p50 2':>7} {'p90 1':>7} {'p90 2':>7} {'busy%':>5} {'gpu us':>7}")
gpu = {}
for r, s in zip(a["rows"], b["rows"]):
    g = f"{r['gpu_us']:7.1f}" if "gpu_us" in r else ""
    gpu[(r["group"], r["case"])] = r.get("gpu_us")
    print(f"{r['group']:7} {r['case']:21} {r['host_us_p50']:7.2f} {s['host_us_p50']:7.2f} "
          f"{r['host_us_p90']:7.2f} {s['host_us_p90']:7.2f} {r['busy_percent']:5.0f} {g}")
def p50(rows, group, case):
    return next(r["host_us_p50"] for r in rows if r["group"] == group and r["case"] == case)
print("# graph launch, ns per node from N=20 to 290 (pass 1 / pass 2):")
for build in ("plain", "pdl", "pdl8"):
    for state in ("idle", "queue2"):
        k = [(p50(x["rows"], "graph", f"{build} 290 {state}") - p50(x["rows"], "graph", f"{build} 20 {state}")) / 270e-3
             for x in (a, b)]
        print(f"#   {build:5} {state:6} {k[0]:6.1f} / {k[1]:6.1f}")
print("# GPU time a memcpy node adds to the pdl graph (us):")
for n in (36, 290):
    for kb in (4, 36, 169):
        print(f"#   {kb:3}K before {n:3} kernels: {gpu[('memnode', f'{kb}K {n} idle')] - gpu[('graph', f'pdl {n} idle')]:6.2f}")
PY
