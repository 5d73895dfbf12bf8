# shellcheck shell=bash
# Sourced by the benchmark scripts (engine_bench.sh, serving_bench.sh, router_bench.sh): one
# benchmark at a time on this machine, so that none measures while another loads the cores.
#
#   source "${repo}/bench/lock.sh"
#   bench_lock "${repo}"   # returns holding build/bench/engine-bench.lock on fd 9 until exit
#
# Holding the lock, the script (and every process it starts) also moves into a CPU cgroup of
# the highest weight, when this user may make one: other work on the machine (builds, tests)
# then gets only what the benchmark leaves idle. Neither `nice -n -20` nor waiting for an idle
# machine was enough: on 2026-11-25 a worker at nice -20 still got ~1.1 of 2 cores next to a
# parallel build (kernel autogroups on, and still 10 s after turning them off; cold prefill 3x
# slower); moved into such a cgroup it got all of both and the build's compilers ~2% each.
# DELTASERVE_BENCH_CGROUP=0 leaves the scheduling alone.

bench_lock() {  # repo
  mkdir -p "$1/build/bench"
  exec 9>"$1/build/bench/engine-bench.lock"
  if ! flock -n 9; then
    echo "== another benchmark holds build/bench/engine-bench.lock; waiting for it to finish" >&2
    flock 9
  fi
  bench_priority
}

bench_priority() {
  [[ "${DELTASERVE_BENCH_CGROUP:-1}" == 0 ]] && return 0
  local group=""
  if [[ -d /sys/fs/cgroup/cpu && -w /sys/fs/cgroup/cpu ]]; then  # cgroup v1
    group=/sys/fs/cgroup/cpu/deltaserve-bench
    mkdir -p "${group}" 2>/dev/null && echo 262144 >"${group}/cpu.shares" 2>/dev/null || group=""
  elif grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null &&
       [[ -w /sys/fs/cgroup ]]; then  # cgroup v2, cpu controller on for the root's children
    group=/sys/fs/cgroup/deltaserve-bench
    mkdir -p "${group}" 2>/dev/null && echo 10000 >"${group}/cpu.weight" 2>/dev/null || group=""
  fi
  if [[ -n "${group}" ]] && echo $$ >"${group}/cgroup.procs" 2>/dev/null; then
    echo "== benchmark processes run in ${group} (highest CPU weight; others get what is left)" >&2
  else
    echo "== could not raise the benchmark's CPU weight (no writable cgroup); others compete" >&2
  fi
}
