"""The controller: wires provider → translate → xDS build → ADS → Envoy, and status back.

It is the only module that knows every stage. Data moves forward: each
provider snapshot is translated, built and served as one versioned xDS
snapshot; what Envoy reports (ACK, NACK, bound sockets) only ever settles
status, it never feeds back into translation.

Guarantees:

* A provider snapshot is served within one debounce interval.
* If translating or building a snapshot fails (a bug), the previous
  configuration keeps serving and the failure is logged and reported in
  ``/status``. If Envoy rejects it, Envoy keeps its previous configuration and
  every Gateway says so in ``Programmed``.
* ``stop()`` leaves no Envoy process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import logging
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from weir import __version__, envoy_watch, ir, runfolder
from weir.admin import AdminServer
from weir.api.meta import ObjectKey
from weir.envoy import EnvoyProcess, ExitInfo, listener_bound
from weir.envoys import Envoys, EnvoySettings
from weir.external_endpoints import ExternalEndpoints, amend_statuses
from weir.heap import return_free_memory
from weir.loader import Problem, gc_paused
from weir.providers.base import (
    ManagedProvider,
    ObservedProvider,
    Provider,
    ProviderSnapshot,
    StatusSink,
)
from weir.status_store import StatusStore
from weir.telemetry import Sources, Telemetry
from weir.translate import Settings, Translation
from weir.translate.incremental import Translator
from weir.translate.status import DataPlaneState, apply_data_plane, attribute_rejection
from weir.xds import accesslog
from weir.xds.cache import BuildCache
from weir.xds.server import AckStatus, AdsServer
from weir.xds.snapshot import CLUSTER, ENDPOINT, LISTENER, SECRET, Resource, Snapshot, snapshot_version

log = logging.getLogger("weir.controller")


@dataclass(frozen=True)
class Options:
    """How the controller runs (apart from translation settings)."""

    admin_host: str = "127.0.0.1"
    admin_port: int = 9900
    envoy_log_level: str = "warning"
    envoy_concurrency: int | None = None
    #: Envoy writes its access log to this process's stdout itself instead of
    #: through the ``weir.envoy.access`` logger (see :class:`EnvoyProcess`).
    envoy_access_log_to_stdout: bool = False
    #: How long Envoy may take to become ready with the first configuration.
    #: Loading 10,000 clusters took Envoy 8 to 19 s on a busy 2-core machine.
    envoy_ready_timeout_s: float = 60.0
    node_id: str = "weir"
    #: How long to wait for Envoy to ACK a snapshot before reporting it as pending.
    ack_timeout_s: float = 15.0
    #: Graceful stop (:meth:`Controller.drain`): the longest wait, from the stop signal, for the
    #: requests in flight before Envoy is stopped.
    drain_timeout_s: float = 5.0
    #: Graceful stop: how long Envoy keeps accepting new connections after the stop signal
    #: (each answered with ``Connection: close``/GOAWAY) while ``/ready`` says 503, so that load
    #: balancers stop sending them; what a preStop sleep used to do. At most ``drain_timeout_s``.
    shutdown_delay_s: float = 0.0
    #: A run folder that outlives weir (:mod:`weir.runfolder`): Envoy then survives a crash of weir,
    #: and the next weir on the same folder adopts it. ``None``: a temporary folder, removed at
    #: stop, and Envoy dies with weir.
    run_dir: str | None = None
    #: Run a second Envoy on the same configuration and ports (SO_REUSEPORT): the kernel spreads
    #: new connections over both, and when one crashes the other already serves (a crash then
    #: costs only the requests in flight on it; docs/architecture.md has the figures). Doubles
    #: Envoy's memory and threads.
    envoy_standby: bool = False


@dataclass
class _Current:
    """The configuration being served and what is known about it."""

    translation: Translation | None = None
    snapshot: Snapshot | None = None
    problems: tuple[Problem, ...] = ()
    translate_error: str | None = None
    provider_error: str | None = None
    state: DataPlaneState = field(default_factory=DataPlaneState)
    served_at: float = 0.0


class Controller:
    def __init__(self, provider: Provider, settings: Settings, options: Options = Options()) -> None:
        self._provider = provider
        self._settings = settings
        #: translation that recomputes only what a change affects (weir.translate.incremental)
        self._translator = Translator(settings)
        self._options = options
        self._store = StatusStore()
        self._current = _Current()
        self._run_dir = ""
        self._lock: runfolder.RunLock | None = None
        self._ads: AdsServer | None = None
        self._envoys: Envoys | None = None
        self._admin: AdminServer | None = None
        self._settle = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._desired: Mapping[str, Mapping[str, Resource]] | None = None
        # External hostnames' EDS assignments: weir resolves them (weir.external_endpoints).
        self._endpoints: ExternalEndpoints | None = None
        # Rebuilds only the Envoy resources an IR change touches (weir.xds.cache).
        self._builder = BuildCache()
        # The heap's size (allocated blocks) after its last full collection (see _apply, _refreeze_heap).
        self._frozen_baseline: int | None = None
        # A big change was applied: give the C heap's free pages back once Envoy has taken it.
        self._trim_pending = False
        self._carried: str | None = None
        # The translation (by identity) and data plane state whose statuses were published last.
        self._published: tuple[Translation, DataPlaneState, int] | None = None
        #: When and why weir last restarted an Envoy that did not serve what it accepted.
        self.last_restore: tuple[float, str] | None = None
        # Listeners Envoy could not bind are sent again, with back-off (weir.envoy_watch).
        self._listener_retry = envoy_watch.Backoff(
            self._retry_rejected, envoy_watch.RETRY_FIRST_S, envoy_watch.RETRY_MAX_S
        )
        self.ready = asyncio.Event()
        #: Set by :meth:`drain`: ``/ready`` says 503 and Envoy is left alone to finish.
        self.draining = False
        #: ``/metrics``: the controller reports translations; the rest is read at scrape time.
        self.telemetry = Telemetry(
            Sources(
                problems=lambda: self._current.problems,
                statuses=lambda: self._store.current,
                translation=lambda: self._current.translation,
                envoys=lambda: self.envoys,
                xds=lambda: self._ads.counters if self._ads is not None else None,
                config_accepted=lambda: self._current.state.accepted,
                controller_name=settings.controller_name,
            ),
            # Per-tool MCP metrics, from Envoy's access log of MCP upstreams (weir.xds.accesslog).
            collectors=[accesslog.collect],
        )
        if isinstance(provider, ObservedProvider):
            self.telemetry.add_collector(provider.collect)

    # ------------------------------------------------------------------ lifecycle

    @property
    def admin_port(self) -> int | None:
        return self._admin.port if self._admin else None

    @property
    def envoy(self) -> EnvoyProcess | None:
        """The (primary) Envoy process."""
        return self._envoys.primary if self._envoys is not None else None

    @property
    def envoys(self) -> tuple[EnvoyProcess, ...]:
        """Every Envoy process: the primary, and the standby if there is one."""
        return self._envoys.all if self._envoys is not None else ()

    def _envoy_up(self) -> bool:
        return self._envoys is not None and self._envoys.up

    async def start(self) -> None:
        """Start every stage; returns once Envoy runs with the first configuration pushed."""
        try:
            if self._options.run_dir is not None:
                self._run_dir = str(runfolder.prepare(self._options.run_dir))
                self._lock = runfolder.RunLock(self._run_dir)
                self._lock.acquire()
            else:
                self._run_dir = tempfile.mkdtemp(prefix="weir-")
            self._ads = AdsServer(os.path.join(self._run_dir, runfolder.XDS_SOCKET))
            await self._ads.start()
            self._ads.add_listener(lambda _state: self._settle.set())
            # The admin endpoint answers before anything is served (/ready says 503 until then),
            # so whoever sees a route answer can already ask weir about it.
            self._admin = AdminServer(
                self._options.admin_host,
                self._options.admin_port,
                {
                    "/healthz": self._healthz,
                    "/ready": self._ready_view,
                    "/status": self._status_view,
                    "/metrics": self.telemetry.scrape,
                },
            )
            await self._admin.start()
            self._endpoints = ExternalEndpoints(self._on_endpoints)
            if isinstance(self._provider, ManagedProvider):
                await self._provider.start()
            self._apply(self._provider.load())
            options = self._options
            envoys = self._envoys = Envoys(
                self._run_dir,
                EnvoySettings(
                    node_id=options.node_id,
                    log_level=options.envoy_log_level,
                    concurrency=options.envoy_concurrency,
                    ready_timeout_s=options.envoy_ready_timeout_s,
                    shutdown_delay_s=options.shutdown_delay_s,
                    access_log_to_stdout=options.envoy_access_log_to_stdout,
                    standby=options.envoy_standby,
                    lasting=options.run_dir is not None,
                ),
                on_ready=self._on_envoy_ready,
                on_exit=self._on_envoy_exit,
            )
            await envoys.start()
            checking = envoys.check_serving(self._accepted_listeners, self._on_restore)
            self._tasks = [
                asyncio.create_task(self._watch(), name="weir-watch"),
                asyncio.create_task(self._settle_loop(), name="weir-settle"),
                asyncio.create_task(checking, name="weir-check-serving"),
            ]
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop everything this controller started, Envoy first."""
        self._listener_retry.reset()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if isinstance(self._provider, ManagedProvider):
            await self._provider.stop()
        took_charge = self._envoys is not None
        if self._envoys is not None:
            await self._envoys.stop()
        if self._admin is not None:
            await self._admin.stop()
            self._admin = None
        if self._endpoints is not None:
            await self._endpoints.close()
            self._endpoints = None
        if self._ads is not None:
            await self._ads.stop()
            self._ads = None
        if self._run_dir and (self._options.run_dir is None or (self._lock is not None and took_charge)):
            # Envoy is stopped: nothing is left for a next weir to adopt. A lasting folder stays when
            # weir dies without stopping, or stops before it took charge of Envoy (a start that
            # failed, say, to reach the API server): an Envoy an earlier weir left there still serves.
            shutil.rmtree(self._run_dir, ignore_errors=True)
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self._run_dir = ""

    async def drain(self) -> None:
        """The first half of a graceful stop: fail readiness, let Envoy finish what it has.

        ``/ready`` answers 503 from now on, so load balancers and Kubernetes
        take this instance out; Envoy keeps accepting for
        ``shutdown_delay_s``, asks every client to close, and weir waits for
        the requests in flight, until ``drain_timeout_s`` after the call at
        the latest. Listener retries and the check that Envoy serves what it
        accepted stop (a drained listener is the point). :meth:`stop` then
        stops Envoy.
        """
        started = time.monotonic()
        self.draining = True
        self._listener_retry.reset()
        if self._envoys is None:
            return
        translation = self._current.translation
        tcp = [lst.name for lst in translation.ir.listeners if _is_tcp(lst)] if translation else []
        options = self._options
        await self._envoys.drain(
            accept_for=min(options.shutdown_delay_s, options.drain_timeout_s),
            deadline=started + options.drain_timeout_s,
            tcp_listeners=tcp,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Start, serve until ``stop`` is set, then stop."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()

    # ------------------------------------------------------------------ forward path

    async def _watch(self) -> None:
        """Apply every provider snapshot, whatever happens.

        A provider that raises (a bug: providers report bad input as
        problems) must not leave weir serving its last configuration while
        ignoring every later change with nothing said: the failure is logged,
        shown in ``/status`` (``dataPlane.providerError``) until a snapshot is
        applied again, and the provider is read and watched again after
        1, 2, 4 ... up to 30 s.
        """
        failures = 0
        while True:
            try:
                if failures:
                    self._apply(await asyncio.to_thread(self._provider.load))
                    self._current.provider_error = None
                async for snapshot in self._provider.watch():
                    self._apply(snapshot)
                    self._current.provider_error = None
                    failures = 0
                return
            except Exception as exc:
                delay = min(_WATCH_RETRY_MAX_S, 2.0**failures)
                failures += 1
                log.exception(
                    "reading the input failed; the last configuration keeps serving; again in %.0f s", delay
                )
                self._current.provider_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(delay)

    def _apply(self, provider_snapshot: ProviderSnapshot) -> None:
        """Translate, build and serve one provider snapshot; keep the last good one on failure.

        The cyclic garbage collector is paused meanwhile, and when that made
        many objects they are frozen (:func:`gc.freeze`) afterwards: the
        configuration being served is most of weir's heap (at 10,000 routes
        about a million objects), and a full collection walking it took
        0.6 s, which, landing inside a change, made translation and build
        several times slower and an edit's latency unpredictable
        (docs/performance.md). Nothing it makes forms reference cycles
        (measured: a full collection afterwards finds none), so objects it
        drops are still freed, by reference counting; :func:`_refreeze_heap`
        catches what cycles there may be once the heap has doubled.
        The freeze happens before the collector runs again: its first
        collection would walk everything the change made (0.1 s at 10,000
        routes), between the snapshot being handed to the ADS server and
        the push going out.
        """
        with gc_paused():
            self._apply_snapshot(provider_snapshot)
            made = gc.get_count()[0]  # objects allocated (less those freed) since the last collection
            if made < _FREEZE_AFTER:
                return  # a small change: the collector's young generations deal with it
            gc.freeze()
            self._trim_pending = True
        if self._frozen_baseline is None:
            self._frozen_baseline = sys.getallocatedblocks()

    def _apply_snapshot(self, provider_snapshot: ProviderSnapshot) -> None:
        started = time.perf_counter()
        self._current.problems = tuple(provider_snapshot.problems)
        try:
            translation = self._translator.translate(provider_snapshot.resources)
            built = self._builder.build(translation.ir)
            resources: dict[str, Mapping[str, Resource]] = dict(built)
            if self._endpoints is not None:
                resources[ENDPOINT] = self._endpoints.update(translation.ir)
        except Exception as exc:  # a bug must not take down the configuration being served
            self.telemetry.translation(time.perf_counter() - started, failed=True)
            log.exception("translation failed; the previous configuration keeps serving")
            self._current.translate_error = f"{type(exc).__name__}: {exc}"
            self._settle.set()
            return
        self.telemetry.translation(time.perf_counter() - started, failed=False)
        self._current.translate_error = None
        self._current.translation = translation
        self._desired = resources
        served = _keep_retiring(self._current.snapshot, resources)
        if self._serve(served):
            _after_push(
                log.info,
                "serving configuration %s (%d listeners, %d clusters) translated in %.1f ms (%s)",
                self._current.snapshot.version if self._current.snapshot else "-",
                len(resources[LISTENER]),
                len(resources[CLUSTER]),
                (time.perf_counter() - started) * 1000,
                self._translator.last,
            )
        self._settle.set()

    def _on_endpoints(self) -> None:
        """New DNS answers changed external hostnames' assignments: serve them, nothing else.

        No translation and no build: the push carries only the changed
        assignments. What users see of everything else is unchanged, so the
        data plane state carries over (as for a retirement push); the
        XBackends' statuses say what the answers left out.
        """
        if self._desired is None or self._endpoints is None:
            return
        self._desired = {**self._desired, ENDPOINT: self._endpoints.resources}
        if self._serve(_keep_retiring(self._current.snapshot, self._desired), retiring=True):
            log.debug("served new DNS answers (%d assignments)", len(self._endpoints.resources))
        self._settle.set()

    def _serve(self, resources: Mapping[str, Mapping[str, Resource]], *, retiring: bool = False) -> bool:
        """Hand ``resources`` to the ADS server unless they are what it already serves.

        ``retiring``: the push only drops clusters and secrets nothing uses;
        what users observe is unchanged, so the data plane state carries
        over until Envoy answers.
        """
        version = snapshot_version(resources)
        if self._current.snapshot is not None and self._current.snapshot.version == version:
            return False
        self._current.snapshot = Snapshot(version=version, resources=resources)
        self._carried = version if retiring else None
        if not retiring:
            self._current.state = DataPlaneState()
        self._current.served_at = time.monotonic()
        assert self._ads is not None
        self._ads.set_snapshot(self._current.snapshot)
        return True

    # ------------------------------------------------------------------ status path

    def _on_envoy_ready(self, pid: int) -> None:
        log.info("Envoy is ready (pid %d)", pid)
        self._settle.set()

    def _on_envoy_exit(self, info: ExitInfo) -> None:
        log.warning("Envoy (pid %d) exited unexpectedly (%s); restarting it", info.pid, info.description)
        if not self._envoy_up():  # with a standby still serving, what users see has not changed
            self._current.state = DataPlaneState()
        self._settle.set()

    async def _settle_loop(self) -> None:
        """Recompute ``Programmed`` whenever the data plane reports something."""
        while True:
            await self._settle.wait()
            self._settle.clear()
            await self._settle_once()
            if not self.programmed() and self._current.state.rejection is None:
                # Still waiting for an ACK or a socket: look again shortly. (asyncio.timeout, not
                # wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as
                # the event is set, and stopping would hang.)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.1):
                        await self._settle.wait()
                self._settle.set()

    async def _settle_once(self) -> None:
        """Judge the configuration being served from what the data plane reported, in steps: Envoy's
        answer (ACK/NACK), the sockets it serves, the resulting :class:`DataPlaneState`, the statuses
        published from it, then what an ACK allows (heap refreeze, retiring clusters)."""
        await self._wait_for_push()
        current = self._current
        if current.translation is None or current.snapshot is None or self._ads is None:
            return
        snapshot = current.snapshot
        result = self._ads.state().ack_result(snapshot.version)
        if result is None and self._carried == snapshot.version:
            return  # a retirement push in flight: nothing users see has changed
        accepted = result is not None and result.status is AckStatus.ACKED
        rejection = None
        if result is not None and result.status is AckStatus.NACKED:
            rejection = result.message or "rejected without a message"
        envoy_up = self._envoy_up()
        listeners = current.translation.ir.listeners
        bound = await self._bound_sockets(listeners) if envoy_up and (accepted or rejection) else set()
        if current.snapshot is not snapshot:
            # A change was served while the probes awaited: Envoy's answer above is not about it,
            # and crediting it would publish the change as accepted before Envoy has it. The
            # change set the settle event again; the next pass judges it.
            return
        # Envoy names the listeners it could not add ("... listener(s) 127.0.0.1:8080: cannot bind ...").
        named, unusable = attribute_rejection(
            rejection, {lst.name: (lst.address, lst.port) for lst in listeners}
        )
        retrying = result is not None and envoy_watch.transient_rejection(result)
        if retrying:
            self._listener_retry.schedule()
        else:
            self._listener_retry.reset()
        state = DataPlaneState(
            accepted=accepted and envoy_up,
            rejection=rejection,
            rejected_sockets=named,
            unusable_sockets=unusable,
            bound=frozenset(bound),
            retrying=retrying,
        )
        self._record_state(current, state)
        self._publish_statuses(current, state)
        if state.accepted:
            self._after_ack()

    async def _wait_for_push(self) -> None:
        if self._ads is not None:
            # Status waits for the push, never the other way round: the ADS stream sends a push
            # one response at a time on this event loop (see AdsServer.flushed).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_FLUSH_WAIT_S):
                    await self._ads.flushed()

    async def _bound_sockets(self, listeners: Sequence[ir.AnyListener]) -> set[tuple[str, int]]:
        """The ``(address, port)`` of ``listeners`` that Envoy is serving.

        A TCP or TLS listener is not probed by connecting: Envoy could open a
        connection to its backend for each probe. Envoy's list of active
        listeners says whether it serves one (a socket that cannot be bound
        makes Envoy reject the listener instead).
        """
        bound: set[tuple[str, int]] = set()
        ready = self._envoys.ready_one() if self._envoys is not None else None
        active: set[str] = set()
        if ready is not None and any(_is_tcp(lst) for lst in listeners):
            active = await envoy_watch.active_listeners(ready.admin)
        for listener in listeners:
            if _is_tcp(listener):
                ok = listener.name in active
            else:
                ok = await listener_bound(listener.address, listener.port)
            if ok:
                bound.add((listener.address, listener.port))
        return bound

    def _record_state(self, current: _Current, state: DataPlaneState) -> None:
        """Keep ``state`` as the served configuration's; log a new rejection; set :attr:`ready` once
        the configuration is accepted and every listener bound."""
        assert current.snapshot is not None and current.translation is not None
        previously = current.state
        current.state = state
        if state.rejection and state.rejection != previously.rejection:
            log.error("Envoy rejected configuration %s: %s", current.snapshot.version, state.rejection)
        wanted = {(lst.address, lst.port) for lst in current.translation.ir.listeners}
        if state.accepted and state.bound >= wanted and not self.ready.is_set():
            log.info(
                "configuration %s programmed %.0f ms after it was served",
                current.snapshot.version,
                (time.monotonic() - current.served_at) * 1000,
            )
            self.ready.set()

    def _publish_statuses(self, current: _Current, state: DataPlaneState) -> None:
        """Publish the translation's statuses settled by ``state`` (and write them through the
        provider); settling runs every 0.1 s while Envoy has not answered: only what can differ."""
        assert current.translation is not None
        last = self._published
        answers = self._endpoints.generation if self._endpoints is not None else 0
        if last is not None and last[0] is current.translation and last[1] == state and last[2] == answers:
            return
        statuses: Mapping[ObjectKey, dict[str, Any]] = apply_data_plane(
            current.translation.statuses, current.translation.gateway_sockets, state
        )
        if self._endpoints is not None:
            statuses = amend_statuses(statuses, self._endpoints.answers())
        started = time.perf_counter()
        changed = self._store.publish(statuses)
        log.debug(
            "published %d statuses (%d changed) in %.1f ms",
            len(statuses),
            len(changed),
            (time.perf_counter() - started) * 1000,
        )
        self._published = (current.translation, state, answers)
        if isinstance(self._provider, StatusSink):
            self._provider.write_status(self._store.current)

    def _after_ack(self) -> None:
        """What an ACK allows: refreeze a heap that doubled, return freed memory, retire the clusters
        and secrets no route uses any more."""
        baseline = self._frozen_baseline
        # The heap's size, not the frozen count: gc.get_freeze_count() walks every frozen object
        # (0.1 s at 10,000 routes), sys.getallocatedblocks() the allocator's pools (1 ms).
        if baseline is not None and sys.getallocatedblocks() > 2 * baseline:
            self._frozen_baseline = _refreeze_heap()
            self._trim_pending = True
        if self._trim_pending:
            # After the ACK: the push's serialised responses have been sent and dropped by then.
            self._trim_pending = False
            return_free_memory("a big configuration change")
        if self._desired is not None and self._serve(self._desired, retiring=True):
            log.debug("retired clusters and secrets no route uses any more")

    def _retry_rejected(self) -> None:
        if self._ads is not None:
            self._ads.retry_rejected()

    def _accepted_listeners(self) -> Collection[str] | None:
        """Names of the listeners Envoy ACKed in the configuration being served (``None`` if not ACKed)."""
        snapshot = self._current.snapshot
        if snapshot is None or not self._current.state.accepted:
            return None
        return snapshot.of_type(LISTENER)

    def _on_restore(self, envoy: EnvoyProcess, problem: str) -> None:
        self.last_restore = (time.time(), problem)
        if not any(e.ready for e in self.envoys if e is not envoy):
            self._current.state = DataPlaneState()
            self._settle.set()

    def statuses(self) -> Mapping[ObjectKey, dict[str, Any]]:
        """The statuses currently published (with ``lastTransitionTime``)."""
        return self._store.current

    def programmed(self) -> bool:
        """True when the configuration being served is ACKed and every listener is bound."""
        state, translation = self._current.state, self._current.translation
        if translation is None or not state.accepted:
            return False
        return state.bound >= {(lst.address, lst.port) for lst in translation.ir.listeners}

    # ------------------------------------------------------------------ admin views

    def _healthz(self) -> tuple[int, Any]:
        return 200, {"status": "ok"}

    def _ready_view(self) -> tuple[int, Any]:
        ok = self._envoy_up() and self._current.state.accepted and not self.draining
        objection = self._provider.ready_problem() if isinstance(self._provider, ObservedProvider) else None
        if ok and objection is not None:
            return 503, {"ready": False, "reason": objection}
        return (200 if ok else 503), {"ready": ok}

    def _status_view(self) -> tuple[int, Any]:
        current = self._current
        envoy_proc = self.envoy
        standby = self._envoys.standby if self._envoys is not None else None
        objects = [
            {
                "kind": key.kind,
                "namespace": key.namespace or None,
                "name": key.name,
                "status": status,
            }
            for key, status in self._store.current.items()
        ]
        return 200, {
            "weir": {"version": __version__, "controllerName": self._settings.controller_name},
            "dataPlane": {
                "envoyPid": envoy_proc.pid if envoy_proc else None,
                "envoyAdmin": envoy_proc.admin_socket if envoy_proc else None,
                # Restarts of every Envoy (the standby's too), by reason.
                "envoyRestarts": sum(e.restarts for e in self.envoys),
                "envoyRestartReasons": dict(sum((e.restart_reasons for e in self.envoys), Counter())),
                "standbyEnvoyPid": standby.pid if standby else None,
                "lastRestore": (
                    {"at": _rfc3339(self.last_restore[0]), "reason": self.last_restore[1]}
                    if self.last_restore
                    else None
                ),
                "configVersion": current.snapshot.version if current.snapshot else None,
                "accepted": current.state.accepted,
                "rejection": current.state.rejection,
                "translationError": current.translate_error,
                "providerError": current.provider_error,
            },
            "problems": [p.to_data() for p in current.problems],
            **(
                {"provider": self._provider.describe()}
                if isinstance(self._provider, ObservedProvider)
                else {}
            ),
            "objects": objects,
        }


def _rfc3339(at: float) -> str:
    return (
        datetime.datetime.fromtimestamp(at, datetime.UTC)
        .replace(microsecond=0)
        .isoformat()
        .replace("+00:00", "Z")
    )


def _is_tcp(listener: ir.AnyListener) -> bool:
    """Whether ``listener`` is checked through Envoy's list of active listeners rather than by
    connecting: a TCP or TLS one could relay the probe to a backend, a UDP one takes no connection."""
    return isinstance(listener, ir.TcpListener | ir.TlsListener | ir.UdpListener)


#: The longest wait before reading the input again after the provider failed (see Controller._watch).
_WATCH_RETRY_MAX_S = 30.0

#: An apply that left this many new objects behind is frozen (see Controller._apply).
_FREEZE_AFTER = 50_000

#: How long settling status waits for the ADS server to send a push first (a stream that
#: Envoy does not read from must not hold status back for longer).
_FLUSH_WAIT_S = 1.0


def _after_push(emit: Callable[..., None], *args: Any) -> None:
    """Log once the event loop has run what is ready (the ADS streams' sends), not before: a
    formatted log line costs milliseconds that an edit's push should not wait for."""
    try:
        asyncio.get_running_loop().call_soon(lambda: emit(*args))
    except RuntimeError:  # no loop (a direct call): log now
        emit(*args)


def _refreeze_heap() -> int:
    """A full collection of the frozen heap too, then freeze again; the heap's allocated blocks after.

    Frozen objects are never examined by the collector: a reference cycle
    among them would stay until this runs. It runs when the heap has
    doubled since it last ran (a much bigger configuration, or garbage), once
    Envoy has accepted the configuration (not between a push and its ACK);
    at 10,000 routes it pauses weir for about 0.6 s.
    """
    started = time.perf_counter()
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    blocks = sys.getallocatedblocks()
    log.info(
        "heap frozen again: %d allocated blocks, %d unreachable collected in %.0f ms",
        blocks,
        found,
        (time.perf_counter() - started) * 1000,
    )
    return blocks


def _keep_retiring(
    served: Snapshot | None, desired: Mapping[str, Mapping[str, Resource]]
) -> dict[str, Mapping[str, Resource]]:
    """``desired``, plus the clusters and secrets ``served`` has and ``desired`` drops.

    Make before break: Envoy applies a push type by type, so removing a
    cluster in the same push that moves a route away from it would answer
    503 for requests in between. The removed clusters (and the secrets they
    use) stay until Envoy has accepted the new routes; then the controller
    serves ``desired`` exactly.
    """
    out: dict[str, Mapping[str, Resource]] = dict(desired)
    if served is None:
        return out
    for type_url in (CLUSTER, ENDPOINT, SECRET):
        old = served.of_type(type_url)
        new = desired.get(type_url, {})
        if any(name not in new for name in old):
            out[type_url] = {**{k: v for k, v in old.items() if k not in new}, **new}
    return out


async def run_until_signalled(controller: Controller, on_started: Callable[[], None] | None = None) -> None:
    """Run ``controller`` until SIGINT or SIGTERM, then drain (:meth:`Controller.drain`) and stop.

    A second signal while draining stops at once.
    """
    import signal

    loop = asyncio.get_running_loop()
    signals = asyncio.Queue[int]()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signals.put_nowait, sig)
    try:
        await controller.start()
        if on_started is not None:
            on_started()
        received = await signals.get()
        log.info("%s: draining, then stopping (a second signal stops at once)", signal.Signals(received).name)
        drain = asyncio.create_task(controller.drain())
        again = asyncio.create_task(signals.get())
        await asyncio.wait({drain, again}, return_when=asyncio.FIRST_COMPLETED)
        if not drain.done():
            log.info("second signal: stopping now")
        for task in (drain, again):
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("draining failed; stopping")
        log.info("stopping")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await controller.stop()


__all__ = ["Controller", "Options", "Provider", "run_until_signalled"]
