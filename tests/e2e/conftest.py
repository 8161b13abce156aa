"""Generic fixtures for end-to-end tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A private temporary folder with a short path (unix socket paths: 107 bytes)."""
    directory = Path(tempfile.mkdtemp(prefix="weir-", dir="/tmp"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def unix_socket_path(short_tmp: Path) -> str:
    """A path for a unix socket in a private temporary folder."""
    return str(short_tmp / "xds.sock")
