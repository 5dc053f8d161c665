"""The atheris (libFuzzer) driver shared by ``fuzz/fuzz_*.py``.

Each harness calls :func:`main` with its target name: rlx's Python modules
are instrumented for coverage, an ``RlxError`` is an accepted outcome and
any other exception is reported by libFuzzer as a crash (with the input
saved as ``crash-<sha1>``). libFuzzer's own flags pass through::

    python fuzz/fuzz_gguf.py fuzz/corpus/gguf -runs=500000 -timeout=10 \\
        -dict=fuzz/gguf.dict -max_len=8192
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(target: str) -> None:
    """Run atheris on ``targets.TARGETS[target]`` with ``sys.argv`` flags."""
    import atheris

    with atheris.instrument_imports(include=["rlx"]):
        import targets

    fn = targets.TARGETS[target]
    allowed = targets.ALLOWED

    def one(data: bytes) -> None:
        try:
            fn(data)
        except allowed:
            pass

    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
