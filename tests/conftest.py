"""For every test: ``weir run`` processes keep their parse cache (weir.providers.files.parsecache)
in a folder of this session's, not in the user's ~/.cache/weir."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

_CACHE = tempfile.mkdtemp(prefix="weir-test-cache-")
os.environ["WEIR_CACHE_DIR"] = _CACHE


@pytest.fixture(scope="session", autouse=True)
def _parse_cache_folder() -> Iterator[None]:
    yield
    shutil.rmtree(_CACHE, ignore_errors=True)
