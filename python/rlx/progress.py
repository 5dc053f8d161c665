"""Progress bars for long work (long prefills; model install / assembly uses
the byte bars of :mod:`rlx.io.models`): a tqdm bar on stderr when it is a
terminal, nothing otherwise (logs, pipes, CI, the server's worker threads).

:data:`ENABLED` overrides the terminal check (``rlx serve`` sets it False).
"""

from __future__ import annotations

import sys
from typing import Any, Optional

#: None: bars when stderr is a TTY; True / False: always / never
ENABLED: Optional[bool] = None
#: prompts longer than this many tokens show a prefill bar
PREFILL_TOKENS = 512


def enabled() -> bool:
    """Whether bars are shown now."""
    if ENABLED is not None:
        return ENABLED
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # stderr replaced or closed
        return False


class _NoBar:
    """What :func:`bar` returns when bars are off."""

    def update(self, n: int = 1) -> None:
        """Nothing."""

    def close(self) -> None:
        """Nothing."""


def bar(total: int, desc: str, unit: str = "it", unit_scale: bool = False) -> Any:
    """A progress bar over ``total`` units (``update(n)``, ``close()``), or a
    do-nothing object when bars are off or tqdm is missing; ``unit_scale``:
    counts shown with k / M / G prefixes (bytes)."""
    if not enabled():
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(
        total=total, desc=desc, unit=unit, unit_scale=unit_scale, leave=False, file=sys.stderr
    )


def prefill_bar(tokens: int) -> Any:
    """The bar of a prefill of ``tokens`` prompt tokens (off for short prompts)."""
    if tokens <= PREFILL_TOKENS:
        return _NoBar()
    return bar(tokens, "prefill", unit="tok")
