#!/usr/bin/env bash
# Branch qs's GPU check (attn_prefill with Q_SPLIT), built here and handed to the GPU machine, which
# receives main's tree plus the carry folder (so everything of this branch the run needs is in it):
#   tools/qs_gpu_prepare.sh [BUILD_DIR] [CARRY]   on the build machine (defaults build-qs and
#                                                  /work/main/.gpu-carry-qs): builds
#                                                  gpu_kernels_test and telos-attn-prefill-bench,
#                                                  copies them stripped, compiles the bench's cubin
#                                                  and puts tools/qs_gpu_run.sh there as run.sh
#   bash .gpu-carry-qs/run.sh DIR                  on the GPU machine, from the repository root
# gpu_kernels_test compiles its kernels at run time from the headers embedded in it at build time
# (codegen/embed_headers.cmake), so main's older attention_prefill.cuh on the GPU machine is not
# read; the bench loads the cubin compiled here.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-qs}
CARRY=${2:-/work/main/.gpu-carry-qs}
cmake --build "$BUILD" --target gpu_kernels_test telos-attn-prefill-bench -j2
rm -rf "$CARRY" && mkdir -p "$CARRY/bin"
cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/telos-attn-prefill-bench" "$CARRY/bin/"
strip "$CARRY"/bin/*
"$BUILD/bin/telos-attn-prefill-bench" --compile-only "$CARRY/attn-prefill.cubin"
cp tools/qs_gpu_run.sh "$CARRY/run.sh"
du -sh "$CARRY"
