#!/usr/bin/env bash
# The main job, for now: build the release tools, then show what DeltaServe reads from a model
# file (GGUF summary and layer plan) and a tokenization round trip with that file's tokenizer.
# Later issues turn this into router + CPU worker + a sample OpenAI request.
# Usage: deploy/run-demo.sh [MODEL.gguf] [TEXT]
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-${DELTASERVE_GOLDEN_DIR:-../shared/golden}/tiny-moe-f32.gguf}
text=${2:-"Hello, 世界! <think>Let me think.</think> 🦙"}

cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target deltaserve-gguf
gguf=build/release/common/deltaserve-gguf

echo "== $gguf info $model (summary)"
"$gguf" info "$model" | sed -n '1,2p;/^totals by type/,$p'
echo
echo "== tokenize: $text"
"$gguf" tokenize "$model" "$text"
ids=$("$gguf" tokenize "$model" "$text" --json | python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["ids"])))')
echo
echo "== detokenize: $ids"
"$gguf" detokenize "$model" $ids
