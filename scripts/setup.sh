#!/usr/bin/env bash
# Set up a development environment from a fresh clone: a virtualenv in .venv
# with the Python tools, and the native module built in release mode.
# Idempotent: re-running only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# clang++ compiles the Metal kernels for the CPU in the kernel tests (msl-sim)
bash scripts/install_clang.sh
# headless Chromium renders the `rlx inspect --html` page in its test
bash scripts/install_chromium.sh
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -r scripts/requirements-dev.txt
# Rust components used by the checks (present on rustup toolchains; cheap no-op otherwise)
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
maturin develop --release --quiet 2>&1 | grep -v "^📦\|^🔗\|^🐍\|^⚠️" || true
python -c "import rlx; print('rlx', rlx.__version__, 'ready')"
