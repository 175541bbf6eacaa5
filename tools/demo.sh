#!/usr/bin/env bash
# The README's first command, the main job end to end on the bundled default model
# (models/tiny-llama: a tiny Llama 3 with random weights and a real byte-level tokenizer):
#   1. install what is missing and build telosc and telos-run (tools/setup.sh; no Node.js),
#   2. compile the model into an artifact and inspect it,
#   3. check its greedy tokens against those transformers produced (models/tiny-llama/golden.json),
#   4. serve it (telos-run picks the GPU engine when there is a usable GPU, else the CPU reference
#      engine, and says which on stderr), send one chat request with curl, print the reply,
#   5. stop the server with SIGTERM; it is stopped too when any step fails or on Ctrl-C.
# Arguments go to telos-run generate and serve, e.g. `--engine cpu`. Exit 0 when every step did.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TELOS_BUILD:-build}
out="$build/tiny-llama.telos"
work="$build/demo"

step() { printf '\n== %s\n' "$*"; }

step "build telosc and telos-run"
bash tools/setup.sh telosc telos-run
mkdir -p "$work"

step "compile models/tiny-llama (random weights: its replies are gibberish, by design)"
"$build/bin/telosc" compile models/tiny-llama/model.json -o "$out"
"$build/bin/telosc" inspect "$out"

step "check: greedy tokens against transformers (models/tiny-llama/golden.json, case 0)"
"$build/bin/telos-run" generate "$out" --prompt-ids 1,17,42,99,256,7 --max-tokens 32 \
  --temperature 0 --ignore-eos --json "$@" > "$work/golden.jsonl"
python3 - "$work/golden.jsonl" models/tiny-llama/golden.json <<'PY'
import json, sys
got = json.loads(open(sys.argv[1]).readline())["generated_ids"]
want = json.load(open(sys.argv[2]))["cases"][0]["greedy_ids"]
if got != want:
    sys.exit(f"demo: greedy ids differ from transformers'\n  telos        {got}\n  transformers {want}")
print(f"the {len(got)} greedy ids match transformers': {' '.join(map(str, got[:8]))} ...")
PY

server=""
# SIGTERM, then up to 10 s for a clean exit (SIGKILL after that); returns the server's status.
stop_server() {
  local pid=$server rc=0
  [ -n "$pid" ] || return 0
  server=""
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "demo: the server did not stop within 10 s of SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" || rc=$?
  return "$rc"
}
trap 'stop_server || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "serve: telos-run serve on a free port of 127.0.0.1"
log="$work/serve.log"
"$build/bin/telos-run" serve "$out" --port 0 "$@" 2> "$log" &
server=$!
url=""
for _ in $(seq 600); do
  url=$(grep -o 'on http://[^ ]*' "$log" | head -n 1 | cut -c 4- || true)
  [ -n "$url" ] && break
  if ! kill -0 "$server" 2>/dev/null; then
    cat "$log" >&2
    echo "demo: telos-run serve exited before it listened" >&2
    exit 1
  fi
  sleep 0.1
done
cat "$log"
[ -n "$url" ] || { echo "demo: telos-run serve did not listen within 60 s" >&2; exit 1; }

step "chat: one request to $url/v1/chat/completions"
request='{"model": "tiny-llama", "messages": [{"role": "user", "content": "Hello! Who are you?"}], "max_tokens": 24, "temperature": 0}'
echo "\$ curl -sS $url/v1/chat/completions -H 'Content-Type: application/json' -d '$request'"
if ! curl -sS --fail-with-body --max-time 120 "$url/v1/chat/completions" \
       -H 'Content-Type: application/json' -d "$request" > "$work/reply.json"; then
  cat "$work/reply.json" >&2
  echo "demo: the chat request failed" >&2
  exit 1
fi
python3 - "$work/reply.json" <<'PY'
import json, sys
reply = json.load(open(sys.argv[1]))
print(json.dumps(reply, indent=2, ensure_ascii=False))
choice = reply["choices"][0]
print(f"\nreply ({choice['finish_reason']}, {reply['usage']['completion_tokens']} tokens; random "
      f"weights, so gibberish): {choice['message']['content']!r}")
PY

step "stop the server (SIGTERM)"
stop_server
tail -n 1 "$log"
echo
echo "demo: done. The artifact is $out; serve it with: $build/bin/telos-run serve $out"
