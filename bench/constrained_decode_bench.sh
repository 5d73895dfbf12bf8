#!/usr/bin/env bash
# Decode speed with an output constraint vs without (issue 13; docs/benchmarks.md, "Constrained
# decoding"): holds the benchmark lock (bench/lock.sh), then runs
# bench/constrained_decode_bench.py with the arguments given (--model, --threads, --reps,
# --bin-dir: a Release build with deltaserve-worker and deltaserve-router).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lock.sh
source "${repo}/bench/lock.sh"
bench_lock "${repo}"
exec python3 "${repo}/bench/constrained_decode_bench.py" "$@"
