#!/usr/bin/env bash
# Branch qs's GPU check, run on the GPU machine from the repository root after
# tools/qs_gpu_prepare.sh filled .gpu-carry-qs (this file is its run.sh):
#   bash .gpu-carry-qs/run.sh DIR
#  1. gpu_kernels_test's three PrefillAttention tests (f64 reference, batch invariance, Q_SPLIT
#     against bf16 Q on sharp scores), each in its own process at once: each compiles its
#     instances with NVRTC (45 in all, most of the time) -> DIR/qs-tests.log
#  2. then alone on the GPU, telos-attn-prefill-bench (plain order, plain order with Q_SPLIT,
#     overlaps; T = 4k, 8k, 16k) -> DIR/qs-bench.log
# Under 120 s (timeouts 75 + 40). Prints a table last.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: run.sh DIR}
mkdir -p "$OUT"
# NVRTC as tools/gpu_check.sh finds it: the toolkit's, else the one PyTorch's wheels carry.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache-qs
tmp=$(mktemp -d)
tests=(MatchesF64 IsBatchInvariant QSplitKeepsSharpScores)
pids=()
t0=$SECONDS
for t in "${tests[@]}"; do
  timeout 75 "$C/bin/gpu_kernels_test" --gtest_filter="GpuKernels.PrefillAttention$t" >"$tmp/$t.log" 2>&1 &
  pids+=($!)
done
results=()
for i in "${!tests[@]}"; do
  wait "${pids[$i]}"
  rc=$?
  if [ $rc != 0 ]; then results+=("FAIL:$rc")
  elif grep -q "^\[  SKIPPED \]" "$tmp/${tests[$i]}.log"; then results+=(skipped)
  else results+=(pass); fi
done
t_tests=$((SECONDS - t0))
for t in "${tests[@]}"; do cat "$tmp/$t.log"; done >"$OUT/qs-tests.log"
t0=$SECONDS
timeout 40 "$C/bin/telos-attn-prefill-bench" "$C/attn-prefill.cubin" >"$OUT/qs-bench.log" 2>&1
brc=$?
t_bench=$((SECONDS - t0))
rm -rf "$tmp"

echo
grep -h "attn_prefill rel L2" "$OUT/qs-tests.log"
grep -hE "^\[  FAILED  \]|Failure|error" "$OUT/qs-tests.log" | head -20
echo
echo "attn_prefill, Llama-3.1-8B heads (32/8, D 128), TFLOP/s = 4 T^2 D HQ / 2 / time:"
awk '$1 == "telos" { t = $3; f = 4.0 * t * t * $6 * $4 / 2 / $7 / 1e9;
       printf "%-28s T=%-6d %8.3f ms %6.0f TFLOP/s  rel err %s\n", $2, t, $7, f, $8 }' "$OUT/qs-bench.log"
echo
printf '%-44s | %s\n' check result
for i in "${!tests[@]}"; do
  printf '%-44s | %s\n' "PrefillAttention${tests[$i]}" "${results[$i]}"
done
printf '%-44s | %s\n' "tests wall time" "${t_tests}s" "telos-attn-prefill-bench" \
  "$([ $brc = 0 ] && echo pass || echo "FAIL:$brc") (${t_bench}s)"
