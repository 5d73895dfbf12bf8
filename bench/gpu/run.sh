#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stage_* functions are called as "stage_${s}"
# Issue 16's GPU checks and benchmarks in one command, on a machine with an NVIDIA GPU:
#
#   bench/gpu/run.sh [STAGE...] [--build-dir DIR | --bundle DIR] [--archs 90] [--golden DIR]
#                    [--models-dir DIR] [--presets 9b,35b-a3b] [--types q4_k_m,q8_0]
#                    [--llama-cpp DIR] [--out DIR] [--quick] [--long] [--tests a,b] [--filter F]
#
# Stages (default: build test sanitize bench), each also alone:
#   build     configures and builds the release tree with the CUDA backend for --archs (default:
#             the GPU's own compute capability, from nvidia-smi) in --build-dir (default
#             build/gpu-release). Needs the project's build dependencies (README.md); on a machine
#             without them use a bundle made elsewhere by bench/gpu/pack.sh (--bundle).
#   test      every gpu test binary (tests/gpu/cuda_*_test; --tests names a subset, --filter is
#             their --gtest_filter): on a GPU machine a SKIPPED test is a failure.
#   sanitize  compute-sanitizer on cuda_engine_golden_test's F32 tiny models: memcheck over every
#             test (prefill, greedy decode, the CPU engine, chunked, batched), racecheck over the
#             prefill and greedy ones (racecheck instruments every shared-memory access: slow).
#   bench     the device's copy bandwidth, then for each --presets x --types a synthetic model
#             (deltaserve-synth, Qwen3 vocabulary of --golden, written to --models-dir and deleted
#             after its rows so that disk holds one at a time): batch-1 decode at depth 512, 4K and
#             32K (and 128K with --long), prefill of 512 and 8K tokens, batched decode of 1, 4,
#             16 and 64 sequences at depth 512, and decode@512, batched 1 and 16 again with
#             --cuda-graphs off (rows ".../no-graphs": what the graphs gain); with --llama-cpp DIR (a local llama.cpp clone;
#             nothing is fetched) llama.cpp is built with -DGGML_CUDA=ON and llama-bench runs on
#             the same files (-ngl 99, -fa 1: prefill 512 and 8192 at depth 0, 64 decode tokens
#             at each decode depth; llama.cpp's batched column is not measured).
#             Writes --out/results.md (the markdown table for docs/benchmarks.md) and the raw
#             JSON lines beside it.
#   --quick   fewer repetitions and only the 9b q4_k_m model (a harness check in minutes).
#
# --bundle DIR: bench/gpu/pack.sh's archives (bundle.tar.xz with bin/ and lib/, golden-*.tar.xz,
# vocab.tar.xz; whichever are there) are unpacked into /tmp/deltaserve-gpu-bundle and used
# instead of a build tree. On the workplace's lent GPU machines (10 minutes a command, 15 minutes
# of device time a session, 64 MiB carried a call, no network) the stages go in separate calls;
# docs/gpu.md ("A GPU session") has the exact list.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
stages=()
build_dir="${repo}/build/gpu-release"
bundle=""
archs=""
golden="${repo}/../shared/golden"
models_dir="${repo}/build/bench/gpu-models"
presets="9b,35b-a3b"
types="q4_k_m,q8_0"
llama_dir=""
out_dir="${repo}/build/bench/gpu"
quick=0
long=0
only_tests=""
filter=""

usage() {
  sed -n '2,35p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    build | test | sanitize | bench) stages+=("$1") ;;
    --build-dir) build_dir="$2"; shift ;;
    --bundle) bundle="$(cd "$2" && pwd)"; shift ;;
    --archs) archs="$2"; shift ;;
    --golden) golden="$2"; shift ;;
    --models-dir) models_dir="$2"; shift ;;
    --presets) presets="$2"; shift ;;
    --types) types="$2"; shift ;;
    --llama-cpp) llama_dir="$2"; shift ;;
    --out) out_dir="$2"; shift ;;
    --quick) quick=1 ;;
    --tests) only_tests="$2"; shift ;;
    --filter) filter="$2"; shift ;;
    --long) long=1 ;;
    -h | --help) usage ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
[[ ${#stages[@]} -eq 0 ]] && stages=(build test sanitize bench)
mkdir -p "${out_dir}"
log() { echo "[gpu $(date -u +%H:%M:%S)] $*" >&2; }

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "run.sh: no NVIDIA GPU here (nvidia-smi -L fails); these checks need one" >&2
  exit 1
fi
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
log "GPU: ${gpu_name}, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"

# Where the programs are: a build tree, or a bundle (bin/ as the build tree's layout, lib/ with
# the shared libraries the binaries were linked against, golden/ with the golden files).
if [[ -n "${bundle}" && -f "${bundle}/bundle.tar.xz" ]]; then
  unpacked=/tmp/deltaserve-gpu-bundle
  mkdir -p "${unpacked}/golden"
  log "unpacking ${bundle} into ${unpacked}"
  tar -C "${unpacked}" -xJf "${bundle}/bundle.tar.xz"
  for a in "${bundle}"/golden-*.tar.xz "${bundle}"/vocab.tar.xz; do
    [[ -f "${a}" ]] && tar -C "${unpacked}/golden" -xJf "${a}"
  done
  bundle="${unpacked}"
fi
if [[ -n "${bundle}" ]]; then
  bin="${bundle}/bin"
  export LD_LIBRARY_PATH="${bundle}/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
  export DELTASERVE_BINARY_DIR="${bin}"
  [[ -d "${bundle}/golden" ]] && golden="${bundle}/golden"
  for s in "${stages[@]}"; do
    [[ "${s}" == build ]] && { echo "run.sh: build needs no --bundle" >&2; exit 2; }
  done
else
  bin="${build_dir}"
fi
golden="$(cd "${golden}" && pwd)"
export DELTASERVE_GOLDEN_DIR="${golden}"

stage_build() {
  if [[ -z "${archs}" ]]; then
    archs="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')"
  fi
  log "configuring ${build_dir} for sm_${archs}"
  cmake -S "${repo}" -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDELTASERVE_CUDA=ON -DDELTASERVE_CUDA_ARCHS="${archs}" -DCMAKE_CUDA_ARCHITECTURES="${archs}" \
    -DDELTASERVE_GOLDEN_DIR="${golden}" > "${out_dir}/configure.log" 2>&1 ||
    { tail -30 "${out_dir}/configure.log" >&2; echo "run.sh: configure failed (missing build" \
      "dependencies? use bench/gpu/pack.sh elsewhere and --bundle)" >&2; exit 1; }
  log "building (log: ${out_dir}/build.log)"
  local tests
  # The test programs as tests/gpu/CMakeLists.txt names them (a source file is not a program:
  # cuda_gdn_decode_step_test.cc is part of cuda_gated_delta_rule_test).
  mapfile -t tests < <(sed -n 's/^deltaserve_gpu_test(NAME \([A-Za-z0-9_]*\).*/\1/p' \
    "${repo}/tests/gpu/CMakeLists.txt" | sort)
  ninja -C "${build_dir}" deltaserve-worker deltaserve-router deltaserve-synth \
    deltaserve-bench-gpu "${tests[@]}" > "${out_dir}/build.log" 2>&1 ||
    { tail -40 "${out_dir}/build.log" >&2; exit 1; }
}

gpu_tests() {
  local t
  for t in "${bin}"/tests/gpu/cuda_*_test; do
    if [[ -z "${only_tests}" || ",${only_tests}," == *",$(basename "${t}"),"* ]]; then
      echo "${t}"
    fi
  done
}

stage_test() {
  local failed=0 t name
  for t in $(gpu_tests); do
    name="$(basename "${t}")"
    log "test ${name}"
    if ! "${t}" ${filter:+--gtest_filter="${filter}"} > "${out_dir}/${name}.log" 2>&1; then
      failed=1
      grep -E '^\[  FAILED  \]|Failure' "${out_dir}/${name}.log" | head -20 >&2 || true
    fi
    if grep -q '^\[  SKIPPED \]' "${out_dir}/${name}.log"; then
      failed=1
      echo "run.sh: ${name} skipped tests on a GPU machine:" >&2
      grep '^\[  SKIPPED \]' "${out_dir}/${name}.log" | head -5 >&2
    fi
    grep -E '^\[  (PASSED|FAILED) ' "${out_dir}/${name}.log" | tail -2 >&2 || true
  done
  return "${failed}"
}

stage_sanitize() {
  local t failed=0 models='*f32*'
  t="${bin}/tests/gpu/cuda_engine_golden_test"
  # The F32 models whose golden files are here.
  [[ -f "${golden}/tiny-moe-f32.gguf" ]] || models='*dense_f32*'
  [[ -f "${golden}/tiny-dense-f32.gguf" ]] || models='*moe_f32*'
  for tool in memcheck racecheck; do
    local f="${models}"
    [[ "${tool}" == racecheck ]] && f="*PrefillLogits${models}:*GreedyContinuation${models}"
    log "compute-sanitizer --tool ${tool} on cuda_engine_golden_test (${f})"
    if ! compute-sanitizer --tool "${tool}" --error-exitcode 3 --leak-check no \
      "${t}" --gtest_filter="${f}" > "${out_dir}/sanitizer-${tool}.log" 2>&1; then
      failed=1
      grep -E 'ERROR SUMMARY|Invalid|Race|Hazard' "${out_dir}/sanitizer-${tool}.log" | head -20 >&2
    fi
    grep 'ERROR SUMMARY' "${out_dir}/sanitizer-${tool}.log" >&2 || true
  done
  return "${failed}"
}

# --- bench --------------------------------------------------------------------------------------

bench_bin() { echo "${bin}/bench/deltaserve-bench-gpu"; }
results="${out_dir}/results.jsonl"

run_bench() {  # label, args... -> one JSON line appended with the label
  local label="$1"
  shift
  local line
  if line="$("$(bench_bin)" "$@" 2> "${out_dir}/last-bench.err")"; then
    echo "{\"label\":\"${label}\",${line#\{}" >> "${results}"
    log "  ${label}: $(echo "${line}" | sed -n 's/.*"tok_s":\([0-9.]*\).*/\1/p') tok/s"
  else
    log "  ${label}: FAILED ($(tail -1 "${out_dir}/last-bench.err"))"
    echo "{\"label\":\"${label}\",\"failed\":true}" >> "${results}"
  fi
}

# The CUDA context's real cost next to the plan's 512 MiB reserve: a worker on `model` (ctx 4096,
# one sequence), its device memory as nvidia-smi counts it, less what its plan allocates.
measure_context() {
  local log_file="${out_dir}/worker-start.log" pid used planned
  "${bin}/worker/deltaserve-worker" --model m="$1" --device cuda:0 --listen 127.0.0.1:0 \
    --ctx 4096 --parallel 1 > /dev/null 2> "${log_file}" &
  pid=$!
  for _ in $(seq 1 900); do
    grep -q "listening on" "${log_file}" && break
    kill -0 "${pid}" 2> /dev/null || break
    sleep 0.2
  done
  used=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', *' -v p="${pid}" '$1 == p {print $2}')
  planned=$(sed -n 's/.*planned VRAM: \([0-9]*\) B.*/\1/p' "${log_file}" | head -1)
  kill -TERM "${pid}" 2> /dev/null || true
  wait "${pid}" 2> /dev/null || true
  if [[ -n "${used}" && -n "${planned}" ]]; then
    # planned includes the 512 MiB reserve: context = used - (planned - reserve).
    local context=$((used * 1048576 - planned + 536870912))
    echo "{\"label\":\"context\",\"used_bytes\":$((used * 1048576)),\"planned_bytes\":${planned},\"context_bytes\":${context}}" >> "${results}"
    log "worker holds ${used} MiB, planned $((planned >> 20)) MiB: the context takes $((context >> 20)) MiB (reserve 512)"
  else
    log "could not measure the context (worker log: ${log_file})"
  fi
}

llama_bench=""
build_llama() {
  [[ -z "${llama_dir}" ]] && return 0
  if [[ ! -f "${llama_dir}/CMakeLists.txt" ]]; then
    log "no llama.cpp clone at ${llama_dir}: its column stays empty"
    return 0
  fi
  log "building llama.cpp with CUDA (${llama_dir}, log ${out_dir}/llama-build.log)"
  if cmake -S "${llama_dir}" -B "${llama_dir}/build-cuda" -DGGML_CUDA=ON \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${archs:-90}" -DLLAMA_CURL=OFF \
    > "${out_dir}/llama-build.log" 2>&1 &&
    cmake --build "${llama_dir}/build-cuda" --target llama-bench -j "$(nproc)" \
      >> "${out_dir}/llama-build.log" 2>&1; then
    llama_bench="${llama_dir}/build-cuda/bin/llama-bench"
  else
    log "llama.cpp did not build (see the log): its column stays empty"
  fi
}

run_llama() {  # model file, label prefix, decode depths (comma-separated)
  [[ -z "${llama_bench}" ]] && return 0
  log "  llama-bench on $(basename "$1")"
  # Prefill at depth 0, decode at the decode rows' depths: the same rows as ours.
  { "${llama_bench}" -m "$1" -ngl 99 -fa 1 -p 512,8192 -n 0 -r 3 -o jsonl &&
    "${llama_bench}" -m "$1" -ngl 99 -fa 1 -p 0 -n 64 -d "$3" -r 3 -o jsonl; } \
    2> "${out_dir}/llama-bench.err" | sed "s/^{/{\"label\":\"$2 llama.cpp\",/" >> "${results}" ||
    log "  llama-bench failed: $(tail -1 "${out_dir}/llama-bench.err")"
}

stage_bench() {
  local reps=3 decode=64
  [[ "${quick}" == 1 ]] && { reps=1; decode=16; presets=9b; types=q4_k_m; }
  : > "${results}"
  mkdir -p "${models_dir}"
  run_bench "bandwidth" --bandwidth
  build_llama
  local depths=(512 4096 32768)
  [[ "${long}" == 1 ]] && depths+=(131072)
  local preset type model
  for preset in ${presets//,/ }; do
    for type in ${types//,/ }; do
      model="${models_dir}/synth-${preset}-${type}.gguf"
      if [[ ! -f "${model}" ]]; then
        log "synthesizing ${preset} ${type}"
        "${bin}/worker/deltaserve-synth" --preset "${preset}" --type "${type}" \
          --vocab-from "${golden}/qwen3-vocab-qwen35pre.gguf" -o "${model}" \
          --threads "$(nproc)" > /dev/null
      fi
      local tag="${preset} ${type}"
      [[ "${measured:-0}" == 1 ]] || { measure_context "${model}"; measured=1; }
      for d in "${depths[@]}"; do
        run_bench "${tag} decode@${d}" -m "${model}" --scenario decode --depth "${d}" \
          --decode "${decode}" --reps "${reps}"
      done
      for p in 512 8192; do
        run_bench "${tag} prefill${p}" -m "${model}" --scenario prefill --prompt "${p}" \
          --reps "${reps}"
      done
      for s in 1 4 16 64; do
        run_bench "${tag} batched${s}" -m "${model}" --scenario batched --sequences "${s}" \
          --depth 512 --decode "${decode}" --reps "${reps}"
      done
      # The same decode rows without CUDA graphs (every kernel launched from the host): what
      # the graphs gain, at a shallow context where launches weigh most.
      run_bench "${tag} decode@512/no-graphs" -m "${model}" --scenario decode --depth 512 \
        --decode "${decode}" --reps "${reps}" --cuda-graphs off
      for s in 1 16; do
        run_bench "${tag} batched${s}/no-graphs" -m "${model}" --scenario batched \
          --sequences "${s}" --depth 512 --decode "${decode}" --reps "${reps}" --cuda-graphs off
      done
      run_llama "${model}" "${tag}" "$(IFS=,; echo "${depths[*]}")"
      rm -f "${model}"  # one model on disk at a time (35B-A3B q8_0 is ~37 GB)
    done
  done
  python3 "${repo}/bench/gpu/results_table.py" "${results}" "${gpu_name}" > "${out_dir}/results.md"
  log "table: ${out_dir}/results.md"
  cat "${out_dir}/results.md"
}

status=0
for s in "${stages[@]}"; do
  "stage_${s}" || status=1
done
exit "${status}"
