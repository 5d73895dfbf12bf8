#!/bin/sh
# reload-on-change.sh PROCESS DIR...: sends SIGHUP to PROCESS (by name, in the pod's shared
# process namespace) whenever the contents of the DIRs change. The Helm chart's router sidecar
# (router.configReload: sighup): Kubernetes swaps mounted ConfigMaps and Secrets in place, and
# deltaserve-router reloads its --config and api_keys_file on SIGHUP (docs/router.md).
set -eu
if [ "$#" -lt 2 ]; then
  echo "usage: reload-on-change.sh PROCESS DIR..." >&2
  exit 2
fi
process=$1
shift
interval=${RELOAD_INTERVAL_SECONDS:-10}
digest() {
  # Files under the dirs, following the ..data symlink Kubernetes mounts through.
  find -L "$@" -type f ! -path '*/..*' -exec sha256sum {} + 2>/dev/null | sort | sha256sum
}
last=$(digest "$@")
while sleep "$interval"; do
  now=$(digest "$@")
  if [ "$now" != "$last" ]; then
    if pkill -HUP -x "$process"; then
      echo "reload-on-change: files changed, sent SIGHUP to $process"
      last=$now
    else
      echo "reload-on-change: $process not running, retrying" >&2
    fi
  fi
done
