#!/usr/bin/env bash
# The SASS of a Blackwell (sm_100a) GEMM cubin, checked kernel by kernel (tools/sass_check.py, with
# the checks of tools/sass_check.patterns): per kernel, whether its MMA loop issues the tcgen05 MMA
# (UTCHMMA / UTCQMMA) and its commit (UTCBAR), its producer loop TMA loads (UTMALDG), its epilogue
# loop Tensor Memory loads (LDTM), and whether it touches local memory. Runs where a CUDA toolkit
# has nvdisasm or cuobjdump (the GPU machine; the build machine has neither):
#
#   tools/sass_check.sh CUBIN [--loops]
#   tools/sass_check.sh --artifact DIR [--loops]
#
# e.g. on the cubins of build/test/codegen's prefill_sm100_assemble -o DIR CONFIG... (DIR/module_N
# .cubin). --artifact DIR checks DIR/kernels/sm_100a.cubin, every kernel of an artifact's sm_100a
# set, with tools/sass_check_artifact.patterns (each GEMM's and the prefill attention's tcgen05
# MMAs, commits, TMA loads and Tensor Memory loads; no wgmma and no local memory anywhere). --loops
# also prints every loop's summary line. Exit code: 0 every check passes, 1 one fails, 2 usage error, no
# disassembler or no kernel.
set -euo pipefail
here=$(cd "${0%/*}" && pwd)
patterns="$here/sass_check.patterns"
if [ "${1:-}" = --artifact ] && [ $# -ge 2 ]; then
  set -- "$2/kernels/sm_100a.cubin" "${@:3}"
  patterns="$here/sass_check_artifact.patterns"
fi
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: tools/sass_check.sh CUBIN [--loops] | --artifact DIR [--loops]" >&2
  echo "  (an artifact's set: DIR/kernels/sm_100a.cubin, from telosc compile --target sm_100a)" >&2
  exit 2
fi
cubin=$1
shift
PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
if command -v nvdisasm >/dev/null; then
  disassemble=(nvdisasm -c "$cubin")
elif command -v cuobjdump >/dev/null; then
  disassemble=(cuobjdump -sass "$cubin")
else
  echo "sass_check: neither nvdisasm nor cuobjdump on PATH (a CUDA toolkit's bin)" >&2
  exit 2
fi
text=$(mktemp)
trap 'rm -f "$text"' EXIT
"${disassemble[@]}" >"$text"
python3 "$here/sass_check.py" --patterns "$patterns" "$@" "$text"
