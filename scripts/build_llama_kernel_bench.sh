#!/usr/bin/env bash
# Build llama.cpp's test-backend-ops for bench/gguf_kernels.py (per-kernel figures beside rlx's).
#
# It compiles the peer llama.cpp tree's tests/test-backend-ops.cpp against the static
# ggml libraries of the llama-bench build (scripts/setup_peers.sh, WITH_LLAMA_BENCH=1),
# so the kernels are the ones llama-bench runs (same flags: AVX-512 F/VNNI/BF16, AMX
# off, OpenMP). One change, made with sed on a copy in $OUT: the thread count.
# Upstream runs the CPU backend with hardware_concurrency / 2 threads (1 on a 2-core
# machine); the copy reads TBO_THREADS (default 1) instead. Nothing is installed;
# the binary is $OUT/test-backend-ops (default /tmp/tbo), about 3-15 minutes of one
# core (one 12k-line C++ file).
set -euo pipefail
PEER=${RLX_PEER_VENV:-/work/peer-venv}
SRC=${LLAMA_SRC:-$(ls -d "$PEER"/build/llama_cpp_python-*/vendor/llama.cpp | tail -1)}
LIBS=${LLAMA_BUILD:-$PEER/build/llama-bench-build}
OUT=${OUT:-/tmp/tbo}
mkdir -p "$OUT"
for lib in ggml ggml-cpu ggml-base; do
  test -f "$LIBS/ggml/src/lib$lib.a" || { echo "missing $LIBS/ggml/src/lib$lib.a" >&2; exit 1; }
done
sed 's|#   define N_THREADS std::thread::hardware_concurrency()|#   define N_THREADS (2 * (getenv("TBO_THREADS") ? atoi(getenv("TBO_THREADS")) : 1))|' \
  "$SRC/tests/test-backend-ops.cpp" > "$OUT/test-backend-ops.cpp"
grep -q TBO_THREADS "$OUT/test-backend-ops.cpp" || { echo "N_THREADS patch did not apply" >&2; exit 1; }
nice -n 10 g++ -O2 -std=c++17 -fopenmp -I"$SRC/ggml/include" -I"$SRC/ggml/src" \
  "$OUT/test-backend-ops.cpp" "$LIBS/ggml/src/libggml.a" "$LIBS/ggml/src/libggml-cpu.a" \
  "$LIBS/ggml/src/libggml-base.a" -lpthread -ldl -o "$OUT/test-backend-ops"
echo "built $OUT/test-backend-ops (TBO_THREADS=2 $OUT/test-backend-ops perf -o MUL_MAT)"
