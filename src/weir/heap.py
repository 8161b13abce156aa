"""Giving memory weir no longer uses back to the system.

CPython allocates objects of up to 512 bytes in its own pools and anything
bigger (file texts, serialised Envoy resources, large lists, dicts and
response bodies) with the C library's ``malloc``. glibc keeps what is freed
inside its heap for reuse and returns only the heap's top to the system by
itself, so a burst of big temporary allocations leaves weir's resident memory
higher for good: tens of MiB at 10,000 routes (docs/performance.md).
:func:`return_free_memory` hands those free pages back (``malloc_trim``).
Callers run it after such a burst, not on every change: it takes a few ms.
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Callable

__all__ = ["resident_kib", "return_free_memory"]

log = logging.getLogger("weir.heap")


def _find_trim() -> Callable[[int], int] | None:
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None
    return trim


#: glibc's ``malloc_trim``; ``None`` where the C library has none (musl, macOS).
_TRIM = _find_trim()


def return_free_memory(after: str) -> None:
    """Return the free pages inside the C heap to the system; ``after`` says what made them (logged).

    Does nothing where the C library cannot (see :data:`_TRIM`).
    """
    if _TRIM is None:
        return
    before = resident_kib()
    started = time.perf_counter()
    _TRIM(0)
    log.debug(
        "after %s: returned free heap memory, resident %d -> %d MiB in %.1f ms",
        after,
        before // 1024,
        resident_kib() // 1024,
        (time.perf_counter() - started) * 1000,
    )


def resident_kib() -> int:
    """This process's resident memory in KiB (0 where ``/proc`` is not there)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except OSError:
        return 0
