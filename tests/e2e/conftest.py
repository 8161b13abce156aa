"""Generic fixtures for end-to-end tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from weir_harness import Weir, stopped_after

from weir.testkit import DnsStub, free_port


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


@pytest.fixture
async def dns() -> AsyncIterator[DnsStub]:
    """A DNS stub on loopback with an empty table (a test file may override it with its own)."""
    async with DnsStub() as stub:
        yield stub


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The (empty) manifests folder weir serves: ``tmp_path/manifests``."""
    path = tmp_path / "manifests"
    path.mkdir()
    return path


@pytest.fixture
async def weir(folder: Path, dns: DnsStub) -> AsyncIterator[Weir]:
    """weir serving ``folder`` with real Envoy, resolving through ``dns``; stopped, with its Envoys,
    after the test (a test file may override it with its own)."""
    async with stopped_after(Weir(folder, dns, free_port())) as harness:
        yield harness
