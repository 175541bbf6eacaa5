#!/usr/bin/env bash
# The GPU check of attn_prefill (codegen/kernels/attention_prefill.cuh), run on the GPU machine from
# the repository root with the carry folder that tools/fa_gpu_prepare.sh filled (this script is its
# run.sh):  bash .gpu-carry-fa/run.sh OUT_DIR
#   1. the PrefillAttention GPU tests (f64 reference, bit identity across chunkings and batches),
#   2. the same under compute-sanitizer memcheck and racecheck,
#   3. telos-attn-prefill-bench beside torch SDPA's backends (T = 4k, 8k, 16k; D = 128, 32/8 heads).
# Two logs in OUT_DIR (fa-tests.log, fa-bench.log); the bench table is printed last. Each step has
# its own time limit, 150 s in all.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/fa-gpu-check}
mkdir -p "$OUT"
# NVRTC for the tests (they compile their instances at run time): the toolkit's, else PyTorch's.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"  # compute-sanitizer
export TELOS_CACHE_DIR=/tmp/telos-fa-kernel-cache
LOG=$OUT/fa-tests.log BENCH=$OUT/fa-bench.log
: >"$LOG"
FILTER='--gtest_filter=*PrefillAttention*'
CS="compute-sanitizer --error-exitcode 9 --print-limit 20"
declare -a rows
step() {  # step NAME LIMIT COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name: $*" >>"$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  rows+=("$(printf '%-34s | %-8s | %4ss' "$name" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)))")
}
step "PrefillAttention tests" 30 "$C/gpu_kernels_test" "$FILTER"
step "memcheck: PrefillAttention" 35 $CS --tool memcheck "$C/gpu_kernels_test" "$FILTER"
step "racecheck: PrefillAttention" 35 $CS --tool racecheck "$C/gpu_kernels_test" "$FILTER"
t0=$SECONDS
timeout 20 "$C/telos-attn-prefill-bench" "$C/attn-prefill.cubin" >"$BENCH" 2>&1
rc=$?
rows+=("$(printf '%-34s | %-8s | %4ss' "attn_prefill bench" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)))")
t0=$SECONDS
timeout 25 python3 "$C/attention_prefill_torch.py" "$BENCH" >>"$BENCH" 2>&1
rc=$?
rows+=("$(printf '%-34s | %-8s | %4ss' "torch SDPA side" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)))")

echo
grep -hE "^\[  (FAILED|SKIPPED) |ERROR SUMMARY|RACECHECK SUMMARY|Failure|error:|Expected|Which is|vs |token " "$LOG" | head -30
echo
printf '%-34s | %-8s | %5s\n' step result time
for r in "${rows[@]}"; do echo "$r"; done
echo
grep -v '^\s*$' "$BENCH" | tail -12
