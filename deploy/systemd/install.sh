#!/usr/bin/env bash
# Installs the DeltaServe systemd units on this host (run as root, from a built tree):
#   deploy/systemd/install.sh [BUILD_DIR]      (default: build/release)
# Copies the binaries to /usr/local/bin, the units to /etc/systemd/system, the environment file
# templates to /etc/deltaserve (never over existing ones), and creates the deltaserve user.
# Then: edit /etc/deltaserve/*.env and router.yaml, and
#   systemctl enable --now deltaserve-redis deltaserve-worker@cpu0 deltaserve-router
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:-$repo/build/release}

for bin in "$build/router/deltaserve-router" "$build/worker/deltaserve-worker"; do
  [[ -x "$bin" ]] || { echo "install: $bin missing: build first (cmake --preset release)" >&2; exit 1; }
done
getent passwd deltaserve >/dev/null ||
  useradd --system --user-group --home-dir /var/lib/deltaserve --shell /usr/sbin/nologin deltaserve
install -d -m 0755 /var/lib/deltaserve /var/lib/deltaserve/models
install -d -m 0750 -g deltaserve /etc/deltaserve
install -m 0755 "$build/router/deltaserve-router" "$build/worker/deltaserve-worker" /usr/local/bin/
install -m 0644 "$here"/deltaserve-router.service "$here"/deltaserve-worker@.service \
  "$here"/deltaserve-redis.service "$here"/deltaserve.target /etc/systemd/system/
[[ -e /etc/deltaserve/router.env ]] || install -m 0640 -g deltaserve "$here/router.env" /etc/deltaserve/router.env
[[ -e /etc/deltaserve/redis.env ]] || install -m 0640 -g deltaserve "$here/redis.env" /etc/deltaserve/redis.env
[[ -e /etc/deltaserve/worker-cpu0.env ]] ||
  install -m 0640 -g deltaserve "$here/worker.env" /etc/deltaserve/worker-cpu0.env
install -d -m 0755 /usr/local/share/doc/deltaserve
install -m 0644 "$repo/docs/operations.md" "$repo/docs/redis.md" /usr/local/share/doc/deltaserve/
systemctl daemon-reload
echo "install: units installed; edit /etc/deltaserve/*.env and /etc/deltaserve/router.yaml, then"
echo "  systemctl enable --now deltaserve-redis deltaserve-worker@cpu0 deltaserve-router"
