# shellcheck shell=bash
# Sourced by the benchmark scripts (engine_bench.sh, serving_bench.sh, router_bench.sh): one
# benchmark at a time on this machine, so that none measures while another loads the cores.
#
#   source "${repo}/bench/lock.sh"
#   bench_lock "${repo}"   # returns holding build/bench/engine-bench.lock on fd 9 until exit

bench_lock() {  # repo
  mkdir -p "$1/build/bench"
  exec 9>"$1/build/bench/engine-bench.lock"
  if ! flock -n 9; then
    echo "== another benchmark holds build/bench/engine-bench.lock; waiting for it to finish" >&2
    flock 9
  fi
}
