#!/usr/bin/env bash
# The grammar benchmark on two vocabularies in one run (issue 13): deltaserve-bench-grammar over
# the JSON Schema corpus on the 151,936-token Qwen3 vocabulary (golden) and on the SYNTHETIC
# 248,320-token one made by bench/make_vocab_248k.py, runs alternating (151K, 248K, 151K, ...)
# so that both see the same machine load; each run by wall clock and by thread CPU time. Holds
# the benchmark lock and its cgroup of the highest CPU weight (bench/lock.sh). JSON lines (one
# per run, with "vocab_file", "clock", "round") go to OUT, then a table of medians over rounds.
#
#   bench/grammar_vocab_bench.sh [--bin PATH] [--rounds N] [--out FILE] [--big FILE.gguf] [-- ARGS]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lock.sh
source "${repo}/bench/lock.sh"
bin="${repo}/build/release/bench/deltaserve-bench-grammar"
small="${repo}/../shared/golden/qwen3-vocab-qwen35pre.gguf"
big="${repo}/build/bench/vocab-248k-synthetic.gguf"
corpus="${repo}/tests/data/json_schema_corpus"
rounds=3
out="${repo}/build/bench/grammar-vocab-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --big) big="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
if [[ ! -f "${big}" ]]; then
  echo "no ${big}: make it with build/bench-venv/bin/python bench/make_vocab_248k.py" >&2
  exit 1
fi

bench_lock "${repo}"
echo "== $(date -u +%FT%TZ) $(git -C "${repo}" rev-parse --short HEAD), $(lscpu | sed -n 's/^Model name: *//p'), load: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"${out}"
for ((r = 1; r <= rounds; ++r)); do
  for model in "${small}" "${big}"; do
    for clock in wall cpu; do
      flags=()
      [[ "${clock}" == cpu ]] && flags=(--cpu-clock)
      line="$("${bin}" --model "${model}" --corpus "${corpus}" --json "${flags[@]}" "${extra[@]}")"
      echo "{\"vocab_file\": \"$(basename "${model}")\", \"clock\": \"${clock}\", \"round\": ${r}, ${line#\{}" |
        tee -a "${out}" | cut -c1-160
    done
  done
done
echo "== $(date -u +%FT%TZ) done, load: $(cut -d' ' -f1-3 /proc/loadavg); results in ${out}"
python3 - "${out}" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
keys = [("compile_us", "compile"), ("mask_cold_us", "mask cold"), ("mask_warm_us", "mask warm"),
        ("mask_uncached_us", "mask computed"), ("mask_plain_walk_us", "mask plain walk")]
for clock in ("wall", "cpu"):
    print(f"\n{clock} clock, medians over rounds (us)")
    vocabs = sorted({r["vocab"] for r in runs})
    for v in vocabs:
        rs = [r for r in runs if r["vocab"] == v and r["clock"] == clock]
        med = lambda f: statistics.median(f(r) for r in rs)
        print(f"vocab {v}: trie {rs[0]['trie_nodes']} nodes, {rs[0]['trie_bytes']/2**20:.1f} MiB, "
              f"built {med(lambda r: r['trie_build_ms']):.0f} ms; RSS tokenizer "
              f"{med(lambda r: r['rss_tokenizer_kb'])/1024:.0f} MiB, +trie "
              f"{med(lambda r: r['rss_after_trie_kb'])/1024:.0f} MiB, peak "
              f"{med(lambda r: r['peak_rss_kb'])/1024:.0f} MiB; {rs[0]['steps']} steps, "
              f"{rs[0]['refused']} refused, {rs[0]['rejected']} rejected")
        for k, name in keys:
            print(f"  {name:16s} p50 {med(lambda r: r[k]['p50']):9.2f}  p99 {med(lambda r: r[k]['p99']):9.1f}"
                  f"  mean {med(lambda r: r[k]['mean']):8.2f}")
PY
