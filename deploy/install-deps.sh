#!/usr/bin/env bash
# Installs, from Debian 12 packages only, everything DeltaServe needs to build and test.
# Idempotent: packages already present are skipped by apt-get. Run as root (or with sudo).
set -euo pipefail

PACKAGES=(
  # toolchain; ccache: tests/run_all.sh uses it when present (a CI machine that keeps
  # ~/.cache/ccache rebuilds only what changed)
  build-essential cmake ninja-build pkg-config git python3 ccache
  # the venv that .ci/run installs the OpenAI Python SDK into (tests/integration/openai_sdk_test.cc)
  python3-venv
  # clang for libFuzzer targets and the sanitizer runtime
  clang libclang-rt-14-dev
  # RPC and serialization
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # base libraries (prometheus-cpp is not packaged in Debian 12: metrics use our own text exposition)
  libabsl-dev libhiredis-dev libboost-dev
  # session snapshots: optional zstd compression of Redis blobs (common/snapshot_format)
  libzstd-dev
  nlohmann-json3-dev
  # the router's YAML config (router/config); OpenSSL's libcrypto for API-key SHA-256 (router/auth)
  libyaml-cpp-dev libssl-dev
  # the main job (deploy/run-demo.sh) talks to the router with curl
  curl
  # Unicode classes for the tokenizer's pre-tokenizer
  libicu-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev redis-server
  # deploy checks (tests/deploy, label deploy): shell scripts, systemd units, certificates for
  # the rendered router config
  shellcheck systemd openssl
  # metrics, dashboards and alerts (tests/monitoring): promtool check metrics / rules / test
  # rules, and a real Prometheus scraping a router and a worker
  prometheus
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
