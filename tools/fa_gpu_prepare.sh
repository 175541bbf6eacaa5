#!/usr/bin/env bash
# Builds what the GPU check of attn_prefill needs and fills /work/main/.gpu-carry-fa (git-ignored
# there): gpu_kernels_test (run filtered to the PrefillAttention tests; the kernel headers are
# embedded in it and compiled by NVRTC there), telos-attn-prefill-bench with its instance compiled
# here, the torch SDPA script, and run.sh (tools/fa_gpu_run.sh). On the GPU machine, from the
# repository root:  bash .gpu-carry-fa/run.sh "$OUT/fa"
#
#   tools/fa_gpu_prepare.sh [BUILD_DIR]   (default build-fa)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-fa}
CARRY=/work/main/.gpu-carry-fa
cmake --build "$BUILD" --target gpu_kernels_test telos-attn-prefill-bench -j2
rm -rf "$CARRY" && mkdir -p "$CARRY"
cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/telos-attn-prefill-bench" "$CARRY/"
strip "$CARRY/gpu_kernels_test" "$CARRY/telos-attn-prefill-bench"
"$BUILD/bin/telos-attn-prefill-bench" --compile-only "$CARRY/attn-prefill.cubin"
cp codegen/bench/attention_prefill_torch.py "$CARRY/"
cp tools/fa_gpu_run.sh "$CARRY/run.sh"
du -sh "$CARRY"
