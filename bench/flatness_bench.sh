#!/usr/bin/env bash
# How flat DeltaServe's CPU engine stays with depth, per ISA level: prefill of 3,000 tokens
# against 512, and decode after 3,000 tokens against decode at depth 0, measured in alternating
# rounds (short, long, short, long, ...) so that both sides of each ratio run seconds apart. This
# guest's memory bandwidth changes by up to 2x within minutes, and engine_bench.sh measures the
# scenarios of a model minutes apart, so the ratio of two of its rows can compare two bandwidth
# phases; here each round gives its own ratio and the table reports their median and range.
#
#   bench/flatness_bench.sh [--model FILE.gguf ...] [--isa avx2,avx_vnni,avx512] [--rounds 4]
#                           [--reps 3] [--threads 2] [--bin build/release/bench/deltaserve-bench-engine]
#
# Defaults: build/bench/synth-0.8b-{q4_k_m,q8_0}.gguf (engine_bench.sh makes them), every ISA
# level the CPU has above scalar, 4 rounds of 3 repetitions, 2 threads, 64 decode tokens.
# Targets (docs/benchmarks.md): prefill at 3,000 >= 0.85 x prefill at 512; decode at depth 3,000
# >= 0.9 x decode at depth 0. Prints a markdown table on stdout, progress on stderr.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${repo}/build/release/bench/deltaserve-bench-engine"
models=()
isas=""
rounds=4
reps=3
threads=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) models+=("$2"); shift 2 ;;
    --isa) isas=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "flatness_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "${bin}" ]] || { echo "flatness_bench.sh: no ${bin}; build deltaserve-bench-engine" >&2; exit 1; }
if [[ ${#models[@]} -eq 0 ]]; then
  models=("${repo}/build/bench/synth-0.8b-q4_k_m.gguf" "${repo}/build/bench/synth-0.8b-q8_0.gguf")
fi
for m in "${models[@]}"; do
  [[ -f "${m}" ]] || { echo "flatness_bench.sh: no model ${m} (bench/engine_bench.sh makes it)" >&2; exit 1; }
done
if [[ -z "${isas}" ]]; then
  isas=avx2
  grep -qw avx_vnni /proc/cpuinfo && isas+=",avx_vnni"
  grep -qw avx512f /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo && isas+=",avx512"
fi

# shellcheck source=bench/lock.sh
source "${repo}/bench/lock.sh"
bench_lock "${repo}"

rate() {  # isa model args... -> median tok/s
  DELTASERVE_CPU_ISA=$1 "${bin}" -m "$2" --threads "${threads}" --reps "${reps}" "${@:3}" 2>/dev/null |
    sed -n 's/^summary:.* median_tok_s=\([0-9.]*\).*/\1/p'
}

started=$(date -u +%H:%M)
echo "| ISA level | model | prefill 512 tok/s | prefill 3,000 tok/s | prefill ratio (range) | decode d0 tok/s | decode d3,000 tok/s | decode ratio (range) |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
IFS=',' read -r -a isa_list <<<"${isas}"
for isa in "${isa_list[@]}"; do
  for m in "${models[@]}"; do
    p_short=() p_long=() d_short=() d_long=()
    for r in $(seq 1 "${rounds}"); do
      echo "== ${isa} $(basename "${m}") round ${r}/${rounds}" >&2
      p_short+=("$(rate "${isa}" "${m}" --scenario prefill --prompt 512)")
      p_long+=("$(rate "${isa}" "${m}" --scenario prefill --prompt 3000)")
      d_short+=("$(rate "${isa}" "${m}" --scenario decode --prompt 0 --decode 64)")
      d_long+=("$(rate "${isa}" "${m}" --scenario decode --prompt 3000 --decode 64)")
    done
    python3 - "${isa}" "$(basename "${m}" .gguf)" "${p_short[*]}" "${p_long[*]}" \
      "${d_short[*]}" "${d_long[*]}" <<'EOF'
import statistics as st, sys
isa, model = sys.argv[1], sys.argv[2]
ps, pl, ds, dl = ([float(v) for v in a.split()] for a in sys.argv[3:7])
def ratios(short, long):
    r = [b / a for a, b in zip(short, long)]
    return f"**{st.median(r):.2f}** ({min(r):.2f}–{max(r):.2f})"
print(f"| {isa} | {model} | {st.median(ps):.1f} | {st.median(pl):.1f} | {ratios(ps, pl)} "
      f"| {st.median(ds):.1f} | {st.median(dl):.1f} | {ratios(ds, dl)} |")
EOF
  done
done
echo
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), ${threads} threads, ${rounds} alternating rounds of ${reps} repetitions, $(date -u +%F) ${started}-$(date -u +%H:%M) UTC; tok/s are medians over the rounds, ratios the median of the per-round ratios."
