#!/usr/bin/env bash
# The main job: build DeltaServe, start a CPU worker with a model and the router on 127.0.0.1,
# wait until the router is ready, and stream one chat answer through the OpenAI API, printed as
# text as it arrives (the curl command that asks for it is shown for copying; the raw SSE stream
# is kept in the logs directory). Then keep serving until Ctrl-C, which drains both processes and
# exits cleanly.
#
# Usage: deploy/run-demo.sh [--model PATH.gguf] [--prompt TEXT] [--once] [--threads N]
#                           [--bin BUILD_DIR] [--logs DIR]
#   --model   a Qwen3.5 GGUF file; without it a random-weight model with the real 0.8B shapes is
#             made once with deltaserve-synth (build/demo/synth-0.8b-q4_k_m.gguf, ~430 MB), so its
#             answer is fluent-looking nonsense: the point is the path, not the text
#   --once    stop after the sample answer instead of serving until Ctrl-C
#   --bin     use the programs of this build tree instead of building the release preset
#   --logs    where the logs and the raw answer stream go (default build/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
golden=${DELTASERVE_GOLDEN_DIR:-$repo/../shared/golden}
model=""
prompt="Write a haiku about recurrent state."
once=0
threads=$(nproc)
bin=""
logs=$repo/build/demo
usage() {
  sed -n '/^# Usage:/,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --once) once=1; shift ;;
    --threads) threads=$2; shift 2 ;;
    --bin) bin=$(cd "$2" && pwd); shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run-demo: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

if [[ -z "$bin" ]]; then
  echo "== building (release preset)"
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target deltaserve-worker deltaserve-router \
    deltaserve-synth
  bin=$repo/build/release
fi

if [[ -z "$model" ]]; then
  model=$repo/build/demo/synth-0.8b-q4_k_m.gguf
  if [[ ! -f "$model" ]]; then
    echo "== no --model given: making a random-weight 0.8B model once ($model)"
    mkdir -p "$(dirname "$model")"
    "$bin/worker/deltaserve-synth" --preset 0.8b --type q4_k_m \
      --vocab-from "$golden/qwen3-vocab-qwen35pre.gguf" -o "$model.tmp"
    mv "$model.tmp" "$model"
  fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
worker_port=$(free_port)
router_port=$(free_port)
mkdir -p "$logs"

"$bin/worker/deltaserve-worker" --model "demo=$model" --listen "127.0.0.1:$worker_port" \
  --device cpu --threads "$threads" --ctx 4096 --parallel 4 --metrics-port 0 \
  2> "$logs/worker.log" &
worker_pid=$!
router_pid=""
stop() {
  trap - INT TERM EXIT
  echo
  echo "== stopping: the router and the worker drain, then exit"
  if [[ -n "$router_pid" ]]; then
    kill -TERM "$router_pid" 2>/dev/null || true
    wait "$router_pid" 2>/dev/null || true
  fi
  kill -TERM "$worker_pid" 2>/dev/null || true
  wait "$worker_pid" 2>/dev/null || true
  echo "== stopped (logs: $logs/worker.log, $logs/router.log)"
}
trap stop INT TERM EXIT

echo "== worker on 127.0.0.1:$worker_port (log: $logs/worker.log), loading $model"
"$bin/router/deltaserve-router" --listen "127.0.0.1:$router_port" \
  --worker "127.0.0.1:$worker_port" 2> "$logs/router.log" &
router_pid=$!

echo "== router on 127.0.0.1:$router_port: waiting until ready"
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$router_port/ready" >/dev/null; then break; fi
  if ! kill -0 "$worker_pid" 2>/dev/null || ! kill -0 "$router_pid" 2>/dev/null; then
    echo "run-demo: a process exited; last lines of the logs:" >&2
    tail -n 20 "$logs/worker.log" "$logs/router.log" >&2
    exit 1
  fi
  sleep 0.5
done
curl -sf "http://127.0.0.1:$router_port/ready" >/dev/null || { echo "run-demo: not ready" >&2; exit 1; }

body=$(python3 -c 'import json,sys; print(json.dumps({"model": "demo", "stream": True,
  "max_tokens": 48, "messages": [{"role": "user", "content": sys.argv[1]}]}))' "$prompt")
# The text of an OpenAI chat stream as it arrives: each `data:` event's delta (reasoning first,
# marked, then the answer); the stream's own error event, if any, on stderr with exit 1.
stream_text() {
  PYTHONIOENCODING=utf-8 python3 -u -c '
import json, sys
part = None
while True:
    line = sys.stdin.readline()
    if not line:
        break
    if not line.startswith("data:"):
        continue
    data = line[5:].strip()
    if data == "[DONE]":
        break
    try:
        event = json.loads(data)
    except ValueError:
        continue
    if "error" in event:
        print("\nerror: " + str(event["error"].get("message")), file=sys.stderr)
        sys.exit(1)
    for choice in event.get("choices", []):
        delta = choice.get("delta") or {}
        for key, label in (("reasoning_content", "[thinking] "), ("content", "[answer] ")):
            text = delta.get(key)
            if not text:
                continue
            if part != key and (part is not None or key == "reasoning_content"):
                sys.stdout.write(("\n" if part else "") + label)
            part = key
            sys.stdout.write(text)
            sys.stdout.flush()
print()
'
}

echo "== POST /v1/chat/completions (stream): $prompt"
echo "\$ curl -N http://127.0.0.1:$router_port/v1/chat/completions \\"
echo "    -H 'Content-Type: application/json' -d '$body'"
curl -sN "http://127.0.0.1:$router_port/v1/chat/completions" \
  -H 'Content-Type: application/json' -d "$body" | tee "$logs/answer.sse" | stream_text
echo "== (the raw SSE stream: $logs/answer.sse)"

if [[ $once -eq 1 ]]; then exit 0; fi
echo "== serving the OpenAI API on http://127.0.0.1:$router_port/v1 (model \"demo\"); Ctrl-C stops"
wait "$router_pid"
