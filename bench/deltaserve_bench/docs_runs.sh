#!/usr/bin/env bash
# The deltaserve-bench runs behind docs/benchmarks.md ("deltaserve-bench: DeltaServe and
# llama-cpp-python's server"), each holding the benchmark lock (bench/lock.sh: one benchmark at a
# time, in the cgroup of the highest CPU weight).
#
#   bench/deltaserve_bench/docs_runs.sh soak  [--minutes 30]    # router + 2 workers + Redis, faults
#   bench/deltaserve_bench/docs_runs.sh versus                   # DeltaServe, then llama-cpp-python
#   bench/deltaserve_bench/docs_runs.sh ttft [--rounds 3]        # chat TTFT vs C++ llama-server
#   bench/deltaserve_bench/docs_runs.sh ttft-ab [--rounds 4]     # the same probe, two builds
#
# Environment: BUILD (default build/release: deltaserve-worker, -router, -synth), MODEL (default
# build/bench/synth-0.8b-q4_k_m.gguf, made with deltaserve-synth when missing), LLAMA_VENV (a
# venv with llama-cpp-python[server]==0.3.36, for `versus`), LLAMA_SERVER (llama.cpp's
# llama-server binary, for `ttft`), BUILD_B (the second build, for `ttft-ab`), OUT (default
# build/bench/dsbench), WORKLOADS (for `versus`, default "ctx mt conc").
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "${repo}"
build=${BUILD:-build/release}
model=${MODEL:-build/bench/synth-0.8b-q4_k_m.gguf}
out=${OUT:-build/bench/dsbench}
llama_venv=${LLAMA_VENV:-build/bench-venv}
bench=bench/deltaserve-bench
fleet=bench/deltaserve_bench/fleet.sh
what=${1:-}
shift || true
minutes=30
rounds=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "docs_runs.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
[[ "${what}" == soak || "${what}" == versus || "${what}" == ttft || "${what}" == ttft-ab ]] ||
  { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
if [[ "${what}" == ttft ]]; then
  [[ -x "${LLAMA_SERVER:-}" ]] ||
    { echo "docs_runs.sh ttft: set LLAMA_SERVER to llama.cpp's llama-server binary" >&2; exit 2; }
fi
if [[ "${what}" == ttft-ab ]]; then
  [[ -x "${BUILD_B:-}/worker/deltaserve-worker" ]] ||
    { echo "docs_runs.sh ttft-ab: set BUILD_B to a second build folder" >&2; exit 2; }
  [[ -n "${BUILD:-}" ]] || { echo "docs_runs.sh ttft-ab: set BUILD (the first build)" >&2; exit 2; }
fi

# shellcheck source=bench/lock.sh
source "${repo}/bench/lock.sh"
bench_lock "${repo}"
mkdir -p "${out}"
if [[ ! -f "${model}" ]]; then
  "${build}/worker/deltaserve-synth" --preset 0.8b --type q4_k_m \
    --vocab-from ../shared/golden/qwen3-vocab-qwen35pre.gguf -o "${model}"
fi
"${bench}" --setup >/dev/null 2>&1 || true
{ date -u; grep -m1 'model name' /proc/cpuinfo; nproc; cat /proc/loadavg; } >"${out}/${what}-machine.txt"

if [[ "${what}" == soak ]]; then
  state="${out}/fleet"
  rm -rf "${state}" "${out}/soak"
  trap '"${fleet}" "${state}" stop' EXIT
  url=$("${fleet}" "${state}" start --model "${model}" --build "${build}" --workers 2 \
    --threads 1 --ctx 8192 --parallel 4 --snapshot-ram 2GiB)
  half=$(python3 -c "print(${minutes} / 2)")
  "${bench}" soak --url "${url}" --model bench --label "DeltaServe fleet" --minutes "${minutes}" \
    --concurrency 4 --turns 4 --system-tokens 1000 --user-tokens 100 --max-tokens 32 \
    --think-time 1 --fault-window 60 \
    --fault "$(python3 -c "print(${half} - ${minutes} / 6)")m:${fleet} ${state} kill-worker 2" \
    --fault "${half}m:${fleet} ${state} restart-redis" \
    --fault "$(python3 -c "print(${half} + ${minutes} / 6)")m:${fleet} ${state} start-worker 2" \
    --out "${out}/soak" --no-progress
  cat /proc/loadavg >>"${out}/${what}-machine.txt"
  exit 0
fi

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# peer_up PATH: the peer server started last (pid in llama_pid) answers PATH on ${port}, up to
# two minutes; it is killed when this script exits.
peer_up() {
  trap 'kill ${llama_pid} 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:${port}$1" >/dev/null && return 0
    sleep 0.2
  done
  echo "docs_runs.sh: the peer server did not answer $1 on port ${port}" >&2
  return 1
}

# The chat-TTFT probe of `ttft` and `ttft-ab`: one conversation, a 3,000-token system prompt,
# 110-token user turns, 6 turns, 16 tokens out, context 8,192.
ctx=8192
turns=(--sessions 1 --turns 6 --system-tokens 3000 --user-tokens 110 --tool-ratio 0
       --max-tokens 16 --think-time 0.5)

if [[ "${what}" == ttft-ab ]]; then
  # The DeltaServe half of `ttft` for two builds, BUILD (a) and BUILD_B (b), alternating within
  # each round (a first in odd rounds, b first in even ones), each round with its own seed and
  # fresh processes; then ttft_ab_table.py compares the resumed turns' worker prefill times and
  # each turn's TTFT against the bound.
  for round in $(seq 1 "${rounds}"); do
    seed=$((100 + round))
    order="a b"
    (( round % 2 == 0 )) && order="b a"
    for side in ${order}; do
      side_build=${build}
      [[ "${side}" == b ]] && side_build=${BUILD_B}
      state="${out}/ttft-ab-fleet"
      run="${out}/ttft-ab-r${round}-${side}"
      rm -rf "${state}" "${run}"
      url=$("${fleet}" "${state}" start --model "${model}" --build "${side_build}" --workers 1 \
        --threads 2 --ctx "${ctx}" --parallel 1 --snapshot-ram 2GiB)
      "${bench}" multi-turn --url "${url}" --model bench --label "build ${side}" --no-progress \
        --seed "${seed}" "${turns[@]}" --out "${run}"
      cp "${state}/worker1.log" "${run}/worker.log"
      "${fleet}" "${state}" stop
      sleep 2
    done
  done
  python3 bench/deltaserve_bench/ttft_ab_table.py "${out}" "${rounds}" | tee "${out}/ttft-ab-table.md"
  cat /proc/loadavg >>"${out}/${what}-machine.txt"
  exit 0
fi

if [[ "${what}" == ttft ]]; then
  # Chat TTFT through the API, one conversation at a time: a 3,000-token system prompt and
  # 110-token user turns (the first turn ~3.3K tokens, cold), 6 turns, 16 tokens out, no tool
  # turns. Each round starts both servers afresh (DeltaServe with an empty Redis and RAM tier,
  # llama-server with an empty prompt cache) and uses its own seed, so every first turn is
  # cold; the servers alternate within a round. Both: 2 threads, one sequence, context 8,192.
  # llama-server runs with its defaults for reuse: `cache_prompt` on (the slot keeps the last
  # prompt's KV and recurrent state, with context checkpoints for hybrid models) and a RAM
  # prompt cache (--cache-ram, 8 GiB); it renders the model's own template (--jinja).
  for round in $(seq 1 "${rounds}"); do
    seed=$((100 + round))
    state="${out}/ttft-fleet"
    rm -rf "${state}" "${out}/ttft-r${round}-deltaserve" "${out}/ttft-r${round}-llama-server"
    url=$("${fleet}" "${state}" start --model "${model}" --build "${build}" --workers 1 \
      --threads 2 --ctx "${ctx}" --parallel 1 --snapshot-ram 2GiB)
    "${bench}" multi-turn --url "${url}" --model bench --label DeltaServe --no-progress \
      --seed "${seed}" "${turns[@]}" --out "${out}/ttft-r${round}-deltaserve"
    cp "${state}/worker1.log" "${out}/ttft-r${round}-deltaserve/worker.log"
    "${fleet}" "${state}" stop
    sleep 2
    port=$(free_port)
    "${LLAMA_SERVER}" -m "${model}" --alias bench --host 127.0.0.1 --port "${port}" -t 2 -tb 2 \
      -c "${ctx}" -np 1 --jinja --no-webui \
      >"${out}/ttft-r${round}-llama-server.log" 2>&1 &
    llama_pid=$!
    peer_up /health
    "${bench}" multi-turn --url "http://127.0.0.1:${port}" --model bench --label llama-server \
      --no-progress --seed "${seed}" "${turns[@]}" --out "${out}/ttft-r${round}-llama-server"
    kill "${llama_pid}"; wait "${llama_pid}" 2>/dev/null || true
    sleep 2
  done
  python3 bench/deltaserve_bench/ttft_table.py "${out}" "${rounds}" | tee "${out}/ttft-table.md"
  cat /proc/loadavg >>"${out}/${what}-machine.txt"
  exit 0
fi

# versus: the same three workloads against DeltaServe (one worker, 2 threads, 4 sequences) and
# llama-cpp-python's OpenAI server (2 threads), on the same model file and context.
ctx=16384
workloads=${WORKLOADS:-ctx mt conc}
wants() { [[ " ${workloads} " == *" $1 "* ]]; }
# shellcheck disable=SC2317  # (called below; shellcheck loses track after the soak's exit)
run_all() {  # label url model
  local label=$1 url=$2 name=$3 tag
  tag=$(echo "${label}" | tr 'A-Z ' 'a-z-')
  local common=(--url "${url}" --model "${name}" --label "${label}" --no-progress)
  if wants ctx; then
    "${bench}" context-sweep "${common[@]}" --start 512 --max-context "${ctx}" --max-tokens 32 \
      --bisect 0 --out "${out}/ctx-${tag}"
  fi
  if wants mt; then
    "${bench}" multi-turn "${common[@]}" --sessions 4 --turns 6 --system-tokens 2000 \
      --user-tokens 100 --tool-result-tokens 300 --max-tokens 32 --think-time 1 \
      --resume-every 3 --resume-gap 30 --out "${out}/mt-${tag}"
  fi
  if wants conc; then
    "${bench}" concurrency-sweep "${common[@]}" --concurrency 1-16 --prompt-tokens 256 \
      --max-tokens 32 --out "${out}/conc-${tag}"
  fi
}
state="${out}/versus-fleet"
rm -rf "${state}"
url=$("${fleet}" "${state}" start --model "${model}" --build "${build}" --workers 1 \
  --threads 2 --ctx "${ctx}" --parallel 16 --snapshot-ram 4GiB)
run_all DeltaServe "${url}" bench
"${fleet}" "${state}" stop
sleep 2
port=$(free_port)
# --logits_all false: a chat completion needs the last row only (bench/snapshot_bench.sh says why);
# numpy's OpenBLAS would otherwise spin threads beside llama.cpp's. No --chat_format: the model's
# own template (the one DeltaServe renders; chatml would drop the tools and tool results).
# --interrupt_requests false: by default a new request cuts the stream in progress; this way they
# queue (the server runs one sequence at a time).
OPENBLAS_NUM_THREADS=1 "${llama_venv}/bin/python" -m llama_cpp.server --model "${model}" \
  --model_alias bench --host 127.0.0.1 --port "${port}" --n_threads 2 --n_threads_batch 2 \
  --n_ctx "${ctx}" --logits_all false --cache true --cache_type ram --interrupt_requests false \
  --cache_size $((2 << 30)) >"${out}/llama-server.log" 2>&1 &
llama_pid=$!
peer_up /v1/models
run_all "llama-cpp-python" "http://127.0.0.1:${port}" bench
for w in ${workloads}; do
  "${bench}" compare "${out}/${w}-deltaserve" "${out}/${w}-llama-cpp-python" \
    --out "${out}/compare-${w}"
done
cat /proc/loadavg >>"${out}/${what}-machine.txt"
