#!/usr/bin/env bash
# Engine speed on the CPU, DeltaServe vs llama.cpp on the same GGUF files, in one command:
#   1. the venv with llama-cpp-python (bench/venv.sh; compiles llama.cpp the first time);
#   2. builds deltaserve-bench-engine and deltaserve-bench-bandwidth (and deltaserve-synth when
#      a model has to be synthesized);
#   3. synthesizes build/bench/synth-0.8b-{q8_0,q4_k_m}.gguf if missing (deltaserve-synth
#      --preset 0.8b, vocabulary of ../shared/golden/qwen3-vocab-qwen35pre.gguf);
#   4. measures the read bandwidth (deltaserve-bench-bandwidth, best of 5);
#   5. per model and scenario runs deltaserve-bench-engine and
#      bench/llama_cpp_engine_throughput.py (same ids, same threads, medians of --reps);
#   6. prints a markdown table on stdout (progress on stderr); raw JSON lines are kept in
#      build/bench/engine/.
#
#   bench/engine_bench.sh [--models q8_0,q4_k_m | --model FILE.gguf ...] [--tiny]
#                         [--scenarios prefill512,prefill4096,decode0,decode4096]
#                         [--reps N] [--threads N] [--decode N] [--no-bandwidth]
#   --tiny     use ../shared/golden/tiny-dense-{q8_0,q4_k_m}.gguf (checks the harness in seconds)
#   --model    a GGUF file to measure (repeatable; replaces --models)
#   scenarios: prefillN (N prompt tokens) and decodeN (64 decode steps at depth N)
# Defaults: both 0.8b models, all four scenarios, 5 reps, 2 threads, 64 decode tokens.
# Environment: DELTASERVE_BENCH_VENV (venv folder), PYTHON (interpreter that creates the venv).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/venv.sh
source "${repo}/bench/venv.sh"
python="${PYTHON:-python3}"
venv="${DELTASERVE_BENCH_VENV:-${repo}/build/bench-venv}"
golden="${repo}/../shared/golden"
build="${repo}/build/release"
out_dir="${repo}/build/bench/engine"
types="q8_0,q4_k_m"
models=()
tiny=0
scenarios="prefill512,prefill4096,decode0,decode4096"
reps=5
threads=2
decode=64
bandwidth=1

usage() {
  sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) [[ $# -ge 2 ]] || usage; types="$2"; shift 2 ;;
    --model) [[ $# -ge 2 ]] || usage; models+=("$2"); shift 2 ;;
    --tiny) tiny=1; shift ;;
    --scenarios) [[ $# -ge 2 ]] || usage; scenarios="$2"; shift 2 ;;
    --reps) [[ $# -ge 2 ]] || usage; reps="$2"; shift 2 ;;
    --threads) [[ $# -ge 2 ]] || usage; threads="$2"; shift 2 ;;
    --decode) [[ $# -ge 2 ]] || usage; decode="$2"; shift 2 ;;
    --no-bandwidth) bandwidth=0; shift ;;
    -h|--help) usage ;;
    *) echo "engine_bench: unknown argument '$1'" >&2; usage ;;
  esac
done
for n in "${reps}" "${threads}" "${decode}"; do
  [[ "${n}" =~ ^[1-9][0-9]*$ ]] || { echo "engine_bench: '${n}' is not a positive integer" >&2; exit 2; }
done
IFS=',' read -r -a scenario_list <<<"${scenarios}"
for s in "${scenario_list[@]}"; do
  [[ "${s}" =~ ^(prefill[1-9][0-9]*|decode[0-9]+)$ ]] ||
    { echo "engine_bench: bad scenario '${s}' (prefillN or decodeN)" >&2; exit 2; }
done

log() { echo "== $*" >&2; }
started=$(date +%s)

# --- 1. venv ------------------------------------------------------------------------------------
bench_venv_ensure "${venv}" "${python}" engine_bench

# --- 2. our binaries ----------------------------------------------------------------------------
cd "${repo}"
if [[ ! -f "${build}/build.ninja" ]]; then
  log "configuring ${build}"
  cmake --preset release >&2
fi
log "building deltaserve-bench-engine deltaserve-bench-bandwidth"
cmake --build "${build}" --target deltaserve-bench-engine deltaserve-bench-bandwidth >&2

# --- 3. models ----------------------------------------------------------------------------------
if [[ ${#models[@]} -eq 0 ]]; then
  IFS=',' read -r -a type_list <<<"${types}"
  for t in "${type_list[@]}"; do
    if [[ "${tiny}" == 1 ]]; then
      models+=("${golden}/tiny-dense-${t}.gguf")
      continue
    fi
    m="${repo}/build/bench/synth-0.8b-${t}.gguf"
    if [[ ! -f "${m}" ]]; then
      synth="${build}/worker/deltaserve-synth"
      if [[ ! -x "${synth}" ]]; then
        log "building deltaserve-synth"
        cmake --build "${build}" --target deltaserve-synth >&2 ||
          { echo "engine_bench: no deltaserve-synth; try --tiny" >&2; exit 1; }
      fi
      log "synthesizing ${m}"
      mkdir -p "$(dirname "${m}")"
      "${synth}" --preset 0.8b --type "${t}" --vocab-from "${golden}/qwen3-vocab-qwen35pre.gguf" \
        -o "${m}" >&2
    fi
    models+=("${m}")
  done
fi
for m in "${models[@]}"; do
  [[ -f "${m}" ]] || { echo "engine_bench: model '${m}' not found" >&2; exit 1; }
done
mkdir -p "${out_dir}"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- 4. bandwidth -------------------------------------------------------------------------------
bw_line=""
if [[ "${bandwidth}" == 1 ]]; then
  log "read bandwidth, ${threads} threads, 2 GiB, best of 5"
  bw_line="$("${build}/bench/deltaserve-bench-bandwidth" --threads "${threads}" --mib 2048 --reps 5)"
  echo "${bw_line}" >"${out_dir}/bandwidth.txt"
fi

# --- 5. runs ------------------------------------------------------------------------------------
results="${out_dir}/results.jsonl"
: >"${results}"
for m in "${models[@]}"; do
  name="$(basename "${m}" .gguf)"
  for s in "${scenario_list[@]}"; do
    if [[ "${s}" == prefill* ]]; then
      args=(--scenario prefill --prompt "${s#prefill}")
    else
      args=(--scenario decode --prompt "${s#decode}" --decode "${decode}")
    fi
    common=(-m "${m}" --threads "${threads}" --reps "${reps}" --batch 512 "${args[@]}")
    log "${name} ${s}: DeltaServe ($(cut -d' ' -f1 /proc/loadavg) load)"
    "${build}/bench/deltaserve-bench-engine" "${common[@]}" --json |
      tee "${out_dir}/${name}-${s}-deltaserve.jsonl" | tail -1 |
      sed "s/^{/{\"model\":\"${name}\",\"case\":\"${s}\",/" >>"${results}"
    log "${name} ${s}: llama.cpp ($(cut -d' ' -f1 /proc/loadavg) load)"
    # numpy's OpenBLAS would otherwise start spinning threads that compete with llama.cpp's.
    OPENBLAS_NUM_THREADS=1 "${venv}/bin/python" "${repo}/bench/llama_cpp_engine_throughput.py" \
      "${common[@]}" | tee "${out_dir}/${name}-${s}-llama.jsonl" | tail -1 |
      sed "s/^{/{\"model\":\"${name}\",\"case\":\"${s}\",/" >>"${results}"
  done
done
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- 6. report ----------------------------------------------------------------------------------
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo
echo "Machine: ${cpu}, $(nproc) cores ($(uname -m), $(uname -r)); ${threads} threads;" \
     "load average at start ${load_start}, at end ${load_end}; $(date -u +%Y-%m-%d)"
[[ -n "${bw_line}" ]] && echo "Read bandwidth (${threads} threads, 2 GiB, best of 5): $(sed -n 's/.*best_gb_s=\([^ ]*\).*/\1/p' <<<"${bw_line}") GB/s"
echo "Took $(( ($(date +%s) - started) / 60 )) min; raw results in ${out_dir}"
echo
"${python}" - "${results}" "${bw_line}" <<'PY'
import json, re, sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
bw = re.search(r"best_gb_s=([0-9.]+)", sys.argv[2])
bw = float(bw.group(1)) if bw else None
by_key = {}
for r in rows:
    by_key.setdefault((r["model"], r["case"]), {})[r["engine"]] = r

print("| model | scenario | DeltaServe tok/s | llama.cpp tok/s | ratio | DeltaServe peak RSS MiB "
      "| llama.cpp peak RSS MiB (net) | weights GB/s, DeltaServe / llama.cpp (of bandwidth) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
status = 0
for (model, case), e in by_key.items():
    ds, lc = e.get("deltaserve"), e.get("llama.cpp")
    if ds and lc and ds["ids_fnv1a"] != lc["ids_fnv1a"]:
        print(f"MISMATCH: {model} {case}: prompt ids differ", file=sys.stderr)
        status = 3
    cell = lambda r, k, f="{:.1f}": f.format(r[k]) if r else "–"
    ratio = (f"{ds['median_tok_s'] / lc['median_tok_s']:.2f}×" if ds and lc else "–")
    lc_rss = (f"{lc['peak_rss_mb']:.0f} ({lc['peak_rss_mb'] - lc['baseline_rss_mb']:.0f})"
              if lc else "–")
    scenario = (f"prefill {(ds or lc)['prompt']} tokens" if case.startswith("prefill")
                else f"decode {(ds or lc)['decode']} at depth {(ds or lc)['prompt']}")
    wbw = ""
    if case.startswith("decode") and ds:
        per_token = ds["decode_weight_bytes_per_token"]
        parts = []
        for r in (ds, lc):
            if r:
                gbs = per_token * r["median_tok_s"] / 1e9
                parts.append(f"{gbs:.1f}" + (f" ({100 * gbs / bw:.0f}%)" if bw else ""))
        wbw = " / ".join(parts)
    print(f"| {model} | {scenario} | {cell(ds, 'median_tok_s', '{:.2f}')} "
          f"| {cell(lc, 'median_tok_s', '{:.2f}')} | {ratio} | {cell(ds, 'peak_rss_mb', '{:.0f}')} "
          f"| {lc_rss} | {wbw} |")
first = next(iter(rows), None)
if first:
    ds = next((r for r in rows if r["engine"] == "deltaserve"), None)
    lc = next((r for r in rows if r["engine"] == "llama.cpp"), None)
    print()
    print(f"Medians of {first['reps']} repetitions; prefill in chunks of {first['batch']} tokens "
          "with last-token logits only; decode = greedy single-token steps after an untimed "
          "prefill of the depth.")
    if ds:
        print(f"DeltaServe: KV {ds['kv_type']}; a decode step reads "
              f"{ds['decode_weight_bytes_per_token'] / 1e6:.1f} MB of weights (last model).")
    if lc:
        print(f"llama.cpp {lc['version']}: KV {lc['kv_type']}, flash attention {lc['flash_attn']}, "
              f"n_batch = n_ubatch = {lc['batch']}, mmap; net RSS = peak minus the interpreter's "
              f"{lc['baseline_rss_mb']:.0f} MiB before loading the model.")
sys.exit(status)
PY
