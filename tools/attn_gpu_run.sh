#!/usr/bin/env bash
# The GPU check of the attention branch (copied to .gpu-carry-attn/run.sh by
# tools/attn_gpu_prepare.sh), run from the repository root on the GPU machine:
#   bash .gpu-carry-attn/run.sh OUT_DIR
# All kernel tests, the tiny models against transformers, memcheck and racecheck on the
# attention test, the kernel bench. Writes OUT_DIR/run.log (everything) and OUT_DIR/summary.txt
# (the table printed last).
set -uo pipefail
CARRY=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: run.sh OUT_DIR}
mkdir -p "$OUT"
LOG=$OUT/run.log
: >"$LOG"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
command -v compute-sanitizer >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache-attn TELOS_GPU_ARTIFACTS=$CARRY/artifacts TELOS_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$LOG" 2>&1

declare -a rows
step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "==== $name: $*" >>"$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  rows+=("$(printf '%-36s | %-7s | %4ss' "$name" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)))")
}
CS="compute-sanitizer --error-exitcode 9 --print-limit 20"
step "kernels vs f64 references" 35 "$CARRY/bin/gpu_kernels_test"
step "tiny models vs transformers" 25 "$CARRY/bin/gpu_model_test"
step "memcheck: attention" 20 $CS --tool memcheck "$CARRY/bin/gpu_kernels_test" --gtest_filter='*Attention*'
step "racecheck: attention" 20 $CS --tool racecheck "$CARRY/bin/gpu_kernels_test" --gtest_filter='*Attention*'
# Line-buffered, so rows printed before a time-out are kept.
step "kernel bench" 50 stdbuf -oL "$CARRY/bin/telos-kernel-bench"

{
  echo
  grep -hE "^\[  (PASSED|FAILED|SKIPPED) +\] [^(]*$|ERROR SUMMARY|RACECHECK SUMMARY" "$LOG" | sort | uniq -c | head -20
  echo
  grep -E "^kernel |^cudaMemcpy|^attn" "$LOG"
  echo
  printf '%-36s | %-7s | %5s\n' check result time
  for r in "${rows[@]}"; do echo "$r"; done
} | tee "$OUT/summary.txt"
