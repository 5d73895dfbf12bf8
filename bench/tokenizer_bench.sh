#!/usr/bin/env bash
# Tokenizer throughput, DeltaServe vs llama.cpp, in one command:
#   1. a venv under build/bench-venv with llama-cpp-python (pinned; compiles llama.cpp, 10+ min on
#      2 cores the first time, skipped when already installed) and gguf;
#   2. the corpus (bench/make_corpus.py -> build/bench/tokenizer-corpus.txt);
#   3. llama.cpp's tokenizer on it (bench/llama_cpp_tokenizer_throughput.py);
#   4. ours (deltaserve-bench-tokenizer), with a warm and with a cold word cache;
#   5. a markdown table on stdout (progress and logs on stderr).
# Both sides cut the corpus into paragraphs at "\n\n" and tokenize each one with
# parse_special=true and no BOS; both report the best of --reps repetitions.
#
#   bench/tokenizer_bench.sh [--reps N] [--bin PATH] [--model FILE.gguf] [--corpus FILE.txt]
#                            [--force-qwen2]
# Environment: DELTASERVE_BENCH_VENV (venv folder), PYTHON (interpreter for the venv and the
# corpus; default python3; Debian 12 needs python3-venv).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/venv.sh
source "${repo}/bench/venv.sh"
python="${PYTHON:-python3}"
venv="${DELTASERVE_BENCH_VENV:-${repo}/build/bench-venv}"
reps=5
bin="${repo}/build/release/bench/deltaserve-bench-tokenizer"
bin_given=0
model="${repo}/../shared/golden/qwen3-vocab-qwen35pre.gguf"
corpus=""
force_qwen2=()

usage() {
  sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) [[ $# -ge 2 ]] || usage; reps="$2"; shift 2 ;;
    --bin) [[ $# -ge 2 ]] || usage; bin="$2"; bin_given=1; shift 2 ;;
    --model) [[ $# -ge 2 ]] || usage; model="$2"; shift 2 ;;
    --corpus) [[ $# -ge 2 ]] || usage; corpus="$2"; shift 2 ;;
    --force-qwen2) force_qwen2=(--force-qwen2); shift ;;
    -h|--help) usage ;;
    *) echo "tokenizer_bench: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "${reps}" =~ ^[1-9][0-9]*$ ]] || { echo "tokenizer_bench: --reps wants a positive integer" >&2; exit 2; }
[[ -f "${model}" ]] || { echo "tokenizer_bench: model '${model}' not found" >&2; exit 1; }

log() { echo "== $*" >&2; }

# --- 1. venv with llama-cpp-python (bench/venv.sh) ---------------------------------------------
bench_venv_ensure "${venv}" "${python}" tokenizer_bench

# --- 2. corpus ---------------------------------------------------------------------------------
if [[ -z "${corpus}" ]]; then
  corpus="${repo}/build/bench/tokenizer-corpus.txt"
  log "building corpus ${corpus}"
  "${python}" "${repo}/bench/make_corpus.py" --output "${corpus}" >&2
fi
[[ -f "${corpus}" ]] || { echo "tokenizer_bench: corpus '${corpus}' not found" >&2; exit 1; }

# --- 3. our binary -----------------------------------------------------------------------------
if [[ ! -x "${bin}" ]]; then
  if [[ "${bin_given}" == 1 ]]; then
    echo "tokenizer_bench: '${bin}' is not an executable" >&2; exit 1
  fi
  log "building deltaserve-bench-tokenizer (Release)"
  cd "${repo}"
  if [[ -f CMakePresets.json ]] && cmake --list-presets 2>/dev/null | grep -q '"release"'; then
    cmake --preset release >&2
    cmake --build --preset release --target deltaserve-bench-tokenizer >&2
  else
    cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
    cmake --build build/release --target deltaserve-bench-tokenizer >&2
  fi
fi

# --- 4. run both -------------------------------------------------------------------------------
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

log "llama.cpp (llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION}), ${reps} reps"
# llama_cpp imports numpy, whose OpenBLAS would otherwise start idle-spinning worker threads
# (4% of the samples in a perf profile of this run) that compete with the tokenizing thread.
llama_out="$(OPENBLAS_NUM_THREADS=1 "${venv}/bin/python" \
  "${repo}/bench/llama_cpp_tokenizer_throughput.py" \
  --model "${model}" --corpus "${corpus}" --reps "${reps}" --tmp-dir "${repo}/build/bench" \
  "${force_qwen2[@]}")"
llama_line="$(grep '^llama.cpp: ' <<<"${llama_out}")"
llama_note="$(grep '^note: ' <<<"${llama_out}" || true)"

log "DeltaServe, warm word cache, ${reps} reps"
warm_line="$("${bin}" --model "${model}" --corpus "${corpus}" --reps "${reps}")"
log "DeltaServe, cold word cache (fresh tokenizer per rep), ${reps} reps"
cold_line="$("${bin}" --model "${model}" --corpus "${corpus}" --reps "${reps}" --no-cache-warmup)"

# --- 5. report ---------------------------------------------------------------------------------
llama_tokens="$(field tokens "${llama_line}")"
llama_mbs="$(field mb_s "${llama_line}")"
bytes="$(field bytes "${llama_line}")"
status=0
row() {  # name, line
  local tokens mbs
  tokens="$(field tokens "$2")"
  mbs="$(field mb_s "$2")"
  printf '| %s | %.2f | %s | %s |\n' "$1" "${mbs}" "${tokens}" \
    "$(awk -v a="${mbs}" -v b="${llama_mbs}" 'BEGIN { printf "%.2f×", a / b }')"
  if [[ "${tokens}" != "${llama_tokens}" ]]; then
    echo "MISMATCH: $1 produced ${tokens} tokens, llama.cpp ${llama_tokens}" >&2
    status=3
  fi
}

cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo
echo "Machine: ${cpu}, $(nproc) cores ($(uname -m), $(uname -r)); single-threaded tokenization"
echo "Corpus: ${corpus}, ${bytes} bytes, sha256 $(sha256sum "${corpus}" | cut -d' ' -f1)"
echo "Model: ${model}"
[[ -n "${llama_note}" ]] && echo "${llama_note#note: }"
echo
echo "| tokenizer | MB/s | tokens | vs llama.cpp |"
echo "| --- | ---: | ---: | ---: |"
row "llama.cpp (llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION})" "${llama_line}"
row "DeltaServe, warm word cache" "${warm_line}"
row "DeltaServe, cold word cache" "${cold_line}"
echo
echo "Best of ${reps} repetitions; MB = 10^6 bytes; corpus cut into paragraphs at blank lines."
if [[ "${status}" == 0 ]]; then
  echo "Token counts agree (${llama_tokens})."
else
  echo "**Token counts differ** (see stderr)."
fi
exit "${status}"
