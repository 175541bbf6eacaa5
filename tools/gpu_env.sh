# Sourced on the GPU machine, from the repository root, with .gpu-carry/ carried along (filled by
# `tools/gpu_check.sh --prepare BUILD_DIR` on the build machine): finds NVRTC (the toolkit's, else
# the one PyTorch's wheels carry; the kernel tests and benches compile instances at run time),
# puts compute-sanitizer on PATH, unpacks the payload (telos-run's shared libraries, the tiny
# models' artifacts) into $P and exports what the binaries read. Then $B holds the binaries.
# tools/gpu_check.sh sources it; a one-off check in one GPU call can too, e.g.
#   source tools/gpu_env.sh || exit 1
#   python3 tools/e2e_check.py --telosc "$B/telosc" --telos-run "$B/telos-run" --work /tmp/e2e \
#     --out "$OUT/e2e" --models Llama-3.2-1B
#   "$B/telos-kernel-bench" --decode-layer
CARRY=${CARRY:-.gpu-carry}
# Without the carry folder nothing below can work: say so and stop before a call spends its device
# time on errors (a call without `carry` once ran a whole benchmark script for nothing).
if [ ! -f "$CARRY/payload.tar.xz" ] || [ ! -d "$CARRY/bin" ]; then
  echo "gpu_env.sh: $CARRY/payload.tar.xz or $CARRY/bin is missing: carry $CARRY along (run's carry)" \
       "after tools/gpu_check.sh --prepare" >&2
  return 1 2>/dev/null || exit 1
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"  # compute-sanitizer
P=/tmp/telos-gpu-check-payload
rm -rf "$P" && mkdir -p "$P" && tar -C "$P" -xJf "$CARRY/payload.tar.xz"
export LD_LIBRARY_PATH="$P/lib:$LD_LIBRARY_PATH"
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache TELOS_GPU_ARTIFACTS=$P/artifacts TELOS_SOURCE_DIR=$PWD
B=$PWD/$CARRY/bin
