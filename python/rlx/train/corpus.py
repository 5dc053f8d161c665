"""A small, fixed English text corpus that ships with every Python: the Zen
of Python (``this``) and the module docstrings of a fixed list of standard
library modules (the same text for a given Python version)."""

from __future__ import annotations

import codecs
import contextlib
import importlib
import io

#: the modules whose docstrings make up :func:`stdlib_corpus`
MODULES = (
    "argparse", "bisect", "calendar", "collections", "contextlib", "csv", "difflib",
    "functools", "heapq", "inspect", "json", "logging", "pathlib", "pickle", "random",
    "re", "shutil", "string", "textwrap", "threading", "typing", "unittest", "zipfile",
)  # fmt: skip


def stdlib_corpus() -> str:
    """The Zen of Python followed by the docstrings of :data:`MODULES`."""
    with contextlib.redirect_stdout(io.StringIO()):  # importing ``this`` prints it
        import this
    zen = codecs.decode(this.s, "rot13")
    docs = []
    for name in MODULES:
        doc = importlib.import_module(name).__doc__
        if doc:
            docs.append(doc.strip())
    return "\n\n".join([zen, *docs]) + "\n"
