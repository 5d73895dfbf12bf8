#!/usr/bin/env bash
# Router overhead in one command: the latency the router adds over calling a worker's gRPC
# Generate directly, and how many idle SSE streams it holds.
#   1. builds deltaserve-worker, deltaserve-router, deltaserve-bench-router (the load generator)
#      and deltaserve-bench-stand-in-worker;
#   2. starts on free 127.0.0.1 ports: a real worker with a tiny model (default
#      ../shared/golden/tiny-dense-q8_0.gguf, --parallel above the largest client count), two
#      stand-in workers that copy its model description (instant answers; streams held open),
#      and one router in front of each of the three;
#   3. closed loop, for each client count and backend (real worker: --real-clients, default 1,16;
#      instant stand-in: --clients, default 1,64,512): direct gRPC, router non-streamed, router
#      streamed, --reps times (default 3; the report takes medians); then the same paced at
#      --rate requests/s in all over --paced-clients (default 64,512) against the instant
#      stand-in (added latency below saturation); GET /health (the HTTP layer alone);
#   4. opens --idle streamed completions through the holding router, holds them --hold seconds,
#      and counts failures and drops, with the router's RSS and CPU;
#   5. prints markdown tables on stdout (progress on stderr); raw JSON lines in --out-dir.
#
#   bench/router_bench.sh [--clients 1,64,512] [--real-clients 1,16] [--paced-clients 64,512]
#                         [--reps N] [--duration S] [--warmup S] [--rate R] [--max-tokens N]
#                         [--idle N] [--hold S] [--model FILE.gguf]
#                         [--wait-idle CORES] [--wait-max S] [--out-dir DIR] [--build-dir DIR]
#                         [--quick]
#   --wait-idle  before each row, wait until other processes use less than CORES cores over 3 s
#                (default 0.5; 0: do not wait); --wait-max: seconds of waiting in all (default 600)
#   --build-dir  a configured build folder to build and take the programs from (default
#                build/release), e.g. one of a clean `git archive` of the commit to measure
#   --quick      1 s per row, 1 rep, 500 idle streams for 3 s: checks the harness in a minute
# Defaults: 5 s per row after 1 s of warm-up, rate 1000/s, 2 tokens, 5000 idle streams for 30 s.
# A run waits for any other benchmark to finish (flock on build/bench/engine-bench.lock).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "${repo}/bench/lock.sh"
build="${repo}/build/release"
model="${repo}/../shared/golden/tiny-dense-q8_0.gguf"
out_dir="${repo}/build/bench/router"
clients="1,64,512"
# Behind a real worker, 512 closed-loop clients meet its queue limit (256 waiting), and 64 the
# router's saturation rule (a poll that saw >= 32 waiting refuses all until the next poll): both
# are refusals, not latency; see docs/benchmarks.md.
real_clients="1,16"
duration=5
warmup=1
rate=1000
paced_clients="64,512"
reps=3
wait_idle=0.5
wait_max=600
waited=0
max_tokens=2
idle=5000
hold=30

usage() {
  sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --clients) [[ $# -ge 2 ]] || usage; clients="$2"; shift 2 ;;
    --real-clients) [[ $# -ge 2 ]] || usage; real_clients="$2"; shift 2 ;;
    --duration) [[ $# -ge 2 ]] || usage; duration="$2"; shift 2 ;;
    --warmup) [[ $# -ge 2 ]] || usage; warmup="$2"; shift 2 ;;
    --rate) [[ $# -ge 2 ]] || usage; rate="$2"; shift 2 ;;
    --paced-clients) [[ $# -ge 2 ]] || usage; paced_clients="$2"; shift 2 ;;
    --reps) [[ $# -ge 2 ]] || usage; reps="$2"; shift 2 ;;
    --max-tokens) [[ $# -ge 2 ]] || usage; max_tokens="$2"; shift 2 ;;
    --idle) [[ $# -ge 2 ]] || usage; idle="$2"; shift 2 ;;
    --hold) [[ $# -ge 2 ]] || usage; hold="$2"; shift 2 ;;
    --model) [[ $# -ge 2 ]] || usage; model="$2"; shift 2 ;;
    --out-dir) [[ $# -ge 2 ]] || usage; out_dir="$2"; shift 2 ;;
    --build-dir) [[ $# -ge 2 ]] || usage; build="$(cd "$2" && pwd)"; shift 2 ;;
    --wait-idle) [[ $# -ge 2 ]] || usage; wait_idle="$2"; shift 2 ;;
    --wait-max) [[ $# -ge 2 ]] || usage; wait_max="$2"; shift 2 ;;
    --quick) duration=1; warmup=0.5; idle=500; hold=3; reps=1; shift ;;
    -h|--help) usage ;;
    *) echo "router_bench: unknown argument '$1'" >&2; usage ;;
  esac
done
for list in "${clients}" "${real_clients}" "${paced_clients}"; do
  [[ "${list}" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
    { echo "router_bench: '${list}': client counts look like 1,64,512" >&2; exit 2; }
done
for n in "${max_tokens}" "${idle}" "${reps}"; do
  [[ "${n}" =~ ^[1-9][0-9]*$ ]] || { echo "router_bench: '${n}' is not a positive integer" >&2; exit 2; }
done
[[ "${wait_idle}" =~ ^[0-9]+(\.[0-9]+)?$ && "${wait_max}" =~ ^[0-9]+$ ]] ||
  { echo "router_bench: --wait-idle wants cores (e.g. 0.5), --wait-max seconds" >&2; exit 2; }
[[ -f "${model}" ]] || { echo "router_bench: model '${model}' not found" >&2; exit 1; }
IFS=',' read -r -a client_list <<<"${clients}"
IFS=',' read -r -a real_client_list <<<"${real_clients}"
IFS=',' read -r -a paced_client_list <<<"${paced_clients}"
max_clients=0
for c in "${real_client_list[@]}"; do (( c > max_clients )) && max_clients="${c}"; done

log() { echo "== $*" >&2; }

mkdir -p "${repo}/build/bench" "${out_dir}"
bench_lock "${repo}"
started=$(date +%s)

# --- 1. binaries --------------------------------------------------------------------------------
cd "${repo}"
if [[ ! -f "${build}/build.ninja" ]]; then
  [[ "${build}" == "${repo}/build/release" ]] ||
    { echo "router_bench: ${build} is not a configured build folder" >&2; exit 1; }
  log "configuring ${build}"
  cmake --preset release >&2
fi
log "building the worker, the router and the benchmark programs"
cmake --build "${build}" --target deltaserve-worker deltaserve-router deltaserve-bench-router \
  deltaserve-bench-stand-in-worker >&2
loadgen="${build}/bench/deltaserve-bench-router"

# --- 2. processes -------------------------------------------------------------------------------
pids=()
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  for p in "${pids[@]}"; do kill "${p}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "${p}" 2>/dev/null || true; done
}
trap cleanup EXIT

# Starts "$@" with stderr in $out_dir/$name.log and waits for its "listening on HOST:PORT"
# line; sets $last_pid and $last_port.
start() {
  local name="$1"
  shift
  : >"${out_dir}/${name}.log"  # now, not in the child: no stale "listening on" line is read
  "$@" >"${out_dir}/${name}.log" 2>&1 &
  last_pid=$!
  pids+=("${last_pid}")
  last_port=""
  for _ in $(seq 1 300); do
    last_port="$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\).*/\1/p' "${out_dir}/${name}.log" |
      head -1)"
    [[ -n "${last_port}" ]] && return 0
    kill -0 "${last_pid}" 2>/dev/null || break
    sleep 0.1
  done
  echo "router_bench: ${name} did not start; its log:" >&2
  cat "${out_dir}/${name}.log" >&2
  exit 1
}

# Waits until a router's /ready says 200 (it has polled its worker and fetched the tokenizer).
wait_ready() {
  for _ in $(seq 1 200); do
    curl -sf -o /dev/null "http://127.0.0.1:$1/ready" && return 0
    sleep 0.05
  done
  echo "router_bench: router on port $1 never became ready" >&2
  exit 1
}

# The real worker runs every client at once (no queue in the worker beyond its batch): parallel
# above the largest client count, and the router's saturation threshold (32 waiting) never hit.
log "starting a worker with $(basename "${model}") and the stand-ins"
start worker "${build}/worker/deltaserve-worker" --model "tiny=${model}" \
  --listen 127.0.0.1:0 --threads 1 --ctx 64 --parallel "$((max_clients + 32))"
worker_pid="${last_pid}" worker_port="${last_port}"
start instant "${build}/bench/deltaserve-bench-stand-in-worker" --mode instant \
  --info-from "127.0.0.1:${worker_port}" --tokens "${max_tokens}"
instant_pid="${last_pid}" instant_port="${last_port}"
start hold "${build}/bench/deltaserve-bench-stand-in-worker" --mode hold \
  --info-from "127.0.0.1:${worker_port}"
hold_port="${last_port}"
declare -A router_port router_pid
for backend in real instant hold; do
  case "${backend}" in
    real) w="${worker_port}" ;;
    instant) w="${instant_port}" ;;
    hold) w="${hold_port}" ;;
  esac
  start "router-${backend}" "${build}/router/deltaserve-router" --listen 127.0.0.1:0 \
    --worker "127.0.0.1:${w}"
  router_port[${backend}]="${last_port}"
  router_pid[${backend}]="${last_pid}"
  wait_ready "${last_port}"
done
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- 3. latency ---------------------------------------------------------------------------------
results="${out_dir}/results.jsonl"
: >"${results}"
# CPU seconds used so far by the whole machine (/proc/stat busy jiffies; USER_HZ = 100), and by
# our worker, stand-ins and routers (utime + stime of each).
busy_seconds() {
  awk '/^cpu / { printf "%.2f", ($2 + $3 + $4 + $7 + $8 + $9) / 100 }' /proc/stat
}
ours_seconds() {
  local total=0 p
  for p in "${pids[@]}"; do
    total=$(awk -v t="${total}" '{ sub(/^.*\) /, ""); printf "%.2f", t + ($12 + $13) / 100 }' \
      "/proc/${p}/stat" 2>/dev/null || echo "${total}")
  done
  echo "${total}"
}
# Waits until processes other than ours use less than --wait-idle cores over 3 s, so that a
# neighbour's build does not end up in the numbers; --wait-max bounds the waiting of the whole run.
wait_for_idle() {
  local b0 o0 b1 o1 used
  awk -v w="${wait_idle}" 'BEGIN { exit !(w > 0) }' || return 0
  while :; do
    b0=$(busy_seconds) o0=$(ours_seconds)
    sleep 3
    b1=$(busy_seconds) o1=$(ours_seconds)
    used=$(awk -v a="${b0}" -v b="${b1}" -v c="${o0}" -v d="${o1}" \
      'BEGIN { u = (b - a - (d - c)) / 3; printf "%.2f", u < 0 ? 0 : u }')
    awk -v u="${used}" -v w="${wait_idle}" 'BEGIN { exit !(u < w) }' && return 0
    waited=$((waited + 3))
    if (( waited >= wait_max )); then
      log "others use ${used} cores; --wait-max (${wait_max} s) spent, measuring anyway"
      return 0
    fi
    (( waited % 30 == 0 )) && log "waiting for an idle machine (others use ${used} cores)"
  done
}
# Runs the load generator; its JSON line gets the backend, the row kind and the CPU that other
# processes (not the load generator, worker, stand-ins or routers) used meanwhile, in cores.
measure() {
  local backend="$1" kind="$2" b0 o0 t0 line b1 o1 t1 others
  shift 2
  wait_for_idle
  log "${backend} ${kind}: $*"
  b0=$(busy_seconds) o0=$(ours_seconds) t0=$(date +%s.%N)
  line="$("${loadgen}" --warmup "${warmup}" --duration "${duration}" \
    --max-tokens "${max_tokens}" "$@")"
  b1=$(busy_seconds) o1=$(ours_seconds) t1=$(date +%s.%N)
  others=$(python3 -c 'import json, sys
r = json.loads(sys.argv[1])
b0, b1, o0, o1, t0, t1 = map(float, sys.argv[2:])
print("%.2f" % max(0.0, (b1 - b0 - (o1 - o0) - r["self_cpu_s"]) / (t1 - t0)))' \
    "${line}" "${b0}" "${b1}" "${o0}" "${o1}" "${t0}" "${t1}")
  echo "${line}" | sed "s/^{/{\"backend\":\"${backend}\",\"kind\":\"${kind}\",\"others_cpu\":${others},/" |
    tee -a "${results}" >&2
}
# The three rows of one client count (direct, router, router streamed) run one after the other,
# --reps times over: a neighbour's burst then disturbs one repetition of each, and the report
# takes the median.
for backend in real instant; do
  if [[ "${backend}" == real ]]; then
    wport="${worker_port}" wpid="${worker_pid}" counts=("${real_client_list[@]}")
  else
    wport="${instant_port}" wpid="${instant_pid}" counts=("${client_list[@]}")
  fi
  rport="${router_port[${backend}]}" rpid="${router_pid[${backend}]}"
  for c in "${counts[@]}"; do
    for _ in $(seq "${reps}"); do
      measure "${backend}" closed --target grpc --address "127.0.0.1:${wport}" --clients "${c}" \
        --watch-pid "${wpid}"
      measure "${backend}" closed --target http --address "127.0.0.1:${rport}" --clients "${c}" \
        --watch-pid "${rpid}"
      measure "${backend}" closed --target http --stream --address "127.0.0.1:${rport}" \
        --clients "${c}" --watch-pid "${rpid}"
    done
  done
done
rport="${router_port[instant]}" rpid="${router_pid[instant]}"
for c in "${paced_client_list[@]}"; do
  for _ in $(seq "${reps}"); do
    measure instant paced --target grpc --address "127.0.0.1:${instant_port}" --clients "${c}" \
      --rate "${rate}" --watch-pid "${instant_pid}"
    measure instant paced --target http --address "127.0.0.1:${rport}" --clients "${c}" \
      --rate "${rate}" --watch-pid "${rpid}"
    measure instant paced --target http --stream --address "127.0.0.1:${rport}" \
      --clients "${c}" --rate "${rate}" --watch-pid "${rpid}"
  done
done
measure instant health --target http --get /health --address "127.0.0.1:${rport}" --clients 1 \
  --watch-pid "${rpid}"

# --- 4. idle streams ----------------------------------------------------------------------------
wait_for_idle
log "idle streams: ${idle} through the holding router, held ${hold} s"
hport="${router_port[hold]}"
# Halfway through the hold, the router's own count of open streams.
( sleep "$(awk -v h="${hold}" 'BEGIN { print h / 2 + 1 }')"
  curl -s "http://127.0.0.1:${hport}/metrics" | grep '^deltaserve_router_sse_streams_active' \
    >"${out_dir}/idle-metrics.txt" || true ) &
idle_rc=0
"${loadgen}" --target idle --address "127.0.0.1:${hport}" --clients "${idle}" --hold "${hold}" \
  --watch-pid "${router_pid[hold]}" | tee -a "${results}" >&2 || idle_rc=$?
wait $! 2>/dev/null || true
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- 5. report ----------------------------------------------------------------------------------
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo
echo "Machine: ${cpu}, $(nproc) cores ($(uname -m), $(uname -r)); load average at start" \
     "${load_start}, at end ${load_end}; $(date -u '+%Y-%m-%d %H:%M UTC');" \
     "commit $(git -C "${repo}" rev-parse --short HEAD)"
echo "Model $(basename "${model}"), prompt 8 token ids, max_tokens ${max_tokens}, greedy;" \
     "${warmup} s warm-up + ${duration} s per row; took $(( $(date +%s) - started )) s;" \
     "raw results in ${out_dir}"
echo
python3 - "${results}" "${out_dir}/idle-metrics.txt" <<'PY'
import json, statistics, sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
try:
    active = open(sys.argv[2]).read().split()[-1]
except (OSError, IndexError):
    active = "?"

def find(backend, kind, target, clients, stream=False):
    """The repetitions of one row merged: the median of each number, errors and others' CPU
    summed and the largest."""
    reps = [r for r in rows
            if (r.get("backend"), r.get("kind"), r["target"], r["clients"]) ==
            (backend, kind, target, clients) and r.get("stream", False) == stream
            and not r.get("path")]
    if not reps:
        return None
    merged = dict(reps[0])
    for key in ("p50_ms", "p99_ms", "rps", "watched_cpu_us_per_request"):
        merged[key] = statistics.median(r[key] for r in reps)
    merged["errors"] = sum(r["errors"] for r in reps)
    merged["others_cpu"] = max(r.get("others_cpu", 0) for r in reps)
    return merged

def table(kind, backends, title):
    print(title)
    print()
    print("| backend | clients | stream | direct p50 / p99 ms | router p50 / p99 ms "
          "| added p50 / p99 ms | direct req/s | router req/s | router CPU µs/req | errors "
          "| others' CPU, most |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for backend in backends:
        for c in sorted({r["clients"] for r in rows if r.get("kind") == kind}):
            d = find(backend, kind, "grpc", c)
            for stream in (False, True):
                h = find(backend, kind, "http", c, stream)
                if d is None or h is None:
                    continue
                print(f"| {backend} | {c} | {'yes' if stream else 'no'} "
                      f"| {d['p50_ms']:.3f} / {d['p99_ms']:.3f} | {h['p50_ms']:.3f} / {h['p99_ms']:.3f} "
                      f"| {h['p50_ms'] - d['p50_ms']:+.3f} / {h['p99_ms'] - d['p99_ms']:+.3f} "
                      f"| {d['rps']:.0f} | {h['rps']:.0f} | {h['watched_cpu_us_per_request']:.0f} "
                      f"| {d['errors'] + h['errors']} "
                      f"| {d.get('others_cpu', 0):.2f} / {h.get('others_cpu', 0):.2f} |")
    print()

table("closed", ["real", "instant"],
      "Closed loop (each client sends its next request when the last one is answered):")
rate = next((r["rate"] for r in rows if r.get("kind") == "paced"), 0)
table("paced", ["instant"], f"Paced: {rate:.0f} requests/s in all, spread over the clients "
      "(latency from the scheduled send time):")
health = [r for r in rows if r.get("path") == "/health"]
if health:
    h = health[0]
    print(f"GET /health through the router, 1 client: p50 {h['p50_ms']:.3f} ms, p99 "
          f"{h['p99_ms']:.3f} ms, {h['rps']:.0f} req/s, router CPU "
          f"{h['watched_cpu_us_per_request']:.0f} µs/req")
    print()
idle = [r for r in rows if r["target"] == "idle"]
if idle:
    i = idle[0]
    print("| idle SSE streams | opened | failed to open | dropped while held | time to open all "
          "| held | router RSS before → held | router CPU while holding | router's active-stream gauge |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {i['clients']} | {i['opened']} | {i['failed']} | {i['dropped']} "
          f"| {i['open_seconds']:.2f} s | {i['hold_seconds']:.0f} s "
          f"| {i['rss_kib_before'] / 1024:.1f} → {i['rss_kib_held'] / 1024:.1f} MiB "
          f"| {i['cpu_cores_holding']:.3f} cores | {active} |")
PY
exit "${idle_rc}"
