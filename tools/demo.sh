#!/usr/bin/env bash
# The README's first command: install what is missing, build, compile the bundled default model,
# and generate with it: on the GPU when there is one, else on the CPU reference engine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
build=${TELOS_BUILD:-build}
out="$build/tiny-llama.telos"
"$build/bin/telosc" compile models/tiny-llama/model.json -o "$out"
"$build/bin/telosc" inspect "$out"
# The prompt of the first golden case, greedy: the ids printed are those of
# models/tiny-llama/golden.json (cases[0].greedy_ids), which transformers produced. The engine is
# chosen by telos-run (GPU if present, else the CPU reference engine, said on stderr).
"$build/bin/telos-run" generate "$out" --prompt-ids 1,17,42,99,256,7 --max-tokens 32 \
  --temperature 0 --ignore-eos "$@"
