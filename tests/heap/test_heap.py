"""weir.heap: free pages inside the C heap go back to the system."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from weir import heap

pytestmark = pytest.mark.skipif(heap._TRIM is None, reason="this C library has no malloc_trim")


def test_free_heap_pages_are_returned() -> None:
    """100 MiB of 1 KiB blocks (malloc's, not CPython's pools), freed under a survivor at the
    heap's top: glibc keeps them resident by itself, and gives them back when asked."""
    script = textwrap.dedent(
        """
        from weir.heap import resident_kib, return_free_memory
        blocks = [bytes(1024) + bytes([i % 256]) for i in range(100_000)]
        survivor = bytes(2048)  # allocated last: the heap cannot shrink from the top
        base = resident_kib()
        del blocks
        freed = resident_kib()
        return_free_memory("the test")
        print(base, freed, resident_kib())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    base, freed, trimmed = (int(x) for x in out.split())
    assert freed > base - 20 * 1024, "glibc returned the pages by itself: nothing left to show"
    assert trimmed < freed - 80 * 1024, (base, freed, trimmed)


def test_resident_memory_is_read() -> None:
    assert heap.resident_kib() > 1024
