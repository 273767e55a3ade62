# Sourced by scripts/setup.sh and scripts/setup-llama-server.sh: the llama.cpp they build (the version of
# llama-cpp-python whose sources vendor it; the llama extra pins the same), its CPU options, and the quiet step runner.
# `step` needs `log` (the file) and TAG (the prefix of its lines, default setup).
LLAMA_VERSION=0.3.36
UV_VERSION=0.13.9  # the installer of scripts/setup.sh

# pip_sources PIP: where pip looks for packages and what caps their versions (its config files and PIP_* variables),
# as installer options, one per line: --find-links, --index-url, --extra-index-url, --constraint, each with its value
# (uv reads no pip config)
pip_sources() {
  local key values value
  "$1" config list |
    sed -n "s/^\(global\|install\|:env:\)\.\(find-links\|index-url\|extra-index-url\|constraint\)='\(.*\)'$/\2 \3/p" |
    while read -r key values; do
      for value in $values; do printf -- '--%s\n%s\n' "$key" "$value"; done
    done
}

# llama.cpp's build options for this CPU's instruction sets, AMX left out (what -march=native would pick, but AMX)
llama_cmake() {
  local flags opts="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" pair
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
              avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    case "$flags" in *" ${pair%%:*} "*) opts="$opts -DGGML_${pair#*:}=ON" ;; esac
  done
  echo "$opts"
}

# step "what" command...: says what, runs the command into the log with its exit code and seconds; on failure names
# the log and shows its tail
step() {
  local what=$1
  shift
  echo "[${TAG:-setup}] $what"
  echo "=== $what: $*" >>"$log"
  local code=0 start=$SECONDS
  "$@" >>"$log" 2>&1 || code=$?
  echo "=== $what: exit code $code after $((SECONDS - start)) s" >>"$log"
  if [ "$code" != 0 ]; then
    echo "[${TAG:-setup}] failed: $what (exit code $code); the end of $log:" >&2
    tail -n 25 "$log" | sed 's/^/  | /' >&2
    exit 1
  fi
}
