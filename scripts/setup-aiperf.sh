#!/usr/bin/env bash
# Idempotent setup of AIPerf 0.13 in a virtual environment of its own (its pins fight the project's): the bench's
# report and the peer tier run it as a user would, `aiperf profile` against the front. Quiet: pip's output goes to a
# log, named when a step fails. Prints the environment's folder on its last line ($QAIC_AIPERF: its bin/aiperf).
# Usage: scripts/setup-aiperf.sh   (AIPERF_VENV: the folder, default $QAIC_CONSOLE_CACHE/peers/aiperf-venv; PYTHON)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CACHE=${QAIC_CONSOLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qaic-console}
VENV=${AIPERF_VENV:-$CACHE/peers/aiperf-venv}
TAG=aiperf
# shellcheck source=scripts/tool-venv.sh
. scripts/tool-venv.sh
echo "[setup-aiperf] installing aiperf 0.13 into $VENV" >&2
[ -x "$VENV/bin/python" ] || step "$PY" -m venv "$VENV"
step "$VENV/bin/pip" install -q "aiperf==0.13.*"
echo "$want" > "$stamp"
echo "[setup-aiperf] ready" >&2
echo "$VENV"
