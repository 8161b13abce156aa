"""The Kubernetes provider: the API server as the source of objects, and where status goes.

It is the same pipeline as with files: this provider produces immutable
:class:`~weir.resources.Resources` snapshots for the controller, and accepts
the statuses the controller publishes. How it is built (one module per part):

* :mod:`~weir.providers.kubernetes.api` — the calls, over the ``lightkube``
  asyncio client, every kind as a generic (plain JSON) resource; the
  configuration is ``--kubeconfig``, else in-cluster in a pod, else
  ``$KUBECONFIG`` or ``~/.kube/config``.
* :mod:`~weir.providers.kubernetes.watch` — per kind (and per namespace when
  ``--namespace`` limits namespaced kinds; cluster-scoped kinds are always
  watched cluster-wide): **list, then watch** from the list's
  ``resourceVersion`` with bookmarks; every event advances the version, so
  a dropped connection resumes where it stopped; **410 Gone** lists again
  and *replaces* the kind in the cache, so deletions in the gap are seen;
  the API server going away means **backoff** (exponential, capped,
  jittered) and resuming; a kind the server does not serve (**404**, a CRD
  not installed) is logged once, marked unserved (references to it get
  ``ResolvedRefs=False``/``InvalidKind``), and probed again periodically.
* :mod:`~weir.providers.kubernetes.cache` — the **cache**: each object validated
  with weir's models and error wording (a bad object is a problem naming
  ``Kind ns/name: field path: message`` and its last valid version keeps
  serving); ``managedFields`` and ``kubectl``'s last-applied annotation
  dropped; Secret and ConfigMap data kept only while something references
  them, fetched again when a reference appears.
* Snapshots are **debounced**: a burst of events becomes one snapshot
  ``debounce_s`` after its first event.
* :mod:`~weir.providers.kubernetes.leader` — **leader election** with a
  ``coordination.k8s.io/v1`` Lease. Every replica lists, watches, translates
  and serves its own Envoy; only the leader writes status. Losing the Lease
  (renewal failing past the renew deadline, or another holder seen) stops
  writes at once; a clean stop hands the Lease back. The Lease's namespace,
  unless given, is ``$POD_NAMESPACE``, else the configuration's (a pod's
  service account's, else the kubeconfig context's: :func:`default_lease_namespace`).
  An election that fails is a problem of every snapshot (``/status``), a
  metric, and with ``unready_without_election`` a reason for ``/ready`` to fail.
* :mod:`~weir.providers.kubernetes.status` — **status writes** through the status
  subresource, only for the objects translation gives a status (weir's
  GatewayClasses and what attaches to them), only when different from what
  the object holds, guarded by ``resourceVersion`` with retries on 409,
  keeping other controllers' ``parents``/``ancestors`` entries. weir's own
  write comes back as an event that changes nothing: writes converge.
* :mod:`~weir.providers.kubernetes.selector` — the leader's **headless Service**
  for each EndpointSelector XBackend (created, deleted; translation reads
  its EndpointSlices).
* :mod:`~weir.providers.kubernetes.gateway_services` — with ``gateway_services``
  (``weir run --gateway-services``, off by default), the leader's **Service per
  Gateway** in the Gateway's namespace, with EndpointSlices listing weir's pods.
* :mod:`~weir.providers.kubernetes.xbackend` — XBackend's status in the shape of
  its **installed CRD** (``status.parents`` of v1.6 or ``status.ancestors``
  of upstream main, read from the CRD's schema at start and every
  ``reprobe_s``): an API server silently drops a status in the other shape.

* :mod:`~weir.providers.kubernetes.events` — **Events** for the condition
  changes the leader writes (rate-limited); :mod:`~weir.providers.kubernetes.metrics`
  — what the provider counts, for ``/metrics`` (:meth:`KubernetesProvider.collect`).

:data:`WATCHED` lists what is read (the deployment's RBAC grants exactly
list/watch on these, ``patch`` on their ``status``, Leases, ``create`` on Events, ``create`` and
``delete`` on Services, and ``get`` on XBackend's CRD alone). It follows
:data:`weir.api.registry.MODELS`: a kind weir reads in files, it reads in a
cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import KubeConfig

from weir import DEFAULT_CONTROLLER_NAME
from weir.api import registry
from weir.api.meta import ObjectKey
from weir.api.xbackend_v1alpha1 import SCHEMAS as XBACKEND_SCHEMAS
from weir.api.xbackend_v1alpha1 import Shape, XBackend
from weir.infrastructure import ServiceType
from weir.loader import Problem
from weir.metrics import MetricFamily, gauge
from weir.providers.kubernetes.api import CRD, KubeApi, WatchedKind, describe, load_config
from weir.providers.kubernetes.cache import DATA_KINDS, SOURCE, CacheStats, KubeSnapshot, ObjectCache
from weir.providers.kubernetes.events import EventRecorder
from weir.providers.kubernetes.gateway_services import GATEWAY, GatewayServices
from weir.providers.kubernetes.leader import LeaderElector, LeaseSettings
from weir.providers.kubernetes.metrics import KubeMetrics
from weir.providers.kubernetes.selector import SelectorServices
from weir.providers.kubernetes.status import StatusWriter
from weir.providers.kubernetes.watch import Backoff, KindWatcher, Outage, WatchTiming
from weir.providers.kubernetes.xbackend import CRD_NAME, crd_shape, statuses_for_crd

__all__ = [
    "DEFAULT_LEASE_NAME",
    "WATCHED",
    "KubernetesOptions",
    "KubernetesProvider",
    "WatchedKind",
    "default_identity",
    "default_lease_namespace",
]

log = logging.getLogger("weir.kubernetes")

#: Every kind weir reads from the API server: those translation reads (one per model).
WATCHED: tuple[WatchedKind, ...] = tuple(WatchedKind.of(model) for model in registry.MODELS)

DEFAULT_LEASE_NAME = "weir-leader"


def default_identity() -> str:
    """This replica's name in the Lease: ``$POD_NAME`` (else the host name) and a random suffix,
    so that a restarted container never mistakes its predecessor's lease for its own."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "weir"
    return f"{base}-{secrets.token_hex(3)}"


def default_lease_namespace(config_namespace: str) -> str:
    """Where the Lease lives when ``--lease-namespace`` does not say: ``$POD_NAMESPACE``, else the
    client configuration's namespace (``config_namespace``): in a pod the service account's, out
    of one the kubeconfig context's (``default`` when the context names none), the namespace
    ``kubectl`` would use too. It always exists in a cluster that answers; a fixed one such as
    ``weir-system`` may not, and then no status is ever written."""
    return os.environ.get("POD_NAMESPACE") or config_namespace


@dataclass(frozen=True)
class KubernetesOptions:
    """How to reach the API server and what to read.

    ``namespaces``: limit namespaced kinds to these (empty: all).
    ``publish_service``: ``(namespace, name)`` of the Service in front of
    weir's pods (also translation's ``Settings.publish_service``): its
    namespace is always watched for Services. ``lease``: leader election;
    ``None`` writes status without electing (a single replica, or tests); a
    Lease namespace ``""`` is decided at start (:func:`default_lease_namespace`).
    ``unready_without_election``: ``/ready`` answers 503 while leader election
    fails (by default it does not: traffic is served either way, only status
    writes stop). ``events``: report condition changes as Events
    (:mod:`~weir.providers.kubernetes.events`).
    ``write_status``: ``False`` never writes (a read-only replica).
    ``gateway_services``: keep a Service of this type per Gateway (needs
    ``publish_service``, whose EndpointSlices list weir's pods;
    :mod:`~weir.providers.kubernetes.gateway_services`); ``None``: off.
    """

    kubeconfig: str | None = None
    namespaces: tuple[str, ...] = ()
    controller_name: str = DEFAULT_CONTROLLER_NAME
    publish_service: tuple[str, str] | None = None
    lease: LeaseSettings | None = None
    write_status: bool = True
    unready_without_election: bool = False
    events: bool = True
    debounce_s: float = 0.05
    timing: WatchTiming = field(default_factory=WatchTiming)
    kinds: tuple[WatchedKind, ...] = WATCHED
    gateway_services: ServiceType | None = None

    def __post_init__(self) -> None:
        if self.gateway_services is not None and self.publish_service is None:
            raise ValueError("gateway_services needs publish_service (the Service that selects weir's pods)")


class KubernetesProvider:
    """Objects from the API server, status back to it. ``start()`` first, ``stop()`` at the end."""

    def __init__(self, options: KubernetesOptions, config: KubeConfig | None = None) -> None:
        self.options = options
        self._config = config
        self._changed = asyncio.Event()
        self.cache = ObjectCache(on_change=self._changed.set)
        self._api: KubeApi | None = None
        self.watchers: list[KindWatcher] = []
        self.elector: LeaderElector | None = None
        self.writer: StatusWriter | None = None
        self.selector_services: SelectorServices | None = None
        self.gateway_services: GatewayServices | None = None
        self.events: EventRecorder | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._snapshot: KubeSnapshot | None = None
        self._fetch_backoff = Backoff(options.timing.backoff_initial_s, options.timing.backoff_max_s)
        self._outage = Outage()
        self.metrics = KubeMetrics()
        #: The shape of XBackend's installed CRD (``None``: not known, no CRD, or neither shape).
        self.xbackend_shape: Shape | None = None
        self._published: Mapping[ObjectKey, dict[str, Any]] = {}
        self._crd_problem: str | None = None  # what is wrong with XBackend's CRD, said once

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect, list every kind (retrying until the API server answers), start watching,
        electing and writing. Returns once the first complete snapshot is ready."""
        options = self.options
        config = self._config
        if config is None:
            config = await asyncio.to_thread(load_config, options.kubeconfig)
        self._api = api = KubeApi(config)
        log.info("reading from the API server at %s", api.server)
        # Secrets and ConfigMaps last: the references to them are known by then, so their data is
        # kept or dropped on arrival instead of being fetched again one by one.
        first = [k for k in options.kinds if k.kind not in DATA_KINDS]
        then = [k for k in options.kinds if k.kind in DATA_KINDS]
        try:
            for group in (first, then):
                watchers = [
                    KindWatcher(api, self.cache, kind, namespace, options.timing, self._outage, self.metrics)
                    for kind in group
                    for namespace in self._scopes(kind)
                ]
                self.watchers += watchers
                self._tasks += [
                    asyncio.create_task(w.run(), name=f"weir-watch-{w.kind.kind}") for w in watchers
                ]
                await self._synced(watchers)
            await self._fetch_wanted()
            self._changed.clear()
            if options.write_status:
                if self._writes_xbackends:
                    await self._read_xbackend_crd(api)
                self._start_status(api)
            self._snapshot = self._take_snapshot()
        except BaseException:
            await self.stop()
            raise

    def _start_status(self, api: KubeApi) -> None:
        options = self.options
        lease = options.lease
        if lease is not None:
            if not lease.namespace:
                lease = dataclasses.replace(lease, namespace=default_lease_namespace(api.default_namespace))
            self.elector = LeaderElector(
                api, lease, on_change=self._leadership, on_problem=self._changed.set, metrics=self.metrics
            )
        elector = self.elector
        if options.events:
            identity = lease.identity if lease is not None else default_identity()
            self.events = EventRecorder(api, options.controller_name, identity, self.metrics)
            self._tasks.append(asyncio.create_task(self.events.run(), name="weir-events"))
        is_leader = (lambda: elector.is_leader) if elector is not None else (lambda: True)
        self.writer = StatusWriter(
            api,
            self.cache,
            {k.kind: k for k in options.kinds},
            options.controller_name,
            is_leader,
            Backoff(options.timing.backoff_initial_s, options.timing.backoff_max_s),
            self._outage,
            self.metrics,
            on_written=self.events.written if self.events is not None else None,
        )
        self._tasks.append(asyncio.create_task(self.writer.run(), name="weir-status-writer"))
        if self._writes_xbackends:
            self._tasks.append(asyncio.create_task(self._follow_xbackend_crd(api), name="weir-xbackend-crd"))
            self.selector_services = SelectorServices(
                api,
                options.namespaces,
                is_leader,
                Backoff(options.timing.backoff_initial_s, options.timing.backoff_max_s),
            )
            services = asyncio.create_task(self.selector_services.run(), name="weir-selector-services")
            self._tasks.append(services)
        if options.gateway_services is not None and options.publish_service is not None:
            events = self.events
            self.gateway_services = GatewayServices(
                api,
                controller_name=options.controller_name,
                service_type=options.gateway_services,
                publish_service=options.publish_service,
                namespaces=options.namespaces,
                is_leader=is_leader,
                backoff=Backoff(options.timing.backoff_initial_s, options.timing.backoff_max_s),
                report=(
                    (
                        lambda gw, reason, note: events.report(
                            GATEWAY, gw.model_dump(by_alias=True), reason, note
                        )
                    )
                    if events is not None
                    else None
                ),
            )
            self._tasks.append(asyncio.create_task(self.gateway_services.run(), name="weir-gateway-services"))
        if elector is not None:
            self._tasks.append(asyncio.create_task(elector.run(), name="weir-leader-election"))

    @property
    def _writes_xbackends(self) -> bool:
        return any(k.kind == XBackend.KIND for k in self.options.kinds)

    async def _read_xbackend_crd(self, api: KubeApi) -> bool:
        """Read XBackend's CRD for the shape its status has; whether the shape known changed.

        A CRD that cannot be read (absent, RBAC, the API server away) leaves
        the shape as it was: statuses then keep the shape each object was
        read in, which is the CRD's unless the CRD changed under the object.
        """
        problem: str | None = None
        try:
            crd = await api.get(CRD, "", CRD_NAME)
        except Exception as exc:
            crd, problem = None, f"cannot read the CRD {CRD_NAME}: {describe(exc)}"
        shape = crd_shape(crd) if crd is not None else None
        if crd is not None and shape is None:
            problem = f"the CRD {CRD_NAME} has neither status.parents nor status.ancestors"
        if problem is not None and problem != self._crd_problem:
            log.warning("%s; writing each XBackend's status in the shape it was read in", problem)
        self._crd_problem = problem
        if crd is None and problem is not None:
            return False  # unreadable: keep the shape known
        if shape == self.xbackend_shape:
            return False
        if shape is not None:
            log.info(
                "XBackend's CRD has the %s shape: its status is written as status.%s",
                shape,
                XBACKEND_SCHEMAS[shape].status_list,
            )
        self.xbackend_shape = shape
        return True

    async def _follow_xbackend_crd(self, api: KubeApi) -> None:
        """Read XBackend's CRD again every ``reprobe_s`` (installed, or replaced by the other shape)."""
        while True:
            await asyncio.sleep(self.options.timing.reprobe_s)
            before = self.xbackend_shape
            if not await self._read_xbackend_crd(api):
                continue
            if before is not None:  # replaced: watches opened before still decode with the old schema
                for watcher in self.watchers:
                    if watcher.kind.kind == XBackend.KIND:
                        watcher.relist()
            if self.writer is not None:
                self.writer.submit(statuses_for_crd(self._published, self.xbackend_shape))

    def _leadership(self, leading: bool) -> None:
        if leading and self.writer is not None:
            self.writer.resync()
        if leading and self.selector_services is not None:
            self.selector_services.resync()
        if leading and self.gateway_services is not None:
            self.gateway_services.resync()

    async def stop(self) -> None:
        """Stop watching, writing and renewing; then hand the Lease back if held; close the connection."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.elector is not None:
            await self.elector.release()
        if self._api is not None:
            with contextlib.suppress(Exception):
                await self._api.close()
            self._api = None

    def _scopes(self, kind: WatchedKind) -> list[str | None]:
        """The namespaces to watch ``kind`` in (``None``: all, or cluster-scoped)."""
        if not kind.namespaced or not self.options.namespaces:
            return [None]
        scopes = list(dict.fromkeys(self.options.namespaces))
        publish = self.options.publish_service
        if kind.kind == "Service" and publish is not None and publish[0] not in scopes:
            scopes.append(publish[0])
        gateway_services = self.options.gateway_services is not None
        if (
            kind.kind == "EndpointSlice"
            and gateway_services
            and publish is not None
            and publish[0] not in scopes
        ):
            scopes.append(publish[0])  # weir's pods, for the Gateways' Services
        return list(scopes)

    async def _synced(self, watchers: list[KindWatcher]) -> None:
        """Wait until every watcher listed once, saying what is still missing every 10 s."""
        started = time.monotonic()
        while True:
            pending = [w for w in watchers if not w.synced.is_set()]
            if not pending:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await asyncio.gather(*(w.synced.wait() for w in pending))
                continue
            log.warning(
                "still waiting for the API server after %.0f s: not listed yet: %s",
                time.monotonic() - started,
                ", ".join(w.where for w in pending),
            )

    # ------------------------------------------------------------------ the provider interface

    def load(self) -> KubeSnapshot:
        """The snapshot made when :meth:`start` finished (or the latest one :meth:`watch` yielded)."""
        if self._snapshot is None:
            raise RuntimeError("KubernetesProvider.load() before start()")
        return self._snapshot

    async def watch(self) -> AsyncIterator[KubeSnapshot]:
        """A new snapshot after each burst of changes (``debounce_s`` after its first event)."""
        while True:
            await self._changed.wait()
            await asyncio.sleep(self.options.debounce_s)
            await self._fetch_wanted()
            self._changed.clear()
            self._snapshot = self._take_snapshot()
            yield self._snapshot

    def write_status(self, statuses: Mapping[ObjectKey, dict[str, Any]]) -> None:
        """The statuses weir publishes now; the leader writes those that differ, in the background."""
        self._published = statuses
        if self.writer is not None:
            self.writer.submit(
                statuses if self.xbackend_shape is None else statuses_for_crd(statuses, self.xbackend_shape)
            )

    def _take_snapshot(self) -> KubeSnapshot:
        """The cache's snapshot, with the provider's own problem (leader election) among its problems."""
        snapshot = self.cache.snapshot()
        if self.selector_services is not None:
            self.selector_services.submit(snapshot.resources)
        if self.gateway_services is not None:
            self.gateway_services.submit(snapshot.resources)
        problem = self.election_problem
        if problem is None:
            return snapshot
        lease = self.elector.settings if self.elector is not None else None
        where = f"Lease {lease.namespace}/{lease.name}" if lease is not None else None
        extra = Problem("error", SOURCE, None, where, None, problem.partition(": ")[2] or problem)
        return dataclasses.replace(snapshot, problems=(*snapshot.problems, extra))

    # ------------------------------------------------------------------ data on demand

    async def _fetch_wanted(self) -> None:
        """Fetch the data of Secrets and ConfigMaps that became referenced while held without it."""
        wanted = self.cache.wanted()
        if not wanted or self._api is None:
            return
        api = self._api
        kinds = {k.kind: k for k in self.options.kinds}

        async def fetch(key: ObjectKey, version: str) -> bool:
            kind = kinds[key.kind]
            try:
                raw = await api.get(kind, key.namespace, key.name)
            except Exception as exc:
                log.warning("could not read %s for its data: %s; retrying", key, describe(exc))
                return False
            if raw is not None:
                self.cache.fill(kind, raw, version)
            return True

        results = await asyncio.gather(*(fetch(key, version) for key, version in sorted(wanted.items())))
        if all(results):
            self._fetch_backoff.reset()
        else:
            asyncio.get_running_loop().call_later(self._fetch_backoff.delay(), self._changed.set)

    # ------------------------------------------------------------------ introspection

    @property
    def leader(self) -> bool:
        """Whether this replica writes status now."""
        if not self.options.write_status:
            return False
        return self.elector.is_leader if self.elector is not None else True

    @property
    def election_problem(self) -> str | None:
        """Why leader election fails now (``None``: it works, or there is none)."""
        return self.elector.problem if self.elector is not None else None

    def ready_problem(self) -> str | None:
        """Why ``/ready`` should answer 503 (only with ``unready_without_election``)."""
        return self.election_problem if self.options.unready_without_election else None

    def describe(self) -> dict[str, Any]:
        """For ``/status``: the API server, who leads, and what is wrong with electing."""
        elector = self.elector
        lease = elector.settings if elector is not None else None
        return {
            "server": self._api.server if self._api is not None else None,
            "writesStatus": self.leader,
            "lease": None
            if lease is None or elector is None
            else {
                "namespace": lease.namespace,
                "name": lease.name,
                "identity": lease.identity,
                "holder": elector.holder,
                "problem": elector.problem,
            },
        }

    def collect(self) -> Iterator[MetricFamily]:
        """The provider's metrics (a collector for ``/metrics``)."""
        yield from self.metrics.counters()
        yield gauge(
            "weir_kubernetes_leader",
            "1 while this replica holds the Lease and writes status (always 1 without leader election).",
            {(): 1.0 if self.leader else 0.0},
        )
        yield gauge(
            "weir_kubernetes_leader_election_failing",
            "1 while the Lease cannot be read or written (its namespace missing, RBAC, the API server "
            "away): no replica writes status; /status says why.",
            {(): 1.0 if self.election_problem is not None else 0.0},
        )

    def cache_stats(self) -> CacheStats:
        return self.cache.stats()
