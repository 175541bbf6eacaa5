#!/usr/bin/env bash
# Node.js for the test command's client suites: test/server (the official openai SDK and raw HTTP
# clients against telos-run serve) and test/tokenizer (Hugging Face's JS tokenizers and Jinja as
# references). The demo needs none of this.
#
# They run on Node.js 18 or newer (Debian 12's own nodejs is 18.19; every suite passes on 18.20
# and 20). Where no node that new is on PATH, the distribution's nodejs and npm are installed
# (tools/install_packages.sh); where apt offers none that new either, this says what to install and
# exits 2. Then each test folder with a package.json gets its node_modules (npm ci, from its
# package-lock.json).
set -euo pipefail
cd "$(dirname "$0")/.."
min_node=18

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if ! command -v node >/dev/null || (($(node_major) < min_node)); then
  apt_major=$(apt-cache policy nodejs 2>/dev/null | awk '/Candidate:/ { split($2, v, "."); print v[1] + 0 }')
  if command -v node >/dev/null || ((${apt_major:-0} < min_node)); then
    if command -v node >/dev/null; then
      found="this node is $(node --version) ($(command -v node))"
    else
      found="there is no node on PATH, and apt offers nodejs ${apt_major:-none}"
    fi
    cat >&2 <<MSG
setup: the client tests need Node.js $min_node or newer, with npm; $found.
  Install it (Debian 12: apt-get install nodejs npm; elsewhere https://nodejs.org/en/download),
  put it first on PATH, and run this command again.
MSG
    exit 2
  fi
  bash tools/install_packages.sh nodejs
fi
command -v npm >/dev/null || bash tools/install_packages.sh npm

for pj in test/*/package.json; do
  d=$(dirname "$pj")
  if [ ! -d "$d/node_modules" ] || [ "$pj" -nt "$d/node_modules" ] ||
     [ "$d/package-lock.json" -nt "$d/node_modules" ]; then
    (cd "$d" && npm ci --no-audit --no-fund) >&2
    touch "$d/node_modules"
  fi
done
