#!/usr/bin/env bash
# Run on the GPU machine as .gpu-carry-host/run.sh (tools/host_gpu_prepare.sh puts it there):
#   bash .gpu-carry-host/run.sh OUT_DIR
# telos-run bench of the merge base ("base") and of branch host ("host"), alternated twice, on
# tiny-llama at max_seq_len 8448, batches 1, 64 and 256 (16-token prompts, 256 generated); then
# both generate the same mixed greedy batch, whose tokens and finish reasons must match.
# Writes OUT_DIR/log.txt and OUT_DIR/results.json; prints the table last.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/host-check}
mkdir -p "$OUT"
W=$(mktemp -d)
tar xJf "$HERE/payload.tar.xz" -C "$W"
export LD_LIBRARY_PATH="$W/lib:${LD_LIBRARY_PATH:-}"
A="$W/artifacts/tiny-llama-8k.telos"
LOG="$OUT/log.txt"
: >"$LOG"
for rep in 1 2; do
  for v in base host; do
    echo "== bench $v $rep" >>"$LOG"
    timeout 50 "$W/bin/telos-run-$v" bench "$A" --engine gpu --batch 1,64,256 --prompt-len 16 --gen 256 \
      --json >"$W/bench-$v-$rep.json" 2>>"$LOG" || echo "bench $v $rep failed: $?" >>"$LOG"
  done
done
prompts=()
for i in $(seq 0 23); do prompts+=(--prompt-ids "$((i + 1)),$((i * 7 % 50 + 2)),$((i * 13 % 60 + 1)),5"); done
for v in base host; do
  echo "== generate $v" >>"$LOG"
  timeout 20 "$W/bin/telos-run-$v" generate "$A" --engine gpu "${prompts[@]}" --max-tokens 48 --temperature 0 \
    --json >"$W/gen-$v.json" 2>>"$LOG" || echo "generate $v failed: $?" >>"$LOG"
done
python3 - "$W" "$OUT/results.json" <<'EOF'
import json, os, statistics, sys
w, out = sys.argv[1], sys.argv[2]
res = {"bench": {}, "generate_identical": None}
for v in ("base", "host"):
    for rep in (1, 2):
        p = f"{w}/bench-{v}-{rep}.json"
        if os.path.exists(p) and os.path.getsize(p):
            res["bench"].setdefault(v, []).append(json.loads(open(p).read().strip().splitlines()[-1]))
def gen(v):
    p = f"{w}/gen-{v}.json"
    if not os.path.exists(p): return None
    rows = [json.loads(l) for l in open(p) if l.strip()]
    return [(r["index"], r["generated_ids"], r["finish_reason"]) for r in rows]
gb, gh = gen("base"), gen("host")
res["generate_identical"] = gb is not None and gb == gh and len(gb) == 24
json.dump(res, open(out, "w"), indent=1)
keys = [("host_us_per_step", "host us"), ("host_us_per_step_p90", "host p90"),
        ("host_launch_calls_us_per_step", "launch us"), ("gpu_idle_gap_us", "idle us"), ("ms_per_token", "ms/tok")]
print(f"{'batch':>5} {'version':>7} " + " ".join(f"{k[1]:>9}" for k in keys) + "   (median of 2 runs)")
for b in (1, 64, 256):
    for v in ("base", "host"):
        vals = []
        for key, _ in keys:
            xs = [r[key] for run in res["bench"].get(v, []) for r in run["runs"] if r["batch"] == b and r[key] is not None]
            vals.append(f"{statistics.median(xs):9.3f}" if xs else f"{'-':>9}")
        print(f"{b:>5} {v:>7} " + " ".join(vals))
print(f"generate, 24 mixed greedy requests: tokens and finish reasons identical: {res['generate_identical']}")
EOF
rm -rf "$W"
