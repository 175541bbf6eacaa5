#!/usr/bin/env bash
# Installs what Telos needs on a fresh Debian 12 machine that has the CUDA 13 toolkit, then
# configures and builds into build/ (or $TELOS_BUILD). Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build python3 git
          nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev llvm-14-tools
          libcpp-httplib-dev libpcre2-dev libicu-dev python3-jinja2 clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

CUDA_ROOT=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_ROOT/bin/nvcc" ]; then
  echo "setup: the CUDA 13 toolkit was not found at $CUDA_ROOT (set CUDA_HOME)" >&2
  exit 2
fi
export PATH="$CUDA_ROOT/bin:$PATH"

# Node.js packages the test suites use as independent references and real clients (the openai
# SDK, Hugging Face's JS tokenizers): each test folder with a package.json gets its node_modules.
if ls test/*/package.json >/dev/null 2>&1; then
  command -v npm >/dev/null || { echo "setup: npm (Node.js 20) is needed for the client tests" >&2; exit 2; }
  for pj in test/*/package.json; do
    d=$(dirname "$pj")
    if [ ! -d "$d/node_modules" ] || [ "$pj" -nt "$d/node_modules" ]; then
      (cd "$d" && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi) >&2
      touch "$d/node_modules"
    fi
  done
fi

build=${TELOS_BUILD:-build}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCUDAToolkit_ROOT="$CUDA_ROOT" ${TELOS_CMAKE_ARGS:-} >&2
fi
cmake --build "$build" -j "$(nproc)" >&2
