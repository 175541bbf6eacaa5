#!/usr/bin/env bash
# Fills /work/main/.gpu-carry-attn/ for the GPU check of the attention branch: the kernel and
# model tests, the kernel bench, the three tiny models compiled by this branch's telosc, and
# run.sh (from tools/attn_gpu_run.sh). On the GPU machine, from /work/main's tree:
#   bash .gpu-carry-attn/run.sh "$OUT/attn"
#   tools/attn_gpu_prepare.sh [BUILD_DIR]   (default build-attn)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-attn}
CARRY=/work/main/.gpu-carry-attn
cmake --build "$BUILD" --target telosc gpu_kernels_test gpu_model_test telos-kernel-bench -j2
rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/artifacts"
for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
  "$BUILD/bin/telosc" compile "$m" -o "$CARRY/artifacts/$(basename "$m").telos"
done
cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/gpu_model_test" "$BUILD/bin/telos-kernel-bench" "$CARRY/bin/"
strip "$CARRY"/bin/*
cp tools/attn_gpu_run.sh "$CARRY/run.sh"
du -sh "$CARRY"
