#!/usr/bin/env bash
# Idempotent setup of lm-evaluation-harness 0.4.13 in a virtual environment of its own (its pins fight the
# project's): the front's scoring tests run it as a user would, `lm_eval --model local-completions` and `--model hf`.
# Quiet: pip's output goes to a log, named when a step fails. Prints the environment's folder on its last line.
# Usage: scripts/setup-lm-eval.sh   (LM_EVAL_VENV: the folder, default $QAIC_CONSOLE_CACHE/peers/lm-eval-venv; PYTHON)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CACHE=${QAIC_CONSOLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qaic-console}
VENV=${LM_EVAL_VENV:-$CACHE/peers/lm-eval-venv}
TAG=lm-eval
# shellcheck source=scripts/tool-venv.sh
. scripts/tool-venv.sh
echo "[setup-lm-eval] installing lm-eval 0.4.13 into $VENV (the first run downloads a few hundred MB)" >&2
[ -x "$VENV/bin/python" ] || step "$PY" -m venv "$VENV"
# CPU torch first (the hf model's): an unpinned torch would pull a multi-GB CUDA build.
step "$VENV/bin/pip" install -q "torch==2.13.0"
step "$VENV/bin/pip" install -q "lm-eval[api,hf]==0.4.13" "torch==2.13.0"
echo "$want" > "$stamp"
echo "[setup-lm-eval] ready" >&2
echo "$VENV"
