# shellcheck shell=bash
# Sourced by the comparison scripts (tokenizer_bench.sh, engine_bench.sh): the venv with the
# pinned llama-cpp-python (the reference engine, compiled from PyPI source with GGML_NATIVE=ON),
# gguf and regex. Lives under build/ (ignored by git); never committed.
#
#   source "${repo}/bench/venv.sh"
#   bench_venv_ensure VENV_DIR PYTHON CALLER   # creates / completes VENV_DIR; exits 1 on failure
#
# The first install compiles llama.cpp inside pip (10+ minutes on 2 cores, one compile job);
# later calls only check the installed versions.

readonly LLAMA_CPP_PYTHON_VERSION=0.3.36
readonly GGUF_VERSION=0.19.0
# bench/make_vocab_248k.py (the synthetic 248K vocabulary) applies the pre-tokenizer regex with it.
readonly REGEX_VERSION=2024.11.6

bench_venv_installed_version() {  # venv, distribution name
  "$1/bin/python" -c "import importlib.metadata as m; print(m.version('$2'))" 2>/dev/null || true
}

bench_venv_ensure() {  # venv, python, caller
  local venv="$1" python="$2" caller="$3"
  if [[ ! -x "${venv}/bin/python" ]]; then
    echo "== creating venv ${venv}" >&2
    "${python}" -m venv "${venv}"
    "${venv}/bin/pip" install --quiet --upgrade pip
  fi
  if [[ "$(bench_venv_installed_version "${venv}" llama_cpp_python)" != "${LLAMA_CPP_PYTHON_VERSION}" ||
        "$(bench_venv_installed_version "${venv}" gguf)" != "${GGUF_VERSION}" ]]; then
    local install_log="${venv}/install.log"
    echo "== installing llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION} gguf==${GGUF_VERSION}" \
         "(compiles llama.cpp with one job; full log: ${install_log})" >&2
    # One compile job: the machines this runs on have two cores and are shared.
    if ! CMAKE_ARGS="-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON" \
         CMAKE_BUILD_PARALLEL_LEVEL=1 MAKEFLAGS=-j1 \
         "${venv}/bin/pip" install --verbose --no-cache-dir \
           "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" "gguf==${GGUF_VERSION}" 2>&1 |
         tee "${install_log}" |
         awk '/^ *\[[0-9]+\/[0-9]+\] / { if (n++ % 10 == 0) { print "   compiling " $1; fflush() } }
              /^Successfully installed/ { print "   " $0; fflush() }' >&2; then
      echo "${caller}: pip install failed, see ${install_log}" >&2
      exit 1
    fi
  else
    echo "== llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} already in ${venv}" >&2
  fi
  if [[ "$(bench_venv_installed_version "${venv}" regex)" != "${REGEX_VERSION}" ]]; then
    echo "== installing regex==${REGEX_VERSION}" >&2
    "${venv}/bin/pip" install --quiet "regex==${REGEX_VERSION}" ||
      { echo "${caller}: pip install regex failed" >&2; exit 1; }
  fi
}
