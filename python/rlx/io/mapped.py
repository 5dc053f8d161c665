"""Detecting a memory-mapped model file that changed while loaded.

rlx's weights are views of read-only memory maps of the model files (never
copies). If a file is truncated while mapped, touching a lost page kills
the process with SIGBUS; if it is rewritten in place, the weights silently
change. Neither can be prevented (the kernel does not lock the file), but
both are cheap to detect: :class:`MapStamp` records the mapped file's size
(``fstat`` on the map: the inode actually mapped) and mtime at open, and
:meth:`MapStamp.check` compares them again (two ``stat`` calls, a few µs).
A file replaced by a rename or deleted is not an error: the map keeps the
old inode alive and its bytes stay valid.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlx.errors import WeightFormatError

__all__ = ["MapStamp"]


class MapStamp:
    """Size / mtime / inode of a mapped file at open time."""

    def __init__(self, path: Path, tag: str, st: os.stat_result, mm: Any) -> None:
        self.path, self.tag, self.mm = path, tag, mm
        self.size, self.mtime, self.ino = st.st_size, st.st_mtime_ns, st.st_ino

    def _fail(self, what: str) -> WeightFormatError:
        return WeightFormatError(f"[{self.tag}] {self.path}: {what}")

    def check(self) -> None:
        """Raise :class:`rlx.WeightFormatError` when the mapped file changed
        size (truncated or grown) or was rewritten in place since it was
        opened: reload the model."""
        raw = getattr(self.mm, "_mmap", None)  # numpy.memmap's mmap.mmap
        try:
            size = raw.size() if raw is not None else os.stat(self.path).st_size
        except (OSError, ValueError) as e:
            raise self._fail(f"cannot stat the mapped model file ({e})") from None
        if size != self.size:
            raise self._fail(
                f"the model file changed size while loaded ({self.size} -> {size} bytes); "
                "its tensors are memory-mapped views: reload the model"
            )
        try:
            st = os.stat(self.path)
        except OSError:
            return  # deleted: the map keeps the old inode
        if st.st_ino == self.ino and st.st_mtime_ns != self.mtime:
            raise self._fail(
                "the model file was rewritten while loaded (its mtime changed); its tensors "
                "are memory-mapped views: reload the model"
            )
