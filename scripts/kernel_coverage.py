"""Kernel coverage of the msl-sim tests: runs the Metal kernel tests
(``rlx-metal --test msl`` and the whole-plan ``metal::`` unit tests) with
``MSL_SIM_TRACE`` set, then lists every kernel function of every compiled
``.metal`` file that no test dispatched; exits 1 if there is one.

    python scripts/kernel_coverage.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = (
    ["cargo", "test", "-q", "-p", "rlx-metal", "--features", "metal-sim", "--test", "msl"],
    ["cargo", "test", "-q", "-p", "rlx-metal", "--features", "metal-sim", "--lib", "metal::"],
)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.tsv"
        env = dict(os.environ, MSL_SIM_TRACE=str(trace))
        for cmd in RUNS:
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        lines = trace.read_text().splitlines()
    kernels: dict[str, set[str]] = defaultdict(set)
    used: dict[str, set[str]] = defaultdict(set)
    for line in lines:
        kind, file, *names = line.split("\t")
        name = Path(file).name
        if kind == "library":
            kernels[name].update(names)
        elif kind == "dispatch" and names:
            used[name].add(names[0])
    total = sum(len(k) for k in kernels.values())
    missing = {f: sorted(k - used[f]) for f, k in sorted(kernels.items()) if k - used[f]}
    for f, k in sorted(kernels.items()):
        print(f"{f:24} {len(k & used[f]):3} / {len(k):3} kernels dispatched")
    if missing:
        for f, names in missing.items():
            print(f"kernel_coverage: {f}: never dispatched: {', '.join(names)}")
        return 1
    print(f"kernel_coverage: all {total} kernels of {len(kernels)} files dispatched by the tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
