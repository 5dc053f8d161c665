"""Run first by ``import rlx``: when the process is the ``rlx`` command, a
Ctrl-C that lands while the package is still importing (numpy, the native
module, ...) exits with status 130 and no traceback, as it does once
:func:`rlx.cli.main` is running. Anything else keeps Python's own handling.
Imports only the standard library's already-loaded ``os`` and ``sys``."""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Optional


def _is_rlx_command() -> bool:
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return argv0 in ("rlx", "rlx.exe", "rlx-script.py")


def _quiet_interrupt(
    kind: type[BaseException], value: BaseException, tb: Optional[TracebackType]
) -> None:
    if issubclass(kind, KeyboardInterrupt):
        try:
            sys.stderr.write("\nrlx: interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(130)
    _previous(kind, value, tb)


_previous = sys.excepthook
if _is_rlx_command() and sys.excepthook is sys.__excepthook__:
    sys.excepthook = _quiet_interrupt
