#!/usr/bin/env bash
# Builds telos-launch-bench (issue 5) here and fills /work/main/.gpu-carry-glb/ with what the H200
# run needs: the stripped binary and run.sh (tools/glb_gpu_run.sh). On the GPU machine, from the
# repository root:  bash .gpu-carry-glb/run.sh "$OUT/glb"
#
#   tools/glb_gpu_prepare.sh [BUILD] [CARRY]   (defaults build-glb, /work/main/.gpu-carry-glb)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-glb}
carry=${2:-/work/main/.gpu-carry-glb}
[ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja -DTELOS_FUZZ=OFF >&2
cmake --build "$build" --target telos-launch-bench -j2 >&2
rm -rf "$carry" && mkdir -p "$carry"
cp "$build/bin/telos-launch-bench" "$carry/"
strip "$carry/telos-launch-bench"
cp tools/glb_gpu_run.sh "$carry/run.sh"
du -sh "$carry" >&2
