#!/usr/bin/env bash
# Packs what bench/gpu/run.sh needs on a GPU machine that cannot build the project (the
# workplace's lent machines: a CUDA image without the project's build dependencies, no network,
# at most 64 MiB carried per call). Runs on a build machine, which needs no GPU:
#
#   bench/gpu/pack.sh [--build-dir DIR] [--archs 90] [--out DIR] [--golden DIR]
#
# 1. configures (CUDA on, -DDELTASERVE_CUDA_ARCHS=--archs, default 90: H100/H200) and builds in
#    --build-dir (default build/gpu-pack) the worker, the router, deltaserve-synth,
#    deltaserve-bench-gpu and every tests/gpu test;
# 2. writes --out (default gpu-bundle, in the repository root; add it to .git/info/exclude):
#    bundle.tar.xz   bin/ (the programs, stripped, in the build tree's layout) and lib/ (every
#                    shared library they load except glibc's and the compiler runtime's),
#    golden-dense.tar.xz  the tiny dense golden models (f32, q8_0, q4_k_m) with their logits,
#    golden-moe.tar.xz    the tiny MoE golden model with its logits,
#    vocab.tar.xz         the Qwen3 vocabulary GGUF deltaserve-synth takes,
#    and prints the sizes: a call carries bundle.tar.xz and ONE of the others (64 MiB).
# run.sh --bundle gpu-bundle unpacks what it finds there into /tmp/deltaserve-gpu-bundle.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build_dir="${repo}/build/gpu-pack"
archs=90
out="${repo}/gpu-bundle"
golden="${repo}/../shared/golden"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift ;;
    --archs) archs="$2"; shift ;;
    --out) out="$2"; shift ;;
    --golden) golden="$2"; shift ;;
    *) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
  shift
done

# The test programs as tests/gpu/CMakeLists.txt names them (a source file is not a program:
# cuda_gdn_decode_step_test.cc is part of cuda_gated_delta_rule_test).
mapfile -t tests < <(sed -n 's/^deltaserve_gpu_test(NAME \([A-Za-z0-9_]*\).*/\1/p' \
  "${repo}/tests/gpu/CMakeLists.txt" | sort)
if [[ ! -f "${build_dir}/build.ninja" ]]; then
  cmake -S "${repo}" -B "${build_dir}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDELTASERVE_CUDA=ON \
    -DDELTASERVE_CUDA_ARCHS="${archs}" -DCMAKE_CUDA_ARCHITECTURES="${archs}" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi
ninja -C "${build_dir}" -j "${JOBS:-2}" deltaserve-worker deltaserve-router deltaserve-synth \
  deltaserve-bench-gpu "${tests[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "${stage}"' EXIT
programs=(worker/deltaserve-worker router/deltaserve-router worker/deltaserve-synth
  bench/deltaserve-bench-gpu)
for t in "${tests[@]}"; do programs+=("tests/gpu/${t}"); done
for p in "${programs[@]}"; do
  mkdir -p "${stage}/bin/$(dirname "${p}")"
  strip -o "${stage}/bin/${p}" "${build_dir}/${p}"
done
mkdir -p "${stage}/lib"
for p in "${programs[@]}"; do ldd "${build_dir}/${p}"; done | awk '$3 ~ /^\// {print $3}' |
  sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so|ld-linux' |
  while read -r lib; do cp -L "${lib}" "${stage}/lib/"; done

mkdir -p "${out}"
tar -C "${stage}" -cJf "${out}/bundle.tar.xz" bin lib
g=(tiny-dense-f32 tiny-dense-q8_0 tiny-dense-q4_k_m)
files=()
for m in "${g[@]}"; do files+=("${m}.gguf" "${m}.json" "${m}.logits.bin"); done
tar -C "${golden}" -cJf "${out}/golden-dense.tar.xz" "${files[@]}"
tar -C "${golden}" -cJf "${out}/golden-moe.tar.xz" tiny-moe-f32.gguf tiny-moe-f32.json \
  tiny-moe-f32.logits.bin
tar -C "${golden}" -cJf "${out}/vocab.tar.xz" qwen3-vocab-qwen35pre.gguf
ls -l "${out}" >&2
for other in golden-dense golden-moe vocab; do
  total=$(($(stat -c %s "${out}/bundle.tar.xz") + $(stat -c %s "${out}/${other}.tar.xz")))
  echo "bundle.tar.xz + ${other}.tar.xz: $((total >> 20)) MiB (limit 64)" >&2
done
