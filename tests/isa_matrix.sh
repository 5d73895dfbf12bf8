#!/usr/bin/env bash
# The CPU kernel tests once per kernel level this machine supports below its best one (the best
# is what a plain ctest run uses), with DELTASERVE_CPU_ISA set: every kernel path this CPU can
# execute is tested here. Prints each level's wall time; fails if any level fails (all levels run).
#
# Usage: tests/isa_matrix.sh BUILD_DIR [JUNIT_DIR]
#   BUILD_DIR: a configured and built tree (tests-kernels, and deltaserve-worker, whose
#   --list-cpu-isas says which levels this machine supports); JUNIT_DIR: where to write each
#   level's ctest JUnit file, isa-LEVEL.xml (tests/run_all.sh's report reads them).
#
# The selection is the ctest label `kernels`, which keeps it small (docs/testing.md, "CPU kernel
# levels"):
# - the op tests of tests/kernels (vec_math, norm_ops, rope, paged_attention, conv1d,
#   gated_delta_rule, moe, cpu_backend, cpu_backend_layer) and cpu_features_test: they run the
#   kernels through ActiveIsa(), so only DELTASERVE_CPU_ISA reaches their other paths;
# - of the golden label, the engine against llama.cpp's logits (engine_golden_test) and on the
#   paged / quantized KV caches (paged_kv_golden_test, kv_cache_quality_test), and the state taps
#   inside a pass (state_tap_golden_test): every kernel the
#   engine dispatches (matrix products with the activation quantizer, attention with each K/V
#   read, norms, conv, the delta rule, MoE), end to end, within the golden tolerances. The other
#   golden tests (GGUF parsing, the tokenizer, scheduler and serving logic on the same engine)
#   do not depend on the level, and strict_device_engine_test alone would take longer at
#   `scalar` than the whole selection.
# Not selected: matmul_test, matmul_int8_test, matmul_int8_codec_test, matmul_group_test,
# quants_test and quants_golden_test already compare every level the CPU supports in each run; the cuda_* tests
# test CUDA kernels (the CPU backend is only their reference); thread_pool_test has no ISA path.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: tests/isa_matrix.sh BUILD_DIR [JUNIT_DIR]" >&2
  exit 2
fi
build=$1
junit_dir=
if [ $# -eq 2 ]; then
  mkdir -p "$2"
  junit_dir=$(cd "$2" && pwd)
fi
worker="$build/worker/deltaserve-worker"
if [ ! -x "$worker" ]; then
  echo "isa_matrix: $worker is not built" >&2
  exit 2
fi
mapfile -t levels < <("$worker" --list-cpu-isas)
if [ "${#levels[@]}" -eq 0 ]; then
  echo "isa_matrix: $worker --list-cpu-isas printed no level" >&2
  exit 2
fi
best=${levels[-1]}
unset 'levels[-1]'
echo "isa_matrix: this machine supports ${levels[*]} $best; $best is the plain ctest run's"

jobs=$(nproc)
failed=()
start_all=$SECONDS
for level in "${levels[@]}"; do
  start=$SECONDS
  junit=()
  [ -z "$junit_dir" ] || junit=(--output-junit "$junit_dir/isa-$level.xml")
  if DELTASERVE_CPU_ISA=$level ctest --test-dir "$build" -j "$jobs" --timeout 600 -L kernels \
    --output-on-failure --no-tests=error "${junit[@]}"; then
    result=passed
  else
    result=FAILED
    failed+=("$level")
  fi
  echo "isa_matrix: DELTASERVE_CPU_ISA=$level $result in $((SECONDS - start)) s"
done
echo "isa_matrix: ${#levels[@]} level(s) in $((SECONDS - start_all)) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "isa_matrix: failed at ${failed[*]}" >&2
  exit 1
fi
