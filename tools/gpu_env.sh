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
# NCCL (the tensor-parallel engine's bootstrap and large messages, executor/gpu/nccl_library.hpp,
# opened at run time): the toolkit's or the system's libnccl.so.2, else the one PyTorch's wheel
# carries (nvidia/nccl/lib).
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  for d in /usr/local/cuda/lib /usr/local/cuda/lib64 \
           $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "nccl", "lib") for p in nvidia.__path__))' 2>/dev/null); do
    if [ -f "$d/libnccl.so.2" ]; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
  done
fi
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"  # compute-sanitizer
P=/tmp/telos-gpu-check-payload
rm -rf "$P" && mkdir -p "$P" && tar -C "$P" -xJf "$CARRY/payload.tar.xz"
export LD_LIBRARY_PATH="$P/lib:$LD_LIBRARY_PATH"
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache TELOS_GPU_ARTIFACTS=$P/artifacts TELOS_SOURCE_DIR=$PWD
B=$PWD/$CARRY/bin
# The kernel cache a previous GPU run packed (pack_kernel_cache), carried by --prepare as
# $CARRY/kernel-cache.tar.xz: NVRTC is the same build on both machines, so its entries hit and the
# tests' and benches' modules are not compiled again (~90 s of a gpu_check on a fresh machine).
# Entries are keyed by their whole input (source, headers, NVRTC version, options): a stale one
# is never read. The marker is the time after unpacking: entries read or written later are this
# run's.
mkdir -p "$TELOS_CACHE_DIR"
[ -f "$CARRY/kernel-cache.tar.xz" ] && tar -C "$TELOS_CACHE_DIR" -xJf "$CARRY/kernel-cache.tar.xz"
KERNEL_CACHE_MARK=$(mktemp) && export KERNEL_CACHE_MARK
# pack_kernel_cache FILE: the cache entries this run used (read or compiled since the marker), as
# one tarball for the next --prepare (tools/gpu_check.sh: $OUT/kernel-cache.tar.xz).
pack_kernel_cache() {
  local names
  names=$(cd "$TELOS_CACHE_DIR" && find . -mindepth 1 -maxdepth 1 -type d ! -name '*.tmp.*' \
            -newer "$KERNEL_CACHE_MARK" | sort)
  [ -n "$names" ] || return 0
  # shellcheck disable=SC2086  # entry names are hex digits
  tar -C "$TELOS_CACHE_DIR" -cJf "$1" $names &&
    echo "kernel cache: $(echo "$names" | wc -l) entries, $(du -h "$1" | cut -f1) packed in $1"
}
