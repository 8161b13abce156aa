"""The Envoy processes of one weir: one, or two with a standby, run and checked together.

With a standby (``--envoy-standby``) a second Envoy, node ``NODE-standby``
in ``RUN_DIR/envoy-standby``, takes the same configuration from the same
ADS server and listens on the same ports (Envoy sets SO_REUSEPORT on
Linux): the kernel spreads new connections over both, so a crash of one
costs only the requests in flight on it (docs/architecture.md, "The
process: faults, restarts and stops"). Each is an :class:`EnvoyProcess`,
supervised on its own.

:meth:`Envoys.check_serving` runs for as long as weir does: every
:data:`weir.envoy_watch.SERVING_CHECK_S` it asks each Envoy whether it
serves the listeners it accepted and restarts one that does not.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass

from weir import envoy_watch, runfolder
from weir.envoy import EnvoyError, EnvoyProcess, ExitInfo, bootstrap

__all__ = ["EnvoySettings", "Envoys"]

log = logging.getLogger("weir.controller")


@dataclass(frozen=True)
class EnvoySettings:
    """How each Envoy is run (from the controller's options)."""

    node_id: str
    log_level: str
    concurrency: int | None
    ready_timeout_s: float
    #: Graceful stop: how long listeners keep accepting while draining (Envoy's drain time).
    shutdown_delay_s: float
    access_log_to_stdout: bool
    standby: bool
    #: The run folder lasts: Envoy outlives weir and the next weir adopts it.
    lasting: bool


class Envoys:
    def __init__(
        self,
        run_dir: str,
        settings: EnvoySettings,
        *,
        on_ready: Callable[[int], None],
        on_exit: Callable[[ExitInfo], None],
    ) -> None:
        def make(node_id: str, folder: str) -> EnvoyProcess:
            config = bootstrap(node_id=node_id, ads_socket=os.path.join(run_dir, runfolder.XDS_SOCKET))
            return EnvoyProcess(
                config,
                run_dir=os.path.join(run_dir, folder),
                log_level=settings.log_level,
                concurrency=settings.concurrency,
                ready_timeout=settings.ready_timeout_s,
                # Envoy's drain time: how long listeners keep accepting in a graceful stop (whole
                # seconds), and how long a changed listener's old connections may finish (2 s unless
                # a shutdown delay says otherwise).
                drain_time_s=math.ceil(settings.shutdown_delay_s) if settings.shutdown_delay_s > 0 else 2,
                access_log_to_stdout=settings.access_log_to_stdout,
                on_ready=on_ready,
                on_exit=on_exit,
                outlive_parent=settings.lasting,
            )

        self.primary = make(settings.node_id, runfolder.ENVOY_DIR)
        self.standby = (
            make(settings.node_id + "-standby", runfolder.ENVOY_DIR + "-standby")
            if settings.standby
            else None
        )
        #: Set by :meth:`drain`: the Envoys are left alone to finish.
        self.draining = False

    @property
    def all(self) -> tuple[EnvoyProcess, ...]:
        return (self.primary,) if self.standby is None else (self.primary, self.standby)

    @property
    def up(self) -> bool:
        """At least one Envoy runs and is ready."""
        return any(e.ready for e in self.all)

    def ready_one(self) -> EnvoyProcess | None:
        return next((e for e in self.all if e.ready), None)

    async def start(self) -> None:
        for envoy in self.all:
            await envoy.start()

    async def stop(self) -> None:
        for envoy in self.all:
            await envoy.stop()

    async def drain(self, *, accept_for: float, deadline: float, tcp_listeners: Collection[str]) -> None:
        """Drain every Envoy at once (:meth:`EnvoyProcess.drain`); the serving check stops."""
        self.draining = True
        await asyncio.gather(
            *(
                e.drain(accept_for=accept_for, deadline=deadline, tcp_listeners=tcp_listeners)
                for e in self.all
            )
        )

    async def check_serving(
        self,
        accepted: Callable[[], Collection[str] | None],
        on_restore: Callable[[EnvoyProcess, str], None],
    ) -> None:
        """Forever: restart an Envoy that does not serve the listeners it accepted.

        ``accepted()`` gives the names of the listeners Envoy ACKed, or
        ``None`` while a change is pending or was rejected (nothing is
        concluded then, nor when it changed during a check).
        ``on_restore(envoy, what)`` is called before the restart.
        """
        while True:
            await asyncio.sleep(envoy_watch.SERVING_CHECK_S)
            for envoy in self.all:
                names = accepted()
                if names is None or not envoy.ready or self.draining:
                    continue
                problem = await envoy_watch.not_serving(envoy.admin, names)
                if problem is None or accepted() is not names or not envoy.ready or self.draining:
                    continue
                log.error(
                    "Envoy (pid %s) does not serve the configuration it accepted (%s): restarting it",
                    envoy.pid,
                    problem,
                )
                on_restore(envoy, problem)
                try:
                    await envoy.restart("not_serving", problem)
                except EnvoyError as exc:
                    log.error("restarting Envoy failed (supervision keeps trying): %s", exc)
