#!/usr/bin/env bash
# The simulated MoE expert placement comparison of docs/benchmarks.md ("MoE expert placement"):
# deltaserve-placement-sim over both model shapes, both machine profiles and a set of routing
# traces, at expert VRAM budgets of a quarter and a half of all routed experts, plus a sweep of
# budgets (every tenth) for the plot and for uniform routing on every model and machine. One
# JSON file per run under OUT (default bench/results/placement_sim), then
# bench/placement_sim_table.py prints the markdown tables and draws the plot (when matplotlib
# is in build/sim-venv or the python given with --python).
#
#   bench/placement_sim_bench.sh [--bin build/release] [--out DIR] [--recorded FILE.trace]
#                                [--python PY] [--quick]
#
# Traces: synthetic (--synthetic-trace, seed 1) uniform, Zipf 0.5 (the skew that reproduces the
# published Qwen3.5-122B-A10B hot-expert measurement), Zipf 1.0, and Zipf 1.0 drifting over 8
# topics of 10,000 tokens each; --recorded adds a trace recorded from a skewed synthetic model
# (bench/moe_routing_trace.cc). A what-if: the same models with every expert at the mean size
# ("<model>-even"), one expert size, beside the real sizes' slots per size. The simulator is
# deterministic: the same build gives the same numbers.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${repo}/build/release"
out="${repo}/bench/results/placement_sim"
python="${repo}/build/sim-venv/bin/python"
recorded=""
steps=60000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --recorded) recorded="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --quick) steps=6000; shift ;;
    *) echo "usage: $0 [--bin DIR] [--out DIR] [--recorded FILE] [--python PY] [--quick]" >&2
       exit 2 ;;
  esac
done
sim="${bin}/router/deltaserve-placement-sim"
[[ -x "${sim}" ]] || { echo "no ${sim}: build the deltaserve-placement-sim target" >&2; exit 1; }
mkdir -p "${out}"

# name -> synthetic trace arguments; each is drawn once per model shape (--write-trace) and
# replayed for every machine and budget.
declare -A synthetic=(
  [uniform]="--skew 0 --topics 1 --steps ${steps}"
  [zipf0.5]="--skew 0.5 --topics 1 --steps ${steps}"
  [zipf1.0]="--skew 1.0 --topics 1 --steps ${steps}"
  [zipf1.0-drift]="--skew 1.0 --topics 8 --topic-steps 10000 --steps $((steps * 2))"
)
traces=("${!synthetic[@]}")
if [[ -n "${recorded}" ]]; then traces+=(recorded); fi
trace_dir="$(mktemp -d)"
trap 'rm -rf "${trace_dir}"' EXIT

trace_file() {  # model trace
  if [[ "$2" == recorded ]]; then echo "${recorded}"; return; fi
  local file="${trace_dir}/$1_$2.trace"
  if [[ ! -f "${file}" ]]; then
    # shellcheck disable=SC2086
    "${sim}" --synthetic-trace ${synthetic[$2]} --profile rtx4090 --model "$1" --expert-vram 0 \
      --write-trace "${file}" > /dev/null
  fi
  echo "${file}"
}

all_expert_bytes() {  # model
  "${sim}" --synthetic-trace --steps 10 --profile rtx4090 --model "$1" --expert-vram 0 |
    "${python}" -c 'import json, sys; print(json.load(sys.stdin)["model"]["all_expert_bytes"])'
}

# The what-if shape: the built-in model with every layer's expert at the mean expert size (same
# total bytes, so a slot holds exactly one expert of any layer).
even_model() {  # model -> path of its JSON
  local file="${trace_dir}/$1-even.json"
  if [[ ! -f "${file}" ]]; then
    "${sim}" --synthetic-trace --steps 10 --profile rtx4090 --model "$1" --expert-vram 0 |
      "${python}" -c 'import json, sys
m = json.load(sys.stdin)["model"]
print(json.dumps({"base": sys.argv[1], "name": sys.argv[1] + "-even",
                  "expert_bytes": m["all_expert_bytes"] // (m["n_layer"] * m["n_expert"])}))' \
      "$1" > "${file}"
  fi
  echo "${file}"
}

run() {  # model profile trace fraction [shape: a model JSON replacing the built-in one]
  local model="$1" profile="$2" trace="$3" fraction="$4" shape="${5:-$1}" name="$1" total vram
  if [[ -n "${5:-}" ]]; then name="$1-even"; fi
  total="$(all_expert_bytes "${model}")"
  vram="$("${python}" -c "print(int(${total} * ${fraction}))")"
  # A recorded trace from bench/moe_routing_trace.cc has one token per decode step; its prompts
  # (64 tokens by default) are prefill.
  local decode=64
  if [[ "${trace}" == recorded ]]; then decode=1; fi
  "${sim}" --trace "$(trace_file "${model}" "${trace}")" --profile "${profile}" --model "${shape}" \
    --expert-vram "${vram}" --max-decode-tokens "${decode}" --sweep \
    > "${out}/${name}_${profile}_${trace}_${fraction}.json"
  made["${name}_${profile}_${trace}_${fraction}"]=1
  echo "${name} ${profile} ${trace} ${fraction}" >&2
}
declare -A made=()  # the runs of this invocation

for model in 35b-a3b 122b-a10b; do
  for profile in rtx4090 h100; do
    for trace in "${traces[@]}"; do
      for fraction in 0.25 0.5; do run "${model}" "${profile}" "${trace}" "${fraction}"; done
    done
  done
done
# The plot's sweep: one model and machine per panel, every tenth of the experts; uniform
# routing over the same budgets for every model and machine (dynamic is never to fall below
# --n-cpu-moe there).
for model in 35b-a3b 122b-a10b; do
  for profile in rtx4090 h100; do
    traces_here=(uniform)
    if [[ "${model} ${profile}" == "122b-a10b rtx4090" || "${model} ${profile}" == "35b-a3b h100" ]]
    then
      traces_here+=(zipf0.5 zipf1.0-drift)
    fi
    for trace in "${traces_here[@]}"; do
      for fraction in 0.1 0.2 0.3 0.4 0.6 0.75 0.9; do
        run "${model}" "${profile}" "${trace}" "${fraction}"
      done
    done
  done
done
# The what-if of one expert size: every expert at the mean size.
for model in 35b-a3b 122b-a10b; do
  for profile in rtx4090 h100; do
    for trace in uniform zipf0.5; do
      for fraction in 0.25 0.5 0.9; do
        run "${model}" "${profile}" "${trace}" "${fraction}" "$(even_model "${model}")"
        # ... beside the real sizes at the same budget (0.9: not every case is in the sweep).
        [[ -n "${made[${model}_${profile}_${trace}_${fraction}]:-}" ]] ||
          run "${model}" "${profile}" "${trace}" "${fraction}"
      done
    done
  done
done
"${python}" "${repo}/bench/placement_sim_table.py" "${out}"
