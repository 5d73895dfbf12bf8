#!/usr/bin/env bash
# Launches DeltaServe in Incus containers on this host: one Redis, N CPU workers, M GPU workers
# and a router in front of them, each a Debian 12 container running the systemd units of
# deploy/systemd with binaries from a local build (run as a user allowed to use incus).
#
#   deploy/incus/launch.sh --model NAME=FILE.gguf [--cpu-workers N] [--gpu-workers M]
#                          [--build DIR] [--prefix ds] [--models-dir /srv/deltaserve/models]
#                          [--api-key-sha256 HEX]
#
# FILE.gguf is a file in --models-dir (mounted read-only into the workers by the profiles in
# this folder). The router listens on its container's address, port 8080, and needs an API key
# to do so (its SHA-256: printf %s "$KEY" | sha256sum). `--down` deletes what it made.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$repo/build/release
prefix=ds
models_dir=/srv/deltaserve/models
cpu_workers=1
gpu_workers=0
model=""
key_sha=""
down=0
image=images:debian/12

while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --cpu-workers) cpu_workers=$2; shift 2 ;;
    --gpu-workers) gpu_workers=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --models-dir) models_dir=$2; shift 2 ;;
    --api-key-sha256) key_sha=$2; shift 2 ;;
    --down) down=1; shift ;;
    *) echo "launch: unknown argument $1" >&2; exit 2 ;;
  esac
done

containers() {
  incus list --format csv --columns n | grep -E "^${prefix}-(router|redis|cpu[0-9]+|gpu[0-9]+)$" || true
}

if [[ $down -eq 1 ]]; then
  for c in $(containers); do incus delete --force "$c"; done
  exit 0
fi
[[ -n "$model" && "$model" == *=* ]] || { echo "launch: --model NAME=FILE.gguf is required" >&2; exit 2; }
[[ "$key_sha" =~ ^[0-9a-f]{64}$ ]] || { echo "launch: --api-key-sha256 HEX (64 hex digits) is required" >&2; exit 2; }
model_name=${model%%=*}
model_file=${model#*=}
[[ -f "$models_dir/$model_file" ]] || { echo "launch: $models_dir/$model_file not found" >&2; exit 1; }
for bin in "$build/router/deltaserve-router" "$build/worker/deltaserve-worker"; do
  [[ -x "$bin" ]] || { echo "launch: $bin missing: build first (cmake --preset release)" >&2; exit 1; }
done

# Profiles, with the models folder of this host.
for p in cpu-worker gpu-worker; do
  incus profile show "deltaserve-$p" >/dev/null 2>&1 || incus profile create "deltaserve-$p"
  sed "s|source: /srv/deltaserve/models|source: $models_dir|" "$here/deltaserve-$p.yaml" |
    incus profile edit "deltaserve-$p"
done

# A Debian 12 container with DeltaServe's runtime libraries, binaries and units.
make_container() {
  local name=$1
  shift
  incus launch "$image" "$name" "$@"
  # Evaluated inside the container, hence single quotes.
  # shellcheck disable=SC2016
  incus exec "$name" -- sh -c 'until systemctl is-system-running --wait >/dev/null 2>&1 || \
    [ "$(systemctl is-system-running)" = degraded ]; do sleep 1; done'
  incus exec "$name" -- sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends libgrpc++1.51 libprotobuf32 libabsl20220623 \
    libyaml-cpp0.7 libssl3 libicu72 libhiredis0.14 libzstd1 redis-server >/dev/null'
  incus exec "$name" -- sh -c 'getent passwd deltaserve >/dev/null || useradd --system \
    --user-group --home-dir /var/lib/deltaserve --shell /usr/sbin/nologin deltaserve; \
    install -d -m 0750 -g deltaserve /etc/deltaserve; systemctl disable --now redis-server'
  incus file push --mode 0755 "$build/router/deltaserve-router" "$build/worker/deltaserve-worker" \
    "$name/usr/local/bin/"
  incus file push "$here/../systemd/deltaserve-router.service" "$here/../systemd/deltaserve-worker@.service" \
    "$here/../systemd/deltaserve-redis.service" "$here/../systemd/deltaserve.target" "$name/etc/systemd/system/"
  incus exec "$name" -- systemctl daemon-reload
}

address_of() {
  local ip=""
  for _ in $(seq 1 60); do
    ip=$(incus list "^$1\$" --format csv --columns 4 | cut -d' ' -f1)
    [[ -n "$ip" ]] && break
    sleep 1
  done
  [[ -n "$ip" ]] || { echo "launch: $1 has no IPv4 address" >&2; exit 1; }
  echo "$ip"
}

env_file() {  # container, file name, contents
  printf '%s\n' "$3" | incus file push --mode 0640 --gid 0 - "$1/etc/deltaserve/$2"
}

make_container "$prefix-redis"
redis_ip=$(address_of "$prefix-redis")
env_file "$prefix-redis" redis.env "REDIS_BIND=0.0.0.0
REDIS_PORT=6380
REDIS_MAXMEMORY=4gb"
incus exec "$prefix-redis" -- systemctl enable --now deltaserve-redis

workers=()
start_worker() {  # name, kind (cpu|gpu)
  local name=$1 kind=$2 ip threads
  make_container "$name" --profile default --profile "deltaserve-$kind-worker"
  ip=$(address_of "$name")
  threads=$(incus exec "$name" -- nproc)  # the profile's limits.cpu
  env_file "$name" "worker-$kind.env" "WORKER_ARGS=--model $model_name=/var/lib/deltaserve/models/$model_file \
--listen $ip:50051 --device $([[ $kind == gpu ]] && echo cuda:0 || echo cpu) --threads $threads --ctx 8192 \
--parallel 4 --metrics-port 9101 --metrics-host $ip --redis redis://$redis_ip:6380"
  incus exec "$name" -- systemctl enable --now "deltaserve-worker@$kind"
  workers+=("$ip:50051")
}
for i in $(seq 0 $((cpu_workers - 1))); do start_worker "$prefix-cpu$i" cpu; done
for i in $(seq 0 $((gpu_workers - 1))); do start_worker "$prefix-gpu$i" gpu; done

make_container "$prefix-router"
router_ip=$(address_of "$prefix-router")
{
  echo "listen: 0.0.0.0:8080"
  echo "workers:"
  for w in "${workers[@]}"; do echo "  - $w"; done
  echo "api_keys:"
  echo "  - name: incus"
  echo "    sha256: $key_sha"
} | incus file push --mode 0640 - "$prefix-router/etc/deltaserve/router.yaml"
env_file "$prefix-router" router.env "ROUTER_CONFIG=/etc/deltaserve/router.yaml
ROUTER_ARGS=--drain-seconds 30"
incus exec "$prefix-router" -- chgrp deltaserve /etc/deltaserve/router.yaml /etc/deltaserve/router.env
incus exec "$prefix-router" -- systemctl enable --now deltaserve-router

echo "launch: router at http://$router_ip:8080 (workers: ${workers[*]}, Redis $redis_ip:6380)"
echo "launch: curl http://$router_ip:8080/ready; deploy/incus/launch.sh --prefix $prefix --down removes it"
