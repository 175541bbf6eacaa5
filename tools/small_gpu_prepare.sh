#!/usr/bin/env bash
# GPU check of the small-M wgmma GEMM (issue 4: one GEMM family for every bucket), prepared on the
# build machine (no GPU needed):
#   tools/small_gpu_prepare.sh [BUILD_DIR] [CARRY_DIR]
# builds telosc, gpu_kernels_test, gpu_model_test and telos-kernel-bench in BUILD_DIR (default
# build-small), compiles the three tiny models twice into CARRY_DIR (as committed, and with a
# single 128-token prefill bucket, so prompts run the prefill GEMM and decode the small GEMM: the
# "alone vs mixed batch" checks then compare rows across the two GEMMs), and writes CARRY_DIR/run.sh,
# which runs on the GPU machine from the repository root:  bash .gpu-carry-small/run.sh "$OUT/small"
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-small}
CARRY=${2:-/work/main/.gpu-carry-small}
cmake --build "$BUILD" --target telosc gpu_kernels_test gpu_model_test telos-kernel-bench -j2
rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/artifacts" "$CARRY/artifacts-p128"
serving=$(mktemp)
cat >"$serving" <<'JSON'
{"max_batch": 8, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 128},
 "prefill_chunk": 128, "prefill_buckets": [128], "targets": ["sm_90a"]}
JSON
for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
  name=$(basename "$m")
  "$BUILD/bin/telosc" compile "$m" -o "$CARRY/artifacts/$name.telos"
  "$BUILD/bin/telosc" compile "$m" --serving "$serving" -o "$CARRY/artifacts-p128/$name.telos"
done
rm -f "$serving"
# The artifacts' PTX is most of their size and compresses well; run.sh unpacks them to /tmp.
tar -C "$CARRY" -cJf "$CARRY/artifacts.tar.xz" artifacts artifacts-p128
rm -rf "$CARRY/artifacts" "$CARRY/artifacts-p128"
cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/gpu_model_test" "$BUILD/bin/telos-kernel-bench" "$CARRY/bin/"
strip "$CARRY"/bin/*
cp tools/small_gpu_run.sh "$CARRY/run.sh"
du -sh "$CARRY"
echo 'GPU command (repository root): bash .gpu-carry-small/run.sh "$OUT/small"'
