"""Shared fixtures for the xDS build tests (helpers live in :mod:`goldens`)."""

from __future__ import annotations

import pytest
from goldens import golden_names, load_ir, merge

from weir import ir


@pytest.fixture(scope="session")
def merged_ir() -> ir.IR:
    """Every golden IR in one: exercises every feature at once."""
    return merge([load_ir(name) for name in golden_names()])
