#!/usr/bin/env bash
# Idempotent build of the CPU peer `make bench` measures the demo samples against: llama.cpp's llama-server, from the
# llama.cpp that llama-cpp-python's source distribution vendors (scripts/setup-lib.sh: its version and this CPU's
# options, as the tests' llama-cpp-python wheel), Release, only the llama-server target, without curl or OpenSSL.
# Built once into the console's cache; one line per step on stderr, the build's output in a log whose end is shown
# when a step fails; prints the binary's path on stdout.
# Usage: scripts/setup-llama-server.sh   (QAIC_CONSOLE_CACHE; PYTHON: the Python whose pip downloads the sources)
set -euo pipefail
cd "$(dirname "$0")/.."
exec 3>&1 1>&2  # stdout is for the path alone
PY=${PYTHON:-python3}
TAG=setup-llama-server
# shellcheck source=scripts/setup-lib.sh
. scripts/setup-lib.sh
CACHE=${QAIC_CONSOLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qaic-console}
# LLAMA_CURL is the older releases' name for what LLAMA_OPENSSL is now (downloads by URL; the bench needs none)
options="$(llama_cmake) -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
# the folder is named by the version and the options: another CPU or other options get their own
DIR="$CACHE/peers/llama-server-$LLAMA_VERSION-$(echo "$options" | sha256sum | cut -c1-12)"
BIN="$DIR/llama-server"
if [ -x "$BIN" ]; then
  echo "$BIN" >&3
  exit 0
fi
mkdir -p "$DIR"
log="$DIR.build.log"
: >"$log"
work=$(mktemp -d "${TMPDIR:-/tmp}/qaic-llama-server.XXXXXX")
trap 'rm -rf "$work"' EXIT
step "downloading llama-cpp-python $LLAMA_VERSION's sources (about 75 MB)" \
  "$PY" -m pip download -q --no-binary :all: --no-deps "llama-cpp-python==$LLAMA_VERSION" -d "$work"
step "unpacking them" tar -xzf "$work/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$work"
src="$work/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
# shellcheck disable=SC2086  # the options are words
step "configuring llama.cpp (${options%% -DCMAKE_BUILD_TYPE*})" cmake -S "$src" -B "$work/build" $options

# cmake's build into the log, a line on stderr at each tenth of it
compile() {
  local line shown=-1 percent
  cmake --build "$work/build" --target llama-server -j "$(nproc)" 2>&1 | while IFS= read -r line; do
    echo "$line"
    case $line in "["*"%]"*)
      percent=${line#[}; percent=${percent%%%*}; percent=$((${percent// /} / 10 * 10))
      if [ "$percent" -gt "$shown" ]; then shown=$percent; echo "[$TAG] compiling: $percent%" >&4; fi ;;
    esac
  done
}
exec 4>&2
step "compiling llama-server (once: about 20 minutes on 2 busy cores)" compile
step "installing it into $DIR" install -m 755 "$work/build/bin/llama-server" "$BIN"
"$BIN" --version 2>&1 | sed "s/^/[$TAG] /"
echo "$BIN" >&3
