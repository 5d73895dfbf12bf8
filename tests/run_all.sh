#!/usr/bin/env bash
# Builds DeltaServe twice and runs every test: the release build (g++) runs the unit,
# integration, golden and gpu labels; the asan build (clang, AddressSanitizer +
# UndefinedBehaviorSanitizer) runs the unit and golden labels and ~1 minute of each fuzz target.
# Usage: tests/run_all.sh [--quick]   (--quick: release build only)
# Golden data: ../shared/golden, or DELTASERVE_GOLDEN_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
step() { printf '\n=== %s (%s) ===\n' "$1" "$(date +%H:%M:%S)"; }

step "release: configure and build"
cmake --preset release
cmake --build --preset release -j "$jobs"

step "release: unit, integration, golden, gpu tests"
ctest --preset release -j "$jobs" -L 'unit|integration|golden|gpu'

if [ "${1:-}" = "--quick" ]; then exit 0; fi

step "asan: configure and build"
cmake --preset asan
cmake --build --preset asan -j "$jobs"

step "asan: unit and golden tests"
ctest --preset asan -j "$jobs" -L 'unit|golden'

step "asan: fuzz smoke runs"
ctest --preset asan -L fuzz

step "all tests passed"
