"""weir's run folder: where weir and its Envoy meet, and where the next weir finds them.

The contract (docs/architecture.md, "The process: faults and restarts")::

    RUN_DIR/               mode 0700, owned by weir's user (else weir refuses it)
      weir.lock            flock held by the weir using the folder; a second weir refuses to start
      xds.sock             weir's ADS server (mode 0600); Envoy's bootstrap names it
      envoy/               mode 0700
        envoy.json         Envoy's bootstrap, as written at its start
        admin.sock         Envoy's admin interface (mode 0600; never TCP)
        envoy.pid          "PID START_TIME" of the running Envoy (see weir.envoy)

The folder outlives weir on purpose: an Envoy whose weir crashed keeps
serving its last configuration, and the next weir started on the same
folder adopts it (checks it is the Envoy it would start, serves xDS on the
same socket) instead of starting a second one. A clean stop stops Envoy
and removes the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from pathlib import Path

__all__ = [
    "MAX_UNIX_PATH",
    "RunFolderError",
    "RunLock",
    "default_run_dir",
    "prepare",
    "unix_socket_path",
]

#: Longest path a unix socket address may have on Linux (``sun_path`` less NUL).
MAX_UNIX_PATH = 107

XDS_SOCKET = "xds.sock"
ENVOY_DIR = "envoy"
LOCK_FILE = "weir.lock"


class RunFolderError(RuntimeError):
    """The run folder cannot be used (another weir holds it, wrong owner, path too long)."""


def unix_socket_path(path: str | os.PathLike[str]) -> str:
    """``path`` as a string, if a unix socket can have it; :class:`ValueError` otherwise."""
    text = os.fspath(path)
    if len(os.fsencode(text)) > MAX_UNIX_PATH:
        raise ValueError(
            f"unix socket path is longer than {MAX_UNIX_PATH} bytes: {text!r}; use a shorter run folder"
        )
    return text


def default_run_dir(admin_host: str, admin_port: int) -> Path:
    """The run folder ``weir run`` uses by default: one per weir admin address on the host.

    Two weirs on one host must have distinct admin addresses, so the
    address tells them apart, and a weir restarted with the same flags
    finds the folder (and the Envoy) its predecessor left.
    """
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    return base / f"weir-{os.geteuid()}" / f"{admin_host.strip('[]')}-{admin_port}"


def prepare(path: str | os.PathLike[str]) -> Path:
    """Make ``path`` (and its parent) if needed, mode 0700; refuse one that another user could reach.

    A folder in ``/tmp`` could have been made by someone else to capture
    weir's sockets: each of ``path`` and its parent that weir did not make
    must be a real folder (not a symbolic link) owned by weir's user.
    """
    folder = Path(path)
    for part in (folder.parent, folder):
        with contextlib.suppress(FileExistsError):
            part.mkdir(mode=0o700)
        info = os.lstat(part)
        if not stat.S_ISDIR(info.st_mode):
            raise RunFolderError(f"{part} is not a folder (a symbolic link?); remove it or choose another")
        if info.st_uid != os.geteuid():
            raise RunFolderError(
                f"{part} belongs to user {info.st_uid}, not to weir's user {os.geteuid()}; "
                "remove it or choose another run folder (--run-dir)"
            )
    os.chmod(folder, 0o700)
    return folder


class RunLock:
    """The lock a running weir holds on its run folder (released by the kernel when weir dies)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = Path(folder) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; :class:`RunFolderError` naming the holder if another weir has it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise RunFolderError(
                f"another weir (pid {holder}) uses the run folder {self.path.parent}; stop it, or give "
                "this one another --admin-address or --run-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)
