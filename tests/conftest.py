"""Shared fixtures."""

from __future__ import annotations

import pytest
import rlx


@pytest.fixture
def g() -> rlx.Graph:
    """A fresh graph."""
    return rlx.Graph("test")
