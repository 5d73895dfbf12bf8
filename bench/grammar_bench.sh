#!/usr/bin/env bash
# The grammar engine's benchmark (issue 13) in one command, holding the benchmark lock (and its
# CPU priority, bench/lock.sh): deltaserve-bench-grammar on the JSON Schema corpus and the
# vocabulary of a GGUF, once timed by wall clock and once by the thread's CPU time.
#
#   bench/grammar_bench.sh [--bin PATH] [--model FILE.gguf] [--corpus PATH] [-- EXTRA ARGS]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lock.sh
source "${repo}/bench/lock.sh"
bin="${repo}/build/release/bench/deltaserve-bench-grammar"
model="${repo}/../shared/golden/qwen3-vocab-qwen35pre.gguf"
corpus="${repo}/tests/data/json_schema_corpus"
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --corpus) corpus="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,6p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done

bench_lock "${repo}"
echo "== $(date -u +%FT%TZ) $(git -C "${repo}" rev-parse --short HEAD), load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== wall clock"
"${bin}" --model "${model}" --corpus "${corpus}" "${extra[@]}"
echo "== thread CPU time"
"${bin}" --model "${model}" --corpus "${corpus}" --cpu-clock "${extra[@]}"
