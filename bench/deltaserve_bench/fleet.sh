#!/usr/bin/env bash
# A local DeltaServe fleet for soak runs: redis-server, N deltaserve-workers sharing it, one
# deltaserve-router in front of them, all on free 127.0.0.1 ports, with the commands a soak's
# fault hooks call to break and mend it. State (ports, pids, logs) lives in STATE_DIR.
#
#   fleet.sh STATE_DIR start --model FILE.gguf [--workers 2] [--build build/release]
#                            [--threads 1] [--ctx 8192] [--parallel 4] [--snapshot-ram 2GiB]
#   fleet.sh STATE_DIR url                 # the router's base URL
#   fleet.sh STATE_DIR kill-worker I       # SIGKILL worker I (1-based)
#   fleet.sh STATE_DIR start-worker I      # start worker I again on its port
#   fleet.sh STATE_DIR restart-redis       # SIGKILL redis-server, start it again (empty)
#   fleet.sh STATE_DIR stop                # everything down
#
# The model is served as "bench". The servers do not inherit fd 9 (bench/lock.sh's lock), so a
# fleet left running never holds the benchmark lock. Example soak (docs/bench_tool.md):
#   F=build/fleet; bench/deltaserve_bench/fleet.sh $F start --model M.gguf
#   bench/deltaserve-bench soak --url "$(bench/deltaserve_bench/fleet.sh $F url)" --model bench \
#     --minutes 30 --fault "10m:bench/deltaserve_bench/fleet.sh $F kill-worker 2" \
#     --fault "15m:bench/deltaserve_bench/fleet.sh $F start-worker 2" \
#     --fault "20m:bench/deltaserve_bench/fleet.sh $F restart-redis" --out runs/soak
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 2 ]] || usage
state=$1 cmd=$2
shift 2

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() {  # what, command...
  local what=$1
  shift
  for _ in $(seq 1 600); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "fleet.sh: ${what} did not come up (logs in ${state})" >&2
  exit 1
}

start_redis() {
  local port
  port=$(cat "${state}/redis.port")
  redis-server --port "${port}" --bind 127.0.0.1 --save "" --appendonly no \
    --maxmemory 4gb --maxmemory-policy allkeys-lru >>"${state}/redis.log" 2>&1 9>&- &
  echo $! >"${state}/redis.pid"
  wait_for redis-server redis-cli -p "${port}" ping
}

start_worker() {  # index
  local i=$1
  # shellcheck disable=SC1091
  source "${state}/config"
  "${build}/worker/deltaserve-worker" --model "bench=${model}" \
    --listen "127.0.0.1:$(cat "${state}/worker${i}.port")" --threads "${threads}" --ctx "${ctx}" \
    --parallel "${parallel}" --snapshot-ram "${snapshot_ram}" \
    --redis "redis://127.0.0.1:$(cat "${state}/redis.port")" \
    --metrics-port "$(cat "${state}/worker${i}.metrics")" >>"${state}/worker${i}.log" 2>&1 9>&- &
  echo $! >"${state}/worker${i}.pid"
  wait_for "worker ${i}" grep -q "listening on" "${state}/worker${i}.log"
}

case "${cmd}" in
  start)
    model="" workers=2 build=build/release threads=1 ctx=8192 parallel=4 snapshot_ram=2GiB
    while [[ $# -gt 0 ]]; do
      case $1 in
        --model) model=$2 ;;
        --workers) workers=$2 ;;
        --build) build=$2 ;;
        --threads) threads=$2 ;;
        --ctx) ctx=$2 ;;
        --parallel) parallel=$2 ;;
        --snapshot-ram) snapshot_ram=$2 ;;
        *) echo "fleet.sh start: unknown flag $1" >&2; usage ;;
      esac
      shift 2
    done
    [[ -f "${model}" ]] || { echo "fleet.sh start: --model FILE.gguf is required" >&2; exit 2; }
    mkdir -p "${state}"
    printf 'model=%q\nworkers=%q\nbuild=%q\nthreads=%q\nctx=%q\nparallel=%q\nsnapshot_ram=%q\n' \
      "$(realpath "${model}")" "${workers}" "${build}" "${threads}" "${ctx}" "${parallel}" \
      "${snapshot_ram}" >"${state}/config"
    free_port >"${state}/redis.port"
    start_redis
    worker_flags=()
    for i in $(seq 1 "${workers}"); do
      free_port >"${state}/worker${i}.port"
      free_port >"${state}/worker${i}.metrics"
      start_worker "${i}"
      worker_flags+=(--worker "127.0.0.1:$(cat "${state}/worker${i}.port")")
    done
    free_port >"${state}/router.port"
    "${build}/router/deltaserve-router" --listen "127.0.0.1:$(cat "${state}/router.port")" \
      "${worker_flags[@]}" >>"${state}/router.log" 2>&1 9>&- &
    echo $! >"${state}/router.pid"
    wait_for router curl -sf "http://127.0.0.1:$(cat "${state}/router.port")/ready"
    echo "http://127.0.0.1:$(cat "${state}/router.port")"
    ;;
  url) echo "http://127.0.0.1:$(cat "${state}/router.port")" ;;
  kill-worker) kill -9 "$(cat "${state}/worker${1:?worker index}.pid")" ;;
  start-worker) start_worker "${1:?worker index}" ;;
  restart-redis)
    kill -9 "$(cat "${state}/redis.pid")"
    sleep 1
    start_redis
    ;;
  stop)
    for f in "${state}"/router.pid "${state}"/worker*.pid "${state}"/redis.pid; do
      if [[ -f "$f" ]]; then kill "$(cat "$f")" 2>/dev/null || true; fi
    done
    ;;
  *) usage ;;
esac
