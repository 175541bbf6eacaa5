#!/usr/bin/env bash
# Builds the GPU check of the tensor-core decode GEMM (branch gemm) and fills the carry folder the
# lead sends to the GPU machine with main's tree:
#   CARRY/bin         gpu_kernels_test, gpu_model_test, telos-kernel-bench (stripped; the kernel
#                     headers are embedded in them, so main's older codegen/kernels do not matter)
#   CARRY/artifacts   the three tiny models compiled by this branch's telosc
#   CARRY/run.sh      the check itself (tools/gemm_gpu_run.sh)
#
#   tools/gemm_gpu_prepare.sh [BUILD_DIR [CARRY]]   defaults: build-gemm, /work/main/.gpu-carry-gemm
# On the GPU machine, from the repository root:  bash .gpu-carry-gemm/run.sh "$OUT/gemm"
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gemm}
CARRY=${2:-/work/main/.gpu-carry-gemm}

cmake --build "$BUILD" --target telosc gpu_kernels_test gpu_model_test telos-kernel-bench -j2
rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/artifacts"
for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
  "$BUILD/bin/telosc" compile "$m" -o "$CARRY/artifacts/$(basename "$m").telos"
done
cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/gpu_model_test" "$BUILD/bin/telos-kernel-bench" "$CARRY/bin/"
strip "$CARRY"/bin/*
cp tools/gemm_gpu_run.sh "$CARRY/run.sh"
du -sh "$CARRY"
