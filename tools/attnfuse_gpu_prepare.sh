#!/usr/bin/env bash
# The GPU check of the fused attention (attn_split merging its own slots; no attn_combine), for a
# GPU machine that receives main's tree plus one carry folder:
#   1. the attention kernel tests (gpu_kernels_test --gtest_filter='*Attention*': f64 reference,
#      second launch and row alone bit-identical, TPT 1 / 2 / 16/G bit-identical, arrival counters
#      back to zero after every launch),
#   2. the tiny models end to end (gpu_model_test) on artifacts compiled here with this branch's
#      kernels: the committed buckets and one 128-token prefill bucket (tiles of TPT > 1),
#   3. compute-sanitizer racecheck, synccheck and memcheck on the small attention test,
#   4. telos-kernel-bench --attention (decode, Llama-3.1-8B's head shape, ctx 4k / 8k / 32k at
#      batch 1 / 16 / 64, and the prefill tile rows).
# Two logs (tests.log, bench.log) in the directory given; a table last. Each step has a time
# limit; together they stay under 150 s.
#
#   tools/attnfuse_gpu_prepare.sh [BUILD_DIR]    here: builds in BUILD_DIR (default build-af),
#                                                fills /work/main/.gpu-carry-attnfuse/
#   bash .gpu-carry-attnfuse/run.sh "$OUT/attnfuse"   on the GPU machine, from the repository root
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-af}
CARRY=/work/main/.gpu-carry-attnfuse

cmake --build "$BUILD" --target telosc gpu_kernels_test gpu_model_test telos-kernel-bench -j2
rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/stage/artifacts" "$CARRY/stage/artifacts-p128"
p128=$(mktemp)
echo '{"max_batch": 8, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 128},
       "prefill_chunk": 128, "prefill_buckets": [128]}' >"$p128"
for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
  name=$(basename "$m")
  "$BUILD/bin/telosc" compile "$m" -o "$CARRY/stage/artifacts/$name.telos"
  "$BUILD/bin/telosc" compile "$m" --serving "$p128" -o "$CARRY/stage/artifacts-p128/$name.telos"
done
rm -f "$p128"
cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/gpu_model_test" "$BUILD/bin/telos-kernel-bench" "$CARRY/bin/"
strip "$CARRY"/bin/*
tar cJf "$CARRY/artifacts.tar.xz" -C "$CARRY/stage" artifacts artifacts-p128
rm -rf "$CARRY/stage"

cat >"$CARRY/run.sh" <<'EOF'
#!/usr/bin/env bash
# Fused attention GPU check (tools/attnfuse_gpu_prepare.sh on branch attnfuse wrote this).
set -uo pipefail
LOGS=${1:-/tmp/attnfuse}
C=$(dirname "$0")
mkdir -p "$LOGS"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
P=/tmp/attnfuse-payload
rm -rf "$P" && mkdir -p "$P" && tar -C "$P" -xJf "$C/artifacts.tar.xz"
export TELOS_CACHE_DIR=/tmp/attnfuse-kernel-cache TELOS_SOURCE_DIR=$PWD
T="$LOGS/tests.log"
: >"$T"
declare -a rows
run() {  # run NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  printf '=== %s\n$ %s\n' "$name" "$*" >>"$T"
  timeout "$limit" "$@" >>"$T" 2>&1
  local rc=$?
  rows+=("$(printf '%-40s | %-7s | %4ss' "$name" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)))")
}
run "attention kernels vs f64, bit identity" 45 "$C/bin/gpu_kernels_test" --gtest_filter='*Attention*'
run "tiny models vs transformers" 12 env TELOS_GPU_ARTIFACTS="$P/artifacts" "$C/bin/gpu_model_test"
run "tiny models, prefill bucket 128" 12 env TELOS_GPU_ARTIFACTS="$P/artifacts-p128" "$C/bin/gpu_model_test"
CS="compute-sanitizer --error-exitcode 9 --print-limit 20"
SMALL=--gtest_filter='*PagedAttentionSplitAndMerge*'
run "racecheck: attention" 22 $CS --tool racecheck "$C/bin/gpu_kernels_test" "$SMALL"
run "synccheck: attention" 12 $CS --tool synccheck "$C/bin/gpu_kernels_test" "$SMALL"
run "memcheck: attention" 12 $CS --tool memcheck "$C/bin/gpu_kernels_test" "$SMALL"
t0=$SECONDS
timeout 28 "$C/bin/telos-kernel-bench" --attention >"$LOGS/bench.log" 2>&1
rows+=("$(printf '%-40s | %-7s | %4ss' "kernel bench (attention)" "rc=$?" $((SECONDS - t0)))")

echo
grep -hE "^=== |^\[  (PASSED|SKIPPED|FAILED) *\] [0-9]+ test|^\[  FAILED  \] [A-Za-z]|ERROR SUMMARY|RACECHECK SUMMARY" "$T"
echo
grep -v '^\s*$' "$LOGS/bench.log" | tail -14
echo
printf '%-40s | %-7s | %5s\n' check result time
for r in "${rows[@]}"; do echo "$r"; done
EOF
chmod +x "$CARRY/run.sh"
du -sh "$CARRY"
