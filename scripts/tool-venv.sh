# Sourced by the setup scripts of the tools that get a venv of their own (scripts/setup-vllm.sh, setup-aiperf.sh,
# scripts/setup-lm-eval.sh), with VENV (the folder) and TAG (the tool's short name) set: prints the folder and exits
# when the venv was built by this version of the calling script; otherwise starts a quiet log beside it and defines
# `step COMMAND...`, which runs a command into the log and names the log when it fails.
LOG="$VENV.setup.log"
stamp="$VENV/.qaic-$TAG-setup"
want="$(sha256sum "scripts/$(basename "$0")" | cut -c1-16)"

if [ -f "$stamp" ] && grep -qx "$want" "$stamp"; then
  echo "$VENV"
  exit 0
fi
mkdir -p "$(dirname "$VENV")"
: > "$LOG"
step() {
  if ! "$@" >>"$LOG" 2>&1; then
    echo "[setup-$TAG] failed: $* (its output: $LOG)" >&2
    exit 1
  fi
}
