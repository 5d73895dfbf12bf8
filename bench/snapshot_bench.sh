#!/usr/bin/env bash
# Session snapshots in one command: time to first token (TTFT) of every turn of an agent-style
# conversation, cold vs restored from a snapshot, next to llama.cpp's server with its prompt cache.
#   1. the venv with llama-cpp-python (bench/venv.sh) plus its server's packages, redis-py and
#      matplotlib (pip, without rebuilding llama.cpp);
#   2. builds deltaserve-worker, deltaserve-router (and deltaserve-synth when the model has to be
#      made) in --build-dir; synthesizes build/bench/synth-0.8b-q4_k_m.gguf if missing;
#   3. runs bench/agent_conversation.py (a system prompt of --system-tokens, then --turns user turns
#      of --user-tokens each, replies of --max-tokens greedy tokens appended verbatim, streamed
#      chat completions) against, each with fresh processes, the same threads and context:
#        cold    one worker with --snapshot-ram 0 behind a router;
#        cached  one worker with snapshots on (--snapshot-ram) behind a router;
#        redis   two workers sharing one redis-server (started here on a free loopback port), one
#                router each, turns alternating between the routers: every turn's prefix has to
#                come from Redis (skipped, with a note, when the worker has no --redis flag);
#        llama   llama-cpp-python's OpenAI server (`python -m llama_cpp.server`) on the same model
#                file with its RAM prompt cache on (--cache true);
#   4. reads the workers' snapshot metrics, times SET and GET of a blob the size of the last turn's
#      snapshot against a fresh redis-server (redis-py);
#   5. prints markdown tables on stdout (progress on stderr), keeps the raw JSON lines, worker
#      logs and metrics in --out-dir and plots TTFT against the turn (log y) to
#      DIR/snapshot-ttft.png when matplotlib is in the venv.
#
#   bench/snapshot_bench.sh [--model FILE.gguf | --tiny] [--turns N] [--user-tokens N]
#                           [--system-tokens N] [--max-tokens N] [--threads N] [--ctx N]
#                           [--snapshot-ram SIZE] [--snapshot-interval N] [--think-time S]
#                           [--scenarios cold,cached,redis,llama] [--seed N] [--build-dir DIR]
#                           [--out-dir DIR] [--wait-idle CORES] [--wait-max SECONDS]
#   bench/snapshot_bench.sh --report DIR    # the tables and the plot again from DIR, nothing run
#   --tiny        ../shared/golden/tiny-dense-q8_0.gguf, 4 short turns: checks the harness in
#                 about a minute
#   --build-dir   a configured build folder to build and take the programs from (default
#                 build/release)
#   --think-time  seconds between a reply and the next turn (the agent running its tool; the
#                 worker publishes snapshots to Redis asynchronously); default 1
#   --wait-idle   before each scenario, wait until other processes use less than CORES cores over
#                 3 s (default 0.5; 0 = do not wait), --wait-max seconds in all (default 600)
# Defaults: the 0.8b Q4_K_M synth model, 10 turns of ~300 user tokens after a ~4,500-token system
# prompt (history ~7.8K tokens at turn 10), 16 reply tokens, 2 threads, --ctx 10240,
# --snapshot-ram 4GiB, --snapshot-interval 1024, seed 1.
# A run waits for any other benchmark to finish (flock on build/bench/engine-bench.lock). Do not
# edit this file while it runs: bash reads it as it goes.
# Environment: DELTASERVE_BENCH_VENV (venv folder), PYTHON (interpreter that creates the venv).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/venv.sh
source "${repo}/bench/venv.sh"
source "${repo}/bench/lock.sh"
python="${PYTHON:-python3}"
venv="${DELTASERVE_BENCH_VENV:-${repo}/build/bench-venv}"
golden="${repo}/../shared/golden"
build="${repo}/build/release"
out_dir=""
model=""
tiny=0
turns=10
user_tokens=300
system_tokens=4500
max_tokens=16
threads=2
ctx=10240
snapshot_ram=4GiB
snapshot_interval=1024
think_time=1
scenarios="cold,cached,redis,llama"
seed=1
report_only=""
wait_idle=0.5
wait_max=600
waited=0

usage() {
  sed -n '2,42p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

set_turns=0 set_user=0 set_system=0 set_ctx=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) [[ $# -ge 2 ]] || usage; model="$2"; shift 2 ;;
    --tiny) tiny=1; shift ;;
    --turns) [[ $# -ge 2 ]] || usage; turns="$2"; set_turns=1; shift 2 ;;
    --user-tokens) [[ $# -ge 2 ]] || usage; user_tokens="$2"; set_user=1; shift 2 ;;
    --system-tokens) [[ $# -ge 2 ]] || usage; system_tokens="$2"; set_system=1; shift 2 ;;
    --max-tokens) [[ $# -ge 2 ]] || usage; max_tokens="$2"; shift 2 ;;
    --threads) [[ $# -ge 2 ]] || usage; threads="$2"; shift 2 ;;
    --ctx) [[ $# -ge 2 ]] || usage; ctx="$2"; set_ctx=1; shift 2 ;;
    --snapshot-ram) [[ $# -ge 2 ]] || usage; snapshot_ram="$2"; shift 2 ;;
    --snapshot-interval) [[ $# -ge 2 ]] || usage; snapshot_interval="$2"; shift 2 ;;
    --think-time) [[ $# -ge 2 ]] || usage; think_time="$2"; shift 2 ;;
    --scenarios) [[ $# -ge 2 ]] || usage; scenarios="$2"; shift 2 ;;
    --seed) [[ $# -ge 2 ]] || usage; seed="$2"; shift 2 ;;
    --build-dir) [[ $# -ge 2 ]] || usage; build="$(cd "$2" && pwd)"; shift 2 ;;
    --out-dir) [[ $# -ge 2 ]] || usage; out_dir="$2"; shift 2 ;;
    --wait-idle) [[ $# -ge 2 ]] || usage; wait_idle="$2"; shift 2 ;;
    --wait-max) [[ $# -ge 2 ]] || usage; wait_max="$2"; shift 2 ;;
    --report) [[ $# -ge 2 ]] || usage; report_only="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "snapshot_bench: unknown argument '$1'" >&2; usage ;;
  esac
done
if [[ "${tiny}" == 1 ]]; then
  # The tiny models' 2,048-entry vocabulary splits words into more tokens.
  [[ "${set_turns}" == 1 ]] || turns=4
  [[ "${set_user}" == 1 ]] || user_tokens=60
  [[ "${set_system}" == 1 ]] || system_tokens=150
  [[ "${set_ctx}" == 1 ]] || ctx=4096
fi
for n in "${turns}" "${user_tokens}" "${system_tokens}" "${max_tokens}" "${threads}" "${ctx}" \
         "${snapshot_interval}" "${seed}"; do
  [[ "${n}" =~ ^[1-9][0-9]*$ ]] ||
    { echo "snapshot_bench: '${n}' is not a positive integer" >&2; exit 2; }
done
[[ "${scenarios}" =~ ^(cold|cached|redis|llama)(,(cold|cached|redis|llama))*$ ]] ||
  { echo "snapshot_bench: --scenarios is a list of cold,cached,redis,llama" >&2; exit 2; }
[[ "${wait_idle}" =~ ^[0-9]+(\.[0-9]+)?$ && "${wait_max}" =~ ^[0-9]+$ &&
   "${think_time}" =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  { echo "snapshot_bench: --wait-idle wants cores (e.g. 0.5), --wait-max and --think-time" \
         "seconds" >&2; exit 2; }
[[ -n "${out_dir}" ]] || out_dir="${repo}/build/bench/snapshots"

log() { echo "== $*" >&2; }

# Prints the tables from DIR/results.jsonl ("$1") and plots into DIR.
report() {
plot_python="${python}"
"${venv}/bin/python" -c 'import matplotlib' 2>/dev/null && plot_python="${venv}/bin/python"
"${plot_python}" - "$1" <<'PY'
import json, os, statistics, sys

out_dir = sys.argv[1]
rows = [json.loads(line) for line in open(os.path.join(out_dir, "results.jsonl")) if line.strip()]
meta = next((r for r in rows if r["kind"] == "meta"), {})
turns = {}
for r in rows:
    if r["kind"] == "turn":
        turns.setdefault(r["scenario"], {})[r["turn"]] = r
runs = {r["scenario"]: r for r in rows if r["kind"] == "scenario"}
skipped = {r["scenario"]: r["why"] for r in rows if r["kind"] == "skipped"}
status = 0


def fmt_s(x):
    if x is None:
        return "–"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def reusable(series, t):
    """Tokens of turn t's prompt that the previous turn already held: its prompt, its reply and
    the turn end (<|im_end|>, newline)."""
    prev = series.get(t - 1)
    if prev is None or prev.get("prompt_tokens") is None:
        return None
    return prev["prompt_tokens"] + (prev.get("completion_tokens") or 0) + 2


cold = turns.get("cold", {})
n_turns = max((t for s in turns.values() for t in s), default=0)
print("| turn | prompt tokens | cold TTFT s | cached, same worker: TTFT s | cold / cached "
      "| reused (cached / reusable) | other worker via Redis: TTFT s | cold / Redis "
      "| reused via Redis | llama.cpp server: TTFT s (prompt tokens) | cold / llama.cpp |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for t in range(1, n_turns + 1):
    c = cold.get(t)
    base = next((s[t] for s in (turns.get(k, {}) for k in ("cold", "cached", "redis"))
                 if t in s), None)
    cells = [str(t), str(base["prompt_tokens"]) if base else "–",
             fmt_s(c["ttft_s"]) if c else "–"]
    for name in ("cached", "redis"):
        r = turns.get(name, {}).get(t)
        if r is None:
            cells += ["–", "–", "–"]
            continue
        ratio = (f"**{c['ttft_s'] / r['ttft_s']:.1f}×**" if c and c["ttft_s"] and r["ttft_s"]
                 else "–")
        reuse = reusable(turns[name], t)
        if r.get("cached_tokens") is None:
            reused = "not reported"
        elif reuse:
            reused = (f"{r['cached_tokens']} / {reuse} "
                      f"({100 * r['cached_tokens'] / reuse:.1f}%)")
        else:
            reused = f"{r['cached_tokens']} (first turn)"
        cells += [fmt_s(r["ttft_s"]), ratio, reused]
    l = turns.get("llama", {}).get(t)
    if l:
        cells += [f"{fmt_s(l['ttft_s'])} ({l['prompt_tokens']})",
                  f"{c['ttft_s'] / l['ttft_s']:.1f}×" if c and l["ttft_s"] else "–"]
    else:
        cells += ["–", "–"]
    print("| " + " | ".join(cells) + " |")
print()

# Same replies: a restored snapshot continues exactly, so every DeltaServe scenario should give
# the cold run's replies. Once one reply differs the histories differ, so only the first
# difference says something; the note says whether that turn restored anything.
notes = []
for name in ("cached", "redis"):
    s = turns.get(name)
    if s and cold:
        same = sum(1 for t in s if t in cold and s[t]["reply"] == cold[t]["reply"])
        note = f"{name}: {same}/{len(s)} replies identical to the cold run's"
        diff = [t for t in sorted(s) if t in cold and s[t]["reply"] != cold[t]["reply"]]
        if diff:
            t = diff[0]
            same_prompt = s[t]["prompt_tokens"] == cold[t]["prompt_tokens"]
            note += (f" (first difference at turn {t}, {s[t]['cached_tokens'] or 0} tokens "
                     f"restored, prompt {'of the same length' if same_prompt else 'already different'})")
            status = 3
            print(f"MISMATCH: {name}: {len(diff)} replies differ from the cold run's, the first "
                  f"at turn {t}", file=sys.stderr)
        notes.append(note)
if notes:
    print("Exactness: " + "; ".join(notes) + ".")
for name, series in turns.items():
    for t, r in sorted(series.items()):
        for e in r.get("errors") or []:
            print(f"Retried: {name} turn {t} after `{e[:160]}`.")
for name, why in skipped.items():
    print(f"Not measured: {name}: {why}")

# llama.cpp's cache reports nothing; its first turn is a cold prefill, and a later turn's TTFT
# at that rate says how many tokens it recomputed.
l = turns.get("llama", {})
if l.get(1) and l[1]["ttft_s"]:
    rate = l[1]["prompt_tokens"] / l[1]["ttft_s"]
    parts = []
    for t in sorted(l):
        if t == 1 or not l[t]["ttft_s"] or l[t]["prompt_tokens"] is None:
            continue
        computed = min(l[t]["prompt_tokens"], l[t]["ttft_s"] * rate)
        parts.append(f"turn {t}: ~{computed:.0f} of {l[t]['prompt_tokens']}")
    print(f"llama.cpp: turn 1 prefilled at {rate:.0f} tok/s (cold, {l[1]['prompt_tokens']} "
          f"tokens); tokens each later turn computed at that rate (TTFT × rate): "
          + ", ".join(parts) + ".")
print()

# Snapshot sizes and the workers' snapshot metrics.
state = meta.get("recurrent_state_bytes")
kv_tok = meta.get("kv_bytes_per_token")
last = max((r["prompt_tokens"] for s in turns.values() for r in s.values()
            if r.get("prompt_tokens")), default=0)
if state and kv_tok:
    print(f"Bytes per snapshot: recurrent state {state / 2**20:.2f} MiB (all DeltaNet layers, "
          f"f32) + KV {kv_tok:,} B/token (f16 K and V of the attention layers); at "
          f"{last:,} tokens: {state / 2**20:.2f} + {kv_tok * last / 2**20:.1f} = "
          f"{(state + kv_tok * last) / 2**20:.1f} MiB. The RAM tier copies only the state and "
          f"shares the KV pages copy-on-write; a Redis blob carries both (whole pages).")
print()
print("| scenario | worker | snapshots taken | capture µs each | restores (RAM / Redis) "
      "| restore ms each | tokens reused | rejected, failed, skipped, dropped, errors |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
for r in rows:
    if r["kind"] != "metrics":
        continue
    m = r["values"]
    def get(name, **labels):
        total = None
        for key, v in m.items():
            base, _, lab = key.partition("{")
            if base != name:
                continue
            if all(f'{k}="{val}"' in lab for k, val in labels.items()):
                total = (total or 0) + v
        return total
    cap = get("deltaserve_model_snapshot_captures_total")
    cap_s = get("deltaserve_model_snapshot_capture_seconds_total")
    hits_ram = get("deltaserve_model_snapshot_hits_total", tier="ram") or 0
    hits_redis = get("deltaserve_model_snapshot_hits_total", tier="redis") or 0
    res_s = get("deltaserve_model_snapshot_restore_seconds_total")
    reused = get("deltaserve_model_snapshot_tokens_reused_total")
    others = []
    for key, v in sorted(m.items()):
        base = key.partition("{")[0]
        if ("rejected" in base or "failures" in base or "skipped" in base or "errors" in base
                or "dropped" in base) and v:
            short = key.replace('model="bench",', "").replace('{model="bench"}', "")
            others.append(f"{short} {v:g}")
    n_res = hits_ram + hits_redis
    cells = [r["scenario"], r["worker"], f"{cap:g}" if cap is not None else "–",
             f"{1e6 * cap_s / cap:.0f}" if cap and cap_s is not None else "–",
             f"{hits_ram:g} / {hits_redis:g}",
             f"{1e3 * res_s / n_res:.2f}" if n_res and res_s is not None else "–",
             f"{reused:g}" if reused is not None else "–", "; ".join(others) or "–"]
    print("| " + " | ".join(cells) + " |")
for r in rows:
    if r["kind"] != "metrics" or r["scenario"] != "redis":
        continue
    m = {k.partition("{")[0]: v for k, v in r["values"].items()}
    written = m.get("deltaserve_model_snapshot_redis_written_total") or 0
    hits = m.get("deltaserve_model_snapshot_redis_hits_total") or 0
    pub_n = m.get("deltaserve_model_snapshot_redis_publish_seconds_count") or 0
    parts = []
    if written:
        parts.append(f"{written:g} blobs written, "
                     f"{m['deltaserve_model_snapshot_redis_written_bytes_total'] / written / 2**20:.1f}"
                     " MiB each on average")
    if pub_n:
        parts.append("published "
                     f"{1e3 * m['deltaserve_model_snapshot_redis_publish_seconds_sum'] / pub_n:.0f}"
                     " ms after the sequence's end on average")
    if hits:
        parts.append(f"{hits:g} fetched, "
                     f"{m['deltaserve_model_snapshot_redis_fetched_bytes_total'] / hits / 2**20:.1f}"
                     " MiB each on average")
    if parts:
        print(f"Redis tier, {r['worker']}: " + "; ".join(parts) + ".")
print()
io = [r for r in rows if r["kind"] == "redis_io"]
if io:
    print("| Redis blob | SET MB/s (median, ms) | GET MB/s (median, ms) | repetitions |")
    print("| ---: | ---: | ---: | ---: |")
    for r in io:
        print(f"| {r['bytes'] / 2**20:.1f} MiB ({r['what']}) "
              f"| {r['bytes'] / 1e6 / r['set_s']:.0f} ({1e3 * r['set_s']:.1f}) "
              f"| {r['bytes'] / 1e6 / r['get_s']:.0f} ({1e3 * r['get_s']:.1f}) | {r['reps']} |")
    print()
    print("Redis: redis-py with its hiredis parser on loopback, one connection, random "
          "(incompressible) bytes, "
          "redis-server with `--save \"\" --appendonly no`.")
print()
print("| scenario | command | others' CPU, cores | wall s |")
print("| --- | --- | ---: | ---: |")
for name, r in runs.items():
    print(f"| {name} | `{r['command']}` | {r['others_cpu']:.2f} | {r['wall_s']:.0f} |")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("(matplotlib not in the venv: no plot)", file=sys.stderr)
else:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = {"cold": ("DeltaServe cold (--snapshot-ram 0)", "o-"),
              "cached": ("DeltaServe, snapshot on the same worker", "s-"),
              "redis": ("DeltaServe, other worker via Redis", "^-"),
              "llama": ("llama.cpp server, --cache true", "x--")}
    for name, (label, style) in labels.items():
        s = turns.get(name)
        if not s:
            continue
        pts = [(t, s[t]["ttft_s"]) for t in sorted(s) if s[t]["ttft_s"]]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("turn")
    ax.set_ylabel("time to first token, s (log)")
    ax.set_xticks(range(1, n_turns + 1))
    if cold:
        ax2 = ax.secondary_xaxis("top", functions=(lambda x: x, lambda x: x))
        ax2.set_xticks(range(1, n_turns + 1))
        ax2.set_xticklabels([f"{cold[t]['prompt_tokens'] / 1000:.1f}K" if t in cold else ""
                             for t in range(1, n_turns + 1)], fontsize=7)
        ax2.set_xlabel("prompt tokens", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "snapshot-ttft.png"), dpi=100)
    print(f"(plot: {out_dir}/snapshot-ttft.png)", file=sys.stderr)
sys.exit(status)
PY
}

if [[ -n "${report_only}" ]]; then
  report "${report_only}"
  exit
fi

mkdir -p "${repo}/build/bench" "${out_dir}"
bench_lock "${repo}"
started=$(date +%s)
IFS=',' read -r -a scenario_list <<<"${scenarios}"
want() { [[ ",${scenarios}," == *",$1,"* ]]; }

# --- 1. venv ------------------------------------------------------------------------------------
# The llama scenario needs llama-cpp-python; redis-py (Redis SET/GET timing) and matplotlib (the
# plot) are taken from the venv when it is there.
if want llama; then
  bench_venv_ensure "${venv}" "${python}" snapshot_bench
fi
# The server's own packages only: `pip install llama-cpp-python[server]` would rebuild llama.cpp.
if [[ -x "${venv}/bin/python" ]] &&
   [[ -n "$(bench_venv_installed_version "${venv}" llama_cpp_python)" ]] &&
   ! "${venv}/bin/python" -c 'import uvicorn, fastapi, sse_starlette, starlette_context
import pydantic_settings, redis, hiredis, matplotlib' 2>/dev/null; then
  log "installing llama_cpp.server's packages, redis-py and matplotlib into ${venv}"
  "${venv}/bin/pip" install --quiet uvicorn fastapi sse-starlette starlette-context \
    pydantic-settings redis hiredis matplotlib >&2
fi

# --- 2. programs and model ----------------------------------------------------------------------
cd "${repo}"
if [[ ! -f "${build}/build.ninja" ]]; then
  [[ "${build}" == "${repo}/build/release" ]] ||
    { echo "snapshot_bench: ${build} is not a configured build folder" >&2; exit 1; }
  log "configuring ${build}"
  cmake --preset release >&2
fi
log "building deltaserve-worker and deltaserve-router in ${build}"
cmake --build "${build}" --target deltaserve-worker deltaserve-router >&2
worker_bin="${build}/worker/deltaserve-worker"
router_bin="${build}/router/deltaserve-router"
if [[ -z "${model}" ]]; then
  if [[ "${tiny}" == 1 ]]; then
    model="${golden}/tiny-dense-q8_0.gguf"
  else
    model="${repo}/build/bench/synth-0.8b-q4_k_m.gguf"
    if [[ ! -f "${model}" ]]; then
      synth="${build}/worker/deltaserve-synth"
      [[ -x "${synth}" ]] || { log "building deltaserve-synth"; cmake --build "${build}" \
        --target deltaserve-synth >&2; }
      log "synthesizing ${model}"
      "${synth}" --preset 0.8b --type q4_k_m --vocab-from "${golden}/qwen3-vocab-qwen35pre.gguf" \
        -o "${model}" >&2
    fi
  fi
fi
[[ -f "${model}" ]] || { echo "snapshot_bench: model '${model}' not found" >&2; exit 1; }
# Which source the binaries come from: a clean `git archive` folder with a .commit file (as in
# docs/benchmarks.md), or a git checkout, marked when it has uncommitted changes.
src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "${build}/CMakeCache.txt")"
if [[ -f "${src}/.commit" ]]; then
  built_from="$(cat "${src}/.commit") (clean export in ${src#"${repo}"/})"
elif git -C "${src}" rev-parse --short HEAD >/dev/null 2>&1; then
  built_from="$(git -C "${src}" rev-parse --short HEAD)"
  [[ -z "$(git -C "${src}" status --porcelain --untracked-files=no)" ]] ||
    built_from+=" plus uncommitted changes"
else
  built_from="unknown"
fi
have_redis_flag=0
worker_help="$("${worker_bin}" --help 2>&1 || true)"
[[ "${worker_help}" == *--redis* ]] && have_redis_flag=1

# --- 3. scenarios -------------------------------------------------------------------------------
pids=()
# shellcheck disable=SC2317  # called by the EXIT trap and between scenarios
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "${p}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "${p}" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT

# Starts "$@" with stdout and stderr in $out_dir/$name.log and waits for a line matching the
# sed expression $pattern that prints the port; sets $last_pid and $last_port.
start() {
  local name="$1" pattern="$2"
  shift 2
  : >"${out_dir}/${name}.log"
  "$@" >"${out_dir}/${name}.log" 2>&1 &
  last_pid=$!
  pids+=("${last_pid}")
  last_port=""
  for _ in $(seq 1 1200); do
    last_port="$(sed -n "${pattern}" "${out_dir}/${name}.log" | head -1)"
    [[ -n "${last_port}" ]] && return 0
    kill -0 "${last_pid}" 2>/dev/null || break
    sleep 0.1
  done
  echo "snapshot_bench: ${name} did not start; its log:" >&2
  tail -30 "${out_dir}/${name}.log" >&2
  exit 1
}
listening='s/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p'
metrics_at='s/.*metrics on [^ ]*:\([0-9][0-9]*\)\/metrics.*/\1/p'
free_port() {
  "${python}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_http() {  # url, what
  for _ in $(seq 1 1200); do
    curl -sf -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "snapshot_bench: $2 never answered $1" >&2
  exit 1
}

# Starts a worker ("$1": name, the rest: extra flags); sets $worker_port and $worker_metrics.
start_worker() {
  local name="$1"
  shift
  start "${name}" "${listening}" "${worker_bin}" --model "bench=${model}" \
    --listen 127.0.0.1:0 --threads "${threads}" --ctx "${ctx}" --parallel 2 --metrics-port 0 \
    --snapshot-interval "${snapshot_interval}" "$@"
  worker_port="${last_port}"
  worker_metrics="$(sed -n "${metrics_at}" "${out_dir}/${name}.log" | head -1)"
}
start_router() {  # name, worker port; sets $router_url
  start "$1" "${listening}" "${router_bin}" --listen 127.0.0.1:0 --worker "127.0.0.1:$2"
  router_url="http://127.0.0.1:${last_port}"
  wait_http "${router_url}/ready" "$1"
}
start_redis() {  # name; sets $redis_port
  redis_port="$(free_port)"
  # No persistence; the cap keeps a long run inside this machine's RAM (oldest keys go first).
  start "$1" 's/.*Ready to accept connections.*/ok/p' redis-server --bind 127.0.0.1 \
    --port "${redis_port}" --save "" --appendonly no --maxmemory 4gb \
    --maxmemory-policy allkeys-lru
}
# Appends a worker's snapshot metrics to the results.
save_metrics() {  # scenario, worker label, metrics port
  curl -sf "http://127.0.0.1:$3/metrics" >"${out_dir}/$1-$2.metrics" || return 0
  "${python}" - "$1" "$2" "${out_dir}/$1-$2.metrics" >>"${results}" <<'PY'
import json, sys
values = {}
for line in open(sys.argv[3]):
    if line.startswith("deltaserve_model_snapshot") or "redis" in line.split(" ")[0]:
        key, _, v = line.rstrip("\n").rpartition(" ")
        try:
            values[key] = float(v)
        except ValueError:
            pass
print(json.dumps({"kind": "metrics", "scenario": sys.argv[1], "worker": sys.argv[2],
                  "values": values}))
PY
}

busy_seconds() {
  awk '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat
}
ours_seconds() {  # CPU seconds of the processes this script started (live ones)
  local total=0 p
  for p in "${pids[@]}"; do
    total=$(awk -v t="${total}" '{ sub(/^.*\) /, ""); printf "%.2f", t + ($12 + $13) / 100 }' \
      "/proc/${p}/stat" 2>/dev/null || echo "${total}")
  done
  echo "${total}"
}
# Waits until other processes use less than --wait-idle cores over 3 s (nothing of ours runs
# then); --wait-max bounds the waiting of the whole run.
wait_for_idle() {
  local b0 b1 used
  awk -v w="${wait_idle}" 'BEGIN { exit !(w > 0) }' || return 0
  while :; do
    b0=$(busy_seconds); sleep 3; b1=$(busy_seconds)
    used=$(awk -v a="${b0}" -v b="${b1}" 'BEGIN { printf "%.2f", (b - a) / 3 }')
    awk -v u="${used}" -v w="${wait_idle}" 'BEGIN { exit !(u < w) }' && return 0
    waited=$((waited + 3))
    if (( waited >= wait_max )); then
      log "others use ${used} cores; --wait-max (${wait_max} s) spent, measuring anyway"
      return 0
    fi
    (( waited % 30 == 0 )) && log "waiting for an idle machine (others use ${used} cores)"
  done
}
# Runs the conversation against the URLs in "$@" as scenario $1 and records the CPU other
# processes used meanwhile (busy time of the machine minus ours and the client's).
converse() {
  local name="$1" b0 o0 t0 b1 o1 t1 client_cpu url_args=()
  shift
  for u in "$@"; do url_args+=(--url "$u"); done
  wait_for_idle
  log "${name}: ${turns} turns"
  b0=$(busy_seconds) o0=$(ours_seconds) t0=$(date +%s.%N)
  echo 0 >"${out_dir}/client-cpu"
  # A server that dies mid-conversation (llama.cpp's was once SIGKILLed after 50 min on one
  # turn) ends this scenario only: the turns so far stay in the results and the run goes on.
  if ! "${python}" "${repo}/bench/agent_conversation.py" "${url_args[@]}" --scenario "${name}" \
      --turns "${turns}" --system-tokens "${system_tokens}" --user-tokens "${user_tokens}" \
      --max-tokens "${max_tokens}" --seed "${seed}" --think-time "${think_time}" --warmup \
      --out "${results}" --cpu-out "${out_dir}/client-cpu" >/dev/null; then
    log "${name}: the client stopped early (its error is above); keeping the turns it finished"
  fi
  b1=$(busy_seconds) o1=$(ours_seconds) t1=$(date +%s.%N)
  client_cpu="$(cat "${out_dir}/client-cpu")"
  "${python}" -c 'import json, sys
name, cmd = sys.argv[1], sys.argv[2]
b0, b1, o0, o1, t0, t1, c = map(float, sys.argv[3:])
print(json.dumps({"kind": "scenario", "scenario": name, "command": cmd, "wall_s": t1 - t0,
                  "others_cpu": max(0.0, (b1 - b0 - (o1 - o0) - c) / (t1 - t0))}))' \
    "${name}" "${scenario_cmd}" "${b0}" "${b1}" "${o0}" "${o1}" "${t0}" "${t1}" \
    "${client_cpu}" >>"${results}"
}

results="${out_dir}/results.jsonl"
: >"${results}"
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
worker_common="--threads ${threads} --ctx ${ctx} --parallel 2 --snapshot-interval ${snapshot_interval}"

for s in "${scenario_list[@]}"; do
  case "${s}" in
    cold)
      start_worker cold-worker --snapshot-ram 0
      w_metrics="${worker_metrics}"
      start_router cold-router "${worker_port}"
      scenario_cmd="deltaserve-worker ${worker_common} --snapshot-ram 0"
      converse cold "${router_url}"
      save_metrics cold worker "${w_metrics}"
      ;;
    cached)
      start_worker cached-worker --snapshot-ram "${snapshot_ram}"
      w_metrics="${worker_metrics}"
      start_router cached-router "${worker_port}"
      scenario_cmd="deltaserve-worker ${worker_common} --snapshot-ram ${snapshot_ram}"
      converse cached "${router_url}"
      save_metrics cached worker "${w_metrics}"
      ;;
    redis)
      if [[ "${have_redis_flag}" != 1 ]]; then
        echo "{\"kind\":\"skipped\",\"scenario\":\"redis\",\"why\":\"this deltaserve-worker has no --redis flag (built from ${built_from})\"}" \
          >>"${results}"
        log "redis: skipped, the worker has no --redis flag"
        continue
      fi
      start_redis redis-server
      redis_url="redis://127.0.0.1:${redis_port}"
      start_worker redis-worker-a --snapshot-ram "${snapshot_ram}" --redis "${redis_url}"
      a_port="${worker_port}" a_metrics="${worker_metrics}"
      start_worker redis-worker-b --snapshot-ram "${snapshot_ram}" --redis "${redis_url}"
      b_port="${worker_port}" b_metrics="${worker_metrics}"
      start_router redis-router-a "${a_port}"
      a_url="${router_url}"
      start_router redis-router-b "${b_port}"
      b_url="${router_url}"
      scenario_cmd="2 × deltaserve-worker ${worker_common} --snapshot-ram ${snapshot_ram} --redis redis://127.0.0.1:PORT, one router each, turns alternating"
      converse redis "${a_url}" "${b_url}"
      save_metrics redis worker-a "${a_metrics}"
      save_metrics redis worker-b "${b_metrics}"
      redis-cli -p "${redis_port}" info memory | grep -E '^used_memory_human|^maxmemory_human' \
        >"${out_dir}/redis-memory.txt" || true
      redis-cli -p "${redis_port}" dbsize >>"${out_dir}/redis-memory.txt" || true
      ;;
    llama)
      llama_port="$(free_port)"
      # The server's default --logits_all true computes the output layer for every prompt token
      # (a 248K-vocabulary row each: 27% of its 4,832-token first turn here) and keeps them in an
      # n_ctx x n_vocab float array (10 GB at --ctx 10240), which every RAM-cache entry copies:
      # it was OOM-killed at turn 6-7 (22-24 GB RSS, dmesg, 2026-11-25). A chat completion needs
      # the last row only, as in the engine. The cache's own size counts only llama.cpp's state
      # (~100 MB a turn here); 400 MiB keeps the last ~4 turns, all a conversation can reuse.
      llama_cache_bytes=$((400 << 20))
      # numpy's OpenBLAS would otherwise start spinning threads next to llama.cpp's.
      start llama-server 's/.*Uvicorn running on.*/ok/p' env OPENBLAS_NUM_THREADS=1 \
        "${venv}/bin/python" -m llama_cpp.server --model "${model}" --model_alias bench \
        --host 127.0.0.1 --port "${llama_port}" --n_threads "${threads}" \
        --n_threads_batch "${threads}" --n_ctx "${ctx}" --chat_format chatml \
        --logits_all false --cache true --cache_type ram --cache_size "${llama_cache_bytes}"
      wait_http "http://127.0.0.1:${llama_port}/v1/models" llama-server
      scenario_cmd="python -m llama_cpp.server --n_threads ${threads} --n_threads_batch ${threads} --n_ctx ${ctx} --chat_format chatml --logits_all false --cache true --cache_type ram --cache_size ${llama_cache_bytes}"
      converse llama "http://127.0.0.1:${llama_port}"
      ;;
  esac
  stop_all
done

# --- 4. sizes and Redis throughput ---------------------------------------------------------------
# From the worker's memory plan (any worker log): the f16 KV bytes per token and the recurrent
# state per sequence.
plan_log="$(find "${out_dir}" -maxdepth 1 -name '*worker*.log' 2>/dev/null | sort | head -1 || true)"
kv_per_token="" state_bytes=""
if [[ -n "${plan_log}" ]]; then
  kv_per_token="$(awk '/<- chosen/ { gsub(",", "", $5); print $5; exit }' "${plan_log}")"
  state_bytes="$(awk '/^recurrent state per sequence/ { on = 1 }
    on && $1 == "total" { gsub(",", "", $2); print $2; exit }' "${plan_log}")"
fi
last_prompt="$("${python}" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(max([r["prompt_tokens"] or 0 for r in rows if r["kind"] == "turn"] or [0]))' "${results}")"
"${python}" -c 'import json, subprocess, sys
print(json.dumps({"kind": "meta", "model": sys.argv[1], "turns": int(sys.argv[2]),
                  "system_tokens": int(sys.argv[3]), "user_tokens": int(sys.argv[4]),
                  "max_tokens": int(sys.argv[5]), "threads": int(sys.argv[6]),
                  "ctx": int(sys.argv[7]), "snapshot_ram": sys.argv[8],
                  "kv_bytes_per_token": int(sys.argv[9]) if sys.argv[9] else None,
                  "recurrent_state_bytes": int(sys.argv[10]) if sys.argv[10] else None,
                  "think_time_s": float(sys.argv[11])}))' \
  "$(basename "${model}")" "${turns}" "${system_tokens}" "${user_tokens}" "${max_tokens}" \
  "${threads}" "${ctx}" "${snapshot_ram}" "${kv_per_token}" "${state_bytes}" "${think_time}" \
  >>"${results}"
if [[ -n "${kv_per_token}" && -n "${state_bytes}" && "${last_prompt}" -gt 0 ]] &&
   "${venv}/bin/python" -c 'import redis' 2>/dev/null; then
  start_redis redis-io
  log "timing Redis SET/GET of snapshot-sized blobs on port ${redis_port}"
  "${venv}/bin/python" - "${redis_port}" "${state_bytes}" "${kv_per_token}" "${last_prompt}" \
      >>"${results}" <<'PY'
import json, os, statistics, sys, time
import redis

port, state, kv_tok, tokens = map(int, sys.argv[1:])
pages = -(-tokens // 256)
r = redis.Redis(host="127.0.0.1", port=port)
for what, size in ((f"{tokens:,}-token snapshot: state + {pages} KV pages", state + pages * 256 * kv_tok),
                   ("recurrent state only", state)):
    blob = os.urandom(size)
    sets, gets = [], []
    for i in range(5):
        t0 = time.perf_counter(); r.set(f"bench:{i}", blob); sets.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); got = r.get(f"bench:{i}"); gets.append(time.perf_counter() - t0)
        assert got == blob
        r.delete(f"bench:{i}")
    print(json.dumps({"kind": "redis_io", "what": what, "bytes": size, "reps": 5,
                      "set_s": statistics.median(sets), "get_s": statistics.median(gets)}))
PY
  stop_all
fi
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- 5. report ----------------------------------------------------------------------------------
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo
echo "Machine: ${cpu}, $(nproc) cores ($(uname -m), $(uname -r)); ${threads} threads;" \
     "load average at start ${load_start}, at end ${load_end}; $(date -u '+%Y-%m-%d %H:%M UTC');" \
     "binaries built from ${built_from}"
echo "Model $(basename "${model}"); ${turns} turns, system ~${system_tokens} tokens, user turns" \
     "~${user_tokens} tokens, replies ${max_tokens} greedy tokens, --ctx ${ctx}, think time" \
     "${think_time} s; took $(( ($(date +%s) - started) / 60 )) min; raw results in ${out_dir}"
echo
report "${out_dir}"
