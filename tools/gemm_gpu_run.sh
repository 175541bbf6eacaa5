#!/usr/bin/env bash
# The GPU check of the tensor-core decode GEMM, run from the repository root on the GPU machine with
# the carry folder beside it (tools/gemm_gpu_prepare.sh fills it):
#   1. every kernel template against f64 references, GEMM batch invariance included (its NVRTC
#      compiles fill the cache that the memcheck step then reuses),
#   2. the tiny models end to end against transformers' golden outputs,
#   3. compute-sanitizer memcheck on the GEMM kernel tests,
#   4. telos-kernel-bench (GEMM rows at M = 1, 8, 64 next to the copy bandwidth).
# Two logs in OUT_DIR (checks.log, bench.log); the bench table and a result table last.
#   bash .gpu-carry-gemm/run.sh OUT_DIR
set -uo pipefail
CARRY=$(cd "$(dirname "$0")" && pwd)
OUT_DIR=${1:-/tmp/telos-gemm-check}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/checks.log
: >"$LOG"

# NVRTC for the kernel tests: the toolkit's, else the one PyTorch's wheels carry.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache-gemm TELOS_GPU_ARTIFACTS=$CARRY/artifacts TELOS_SOURCE_DIR=$PWD

declare -a rows
step() {  # step NAME SECONDS LOGFILE COMMAND...
  local name=$1 limit=$2 log=$3; shift 3
  local t0=$SECONDS
  echo "==== $name: $*" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  rows+=("$(printf '%-34s | %-7s | %4ss' "$name" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)))")
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$LOG" 2>&1
step "kernels vs f64 references" 75 "$LOG" "$CARRY/bin/gpu_kernels_test"
step "tiny models vs transformers" 22 "$LOG" "$CARRY/bin/gpu_model_test"
step "memcheck: GEMM kernel tests" 28 "$LOG" compute-sanitizer --error-exitcode 9 --print-limit 20 \
    --tool memcheck "$CARRY/bin/gpu_kernels_test" --gtest_filter='*Linear*:*GateUp*:*Qkv*'
step "kernel timings" 25 "$OUT_DIR/bench.log" "$CARRY/bin/telos-kernel-bench"

echo
grep -hE "^\[  (FAILED|SKIPPED) |ERROR SUMMARY|^\[  PASSED" "$LOG" | sort | uniq -c | head -20
echo
grep -E "linear_f32|qkv_rope|cudaMemcpy|^kernel" "$OUT_DIR/bench.log"
echo
printf '%-34s | %-7s | %s\n' check result time
for r in "${rows[@]}"; do echo "$r"; done
