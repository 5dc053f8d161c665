#!/usr/bin/env bash
# `make sanitize`: run the msl-sim kernel tests (crates/msl-sim/tests/sim.rs
# and crates/rlx-metal/tests/msl.rs) with every kernel and the simulator
# runtime built under ThreadSanitizer, then AddressSanitizer
# (MSL_SIM_SANITIZE=thread|address: each dispatch runs in a runner process
# linked with the sanitizer, and a report fails the test). Each pass must
# be clean; then a negative control per sanitizer (a racy kernel, an
# out-of-bounds write) must be reported, so that a silent sanitizer cannot
# pass for a clean one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_clang.sh
TESTS=(-p msl-sim --test sim -p rlx-metal --test msl)
cargo test "${TESTS[@]}" --no-run -q
for san in thread address; do
  echo "== MSL_SIM_SANITIZE=$san"
  MSL_SIM_SANITIZE=$san cargo test "${TESTS[@]}" -q
  control=$([ $san = thread ] && echo sanitizer_control_race || echo sanitizer_control_overrun)
  want=$([ $san = thread ] && echo "ThreadSanitizer: data race" || echo "AddressSanitizer: heap-buffer-overflow")
  echo "== $san negative control: $control must be reported"
  if out=$(MSL_SIM_SANITIZE=$san cargo test -q -p msl-sim --test sim -- --ignored --exact "$control" 2>&1); then
    echo "sanitize: $control passed under $san: the sanitizer is not working"; exit 1
  fi
  grep -m1 "$want" <<<"$out" || { echo "$out" | tail -30; echo "sanitize: no '$want' report"; exit 1; }
done
echo "sanitize: all kernel tests clean under ThreadSanitizer and AddressSanitizer"
