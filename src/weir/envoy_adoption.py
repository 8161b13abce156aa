"""Finding again the Envoy a previous weir left running, and watching a process that is not weir's child.

When weir runs with a stable run folder (:mod:`weir.runfolder`), its Envoy
outlives it: a crashed or upgraded weir does not take traffic down. The
next weir finds that Envoy through ``envoy.pid`` in the folder and adopts
it only if it is certainly the Envoy it would have started itself:

* the process ``PID`` runs and started at ``START_TIME`` (clock ticks since
  boot, ``/proc/PID/stat``): a PID reused by another process has another
  start time;
* its command line is the one this weir would run, word for word (the same
  binary, bootstrap path, concurrency, drain time, log level...);
* the bootstrap file is the one this weir would write;
* its admin socket answers ``/ready`` (checked by the caller).

An Envoy that is ours by PID and start time but fails one of the other
checks (weir was restarted with other flags, or upgraded) is replaced:
stopped, then a new one started, which costs the traffic of that gap.

An adopted Envoy is not weir's child: its exit status cannot be known, and
its exit is noticed through a pidfd (Linux 5.3+; polling ``/proc``
otherwise). Its own log went to the previous weir and is lost; its access
log goes where it went before (weir's stdout is usually the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AdoptedProcess", "Candidate", "find_previous", "write_pid_file"]

log = logging.getLogger("weir.envoy")

PID_FILE = "envoy.pid"
#: Polling interval when no pidfd can watch an adopted process.
_POLL_S = 0.2


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), ``None`` if it does not run (or is a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])  # field 22 of proc(5); fields[0] is field 3


def command_line(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [os.fsdecode(word) for word in raw.split(b"\0")[:-1]]


def write_pid_file(folder: Path, pid: int) -> None:
    """Record ``pid`` (and its start time) as the Envoy of ``folder``, atomically."""
    started = start_time(pid)
    target = folder / PID_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_text(f"{pid} {started if started is not None else 0}\n")
    tmp.replace(target)


def remove_pid_file(folder: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        (folder / PID_FILE).unlink()


@dataclass(frozen=True)
class Candidate:
    """The Envoy a previous weir left in the run folder."""

    pid: int
    #: It is certainly the Envoy this weir would start (command line and bootstrap): adopt it.
    same: bool
    #: Why it cannot be adopted as it is (empty when ``same``).
    why_not: str = ""


def find_previous(folder: Path, command: Sequence[str], bootstrap_text: str) -> Candidate | None:
    """The Envoy recorded in ``folder``'s pid file if it still runs, else ``None``.

    ``command`` and ``bootstrap_text`` are what this weir would run and
    write; a process whose PID was reused since (another start time), or
    that does not run Envoy on this folder's bootstrap, is not a candidate.
    """
    try:
        pid_text, _, started_text = (folder / PID_FILE).read_text().strip().partition(" ")
        pid, started = int(pid_text), int(started_text)
    except (OSError, ValueError):
        return None
    if start_time(pid) != started:
        return None  # gone, or the PID now belongs to another process
    running = command_line(pid)
    config_path = str(folder / "envoy.json")
    if running is None or config_path not in running:
        return None  # not an Envoy of this folder
    if running != list(command):
        return Candidate(pid, False, "it was started with another command line")
    try:
        written = (folder / "envoy.json").read_text()
    except OSError:
        written = ""
    if written != bootstrap_text:
        return Candidate(pid, False, "it was started with another bootstrap")
    return Candidate(pid, True)


class AdoptedProcess:
    """An Envoy started by a previous weir: the parts of :class:`asyncio.subprocess.Process` weir uses.

    ``returncode`` is ``None`` while it runs; once it has exited it is
    :data:`UNKNOWN_EXIT` (a process that is not our child cannot be reaped).
    """

    UNKNOWN_EXIT = -255

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._started = start_time(pid)
        self._exited: asyncio.Future[None] | None = None
        self._poller: asyncio.Task[None] | None = None
        self._fd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self._fd = os.pidfd_open(pid)

    def _alive(self) -> bool:
        return self._started is not None and start_time(self.pid) == self._started

    async def wait(self) -> int:
        if self.returncode is not None:
            return self.returncode
        loop = asyncio.get_running_loop()
        if self._exited is None:
            self._exited = loop.create_future()
            if self._fd is not None:
                loop.add_reader(self._fd, self._on_exit)
            else:
                self._poller = loop.create_task(self._poll())
            if not self._alive():
                self._on_exit()
        await asyncio.shield(self._exited)
        assert self.returncode is not None
        return self.returncode

    async def _poll(self) -> None:
        while self._alive():
            await asyncio.sleep(_POLL_S)
        self._on_exit()

    def _on_exit(self) -> None:
        if self._fd is not None:
            loop = asyncio.get_running_loop()
            loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None
        self.returncode = self.UNKNOWN_EXIT
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(None)
