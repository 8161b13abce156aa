"""The endpoints of external hostnames: weir resolves them and hands Envoy only the allowed addresses.

Where the egress guard lives (docs/architecture.md, "Where the guard lives"):
every upstream that is an external hostname (:class:`weir.ir.DnsName`) is
an EDS cluster, and :class:`ExternalEndpoints` makes its
``ClusterLoadAssignment``. It keeps each such name resolved
(:class:`weir.resolver.Resolver`: TTLs, the last good answer on failure,
backoff) and splits each answer with the upstream's denied networks
(:attr:`weir.ir.Upstream.egress_guard`, decided by translation from weir's
flags, the GatewayClassConfig or the defaults; :func:`weir.addresses.denied_by`
judges each address). Only the allowed addresses become endpoints
(:func:`weir.xds.endpoints.load_assignment`); all denied → the endpoint
that answers 403. A denied address so never reaches Envoy, and no request
pays for a check.

Data moves forward: translation and build make the clusters; this module
adds the ``ENDPOINT`` resources. A new answer changes only the assignments
of the clusters of that name (no translation, no build), delivered to
``on_change`` in batches (:data:`BATCH_S`, spaced by what the last push cost:
:data:`FLUSH_SPACING`), so that thousands of first answers make a few pushes,
not thousands, and an answer costs in proportion to the clusters of its name.

What each answer made of a cluster is kept (:meth:`ExternalEndpoints.answers`)
for the XBackend's status (:func:`amend_statuses`): a mixed answer is served
by its allowed addresses and says which were left out and why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from weir import ir
from weir.api.meta import ObjectKey
from weir.resolver import Answer, Resolver
from weir.xds.endpoints import load_assignment
from weir.xds.snapshot import Resource

log = logging.getLogger("weir.egress")

#: Answers arriving within this many seconds of each other make one push.
BATCH_S = 0.02
#: After a push that took weir ``c`` seconds (the assignments, and the controller serving them:
#: passes over every cluster), the next one waits at least ``FLUSH_SPACING * c``. At 10,000
#: clusters a push costs tens of milliseconds; pushed every 20 ms, the first answers kept
#: weir busy with pushes alone and starved the lookups (start took 15 s longer).
FLUSH_SPACING = 3.0


@dataclass(frozen=True)
class Wanted:
    """What one EDS cluster needs: the name, the port, its resolver and its denied networks."""

    hostname: str
    port: int
    dns: ir.DnsSettings
    denied_networks: tuple[str, ...]
    protocol: ir.UpstreamProtocol = ir.UpstreamProtocol.HTTP1


@dataclass(frozen=True)
class Split:
    """What the latest answer of a cluster's name made of it.

    ``allowed``: the endpoints; ``denied``: ``(address, network)`` left out;
    ``error``: why the latest lookup failed (the previous answer is kept);
    ``resolved``: whether any lookup succeeded yet.
    """

    hostname: str
    allowed: tuple[str, ...]
    denied: tuple[tuple[str, str], ...]
    error: str | None
    resolved: bool = True

    def note(self) -> str | None:
        """A sentence for the XBackend's status, or ``None`` when there is nothing to say."""
        parts = []
        if self.denied:
            left = ", ".join(f"{address} (in denied network {net})" for address, net in self.denied)
            if self.allowed:
                parts.append(
                    f"{self.hostname} resolves to {', '.join(self.allowed)} and also to {left}; "
                    "requests go to the allowed addresses only"
                )
            else:
                parts.append(
                    f"every address {self.hostname} resolves to is denied: {left}; "
                    "requests are answered 403 and no connection is made"
                )
        if self.error is not None:
            kept = "the last good answer is kept" if self.resolved else "no address yet (503)"
            parts.append(f"resolving {self.hostname} failed ({self.error}); {kept}")
        return f"DNS: {'; '.join(parts)}." if parts else None


def wanted(ir_: ir.IR, memo: dict[int, tuple[ir.Upstream, Wanted]] | None = None) -> dict[str, Wanted]:
    """The EDS clusters of ``ir_`` by name: its upstreams that are external hostnames.

    ``memo`` (id of an upstream → the upstream and its :class:`Wanted`, for
    ``ir_.dns``) is read and refilled: an edit leaves all but a few upstreams
    the same objects, whose :class:`Wanted` is then the same object too, so
    that comparing the result with the last one costs identity checks.
    """
    out: dict[str, Wanted] = {}
    fresh: dict[int, tuple[ir.Upstream, Wanted]] = {}
    for upstream in ir_.upstreams:
        destination = upstream.destination
        if isinstance(destination, ir.DnsName):
            known = memo.get(id(upstream)) if memo is not None else None
            if known is not None and known[0] is upstream:
                want = known[1]
            else:
                guard = upstream.egress_guard
                want = Wanted(
                    destination.hostname,
                    destination.port,
                    destination.dns or ir_.dns,
                    guard.denied_networks if guard is not None else (),
                    upstream.protocol,
                )
            fresh[id(upstream)] = (upstream, want)
            out[upstream.name] = want
    if memo is not None:
        memo.clear()
        memo.update(fresh)
    return out


class ExternalEndpoints:
    """Keeps the EDS clusters' assignments (see the module's docstring).

    ``on_change()`` runs (on the event loop) after new answers changed
    :attr:`resources`; it is not called for :meth:`update`, whose caller
    serves the result itself. Must be used from a running event loop.
    """

    def __init__(self, on_change: Callable[[], None], resolver: Resolver | None = None) -> None:
        self._on_change = on_change
        self._resolver = resolver if resolver is not None else Resolver(self._answered)
        self._resolver.on_change = self._answered
        self._wanted: dict[str, Wanted] = {}
        self._clusters: dict[tuple[str, ir.DnsSettings], set[str]] = {}
        # The keys of ``_clusters`` by hostname: an answer names a hostname.
        self._by_host: dict[str, set[tuple[str, ir.DnsSettings]]] = {}
        self._quiet_until = 0.0  # loop time before which no push is made (FLUSH_SPACING)
        self._memo: dict[int, tuple[ir.Upstream, Wanted]] = {}  # see wanted()
        self._dns: ir.DnsSettings | None = None
        self._splits: dict[str, Split] = {}
        self._dirty: set[tuple[str, ir.DnsSettings]] = set()
        self._flush: asyncio.TimerHandle | None = None
        #: The assignments being served, by cluster; replaced (never changed) on each change.
        self.resources: Mapping[str, Resource] = {}
        #: Counts changes of :meth:`answers` (for status: publish again when it moved).
        self.generation = 0

    def update(self, ir_: ir.IR) -> Mapping[str, Resource]:
        """Follow the EDS clusters of ``ir_``: resolve new names, forget old ones; the assignments.

        A cluster without an answer yet has no assignment: Envoy keeps it
        warming (requests to it wait) until the first one, as it did for a
        DNS cluster's first resolution. A first lookup that fails is an
        answer without addresses (503, and the status says why) until one
        succeeds, so a silent DNS server does not hold Envoy warming.
        """
        if ir_.dns != self._dns:
            self._memo.clear()  # an upstream without its own resolvers uses the IR's
            self._dns = ir_.dns
        now = wanted(ir_, self._memo)
        if now == self._wanted:
            return self.resources
        keys: dict[tuple[str, ir.DnsSettings], set[str]] = {}
        for cluster, want in now.items():
            keys.setdefault((want.hostname, want.dns), set()).add(cluster)
        for key in self._clusters.keys() - keys.keys():
            self._resolver.untrack(*key)
        for key in keys.keys() - self._clusters.keys():
            self._resolver.track(*key)
        self._clusters = keys
        self._by_host = {}
        for key in keys:
            self._by_host.setdefault(key[0], set()).add(key)
        resources = {name: r for name, r in self.resources.items() if now.get(name) == self._wanted.get(name)}
        splits = {name: s for name, s in self._splits.items() if name in resources}
        if len(splits) != len(self._splits):
            self._splits = splits
            self.generation += 1
        self._wanted = now
        for cluster, want in now.items():
            if cluster not in resources:
                self._assign(cluster, want, resources)
        self.resources = dict(sorted(resources.items()))
        return self.resources

    def answers(self) -> Mapping[str, Split]:
        """What the latest answer made of each cluster (those answered so far)."""
        return self._splits

    async def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
        await self._resolver.close()

    def _assign(self, cluster: str, want: Wanted, into: dict[str, Resource]) -> None:
        answer = self._resolver.answer(want.hostname, want.dns)
        if answer is None:
            into.pop(cluster, None)
            if self._splits.pop(cluster, None) is not None:
                self.generation += 1
            return
        allowed, denied = answer.split(want.denied_networks)
        split = Split(want.hostname, allowed, denied, answer.error, answer.resolved)
        if denied and split != self._splits.get(cluster):
            log.warning("%s: %s", cluster, split.note())
        if self._splits.get(cluster) != split:
            self._splits[cluster] = split
            self.generation += 1
        message = load_assignment(cluster, want.hostname, want.port, allowed, denied, protocol=want.protocol)
        into[cluster] = Resource.of(message, cluster)

    def _answered(self, answer: Answer) -> None:
        keys = self._by_host.get(answer.hostname)
        if not keys:
            return
        self._dirty.update(keys)
        if self._flush is None:
            loop = asyncio.get_running_loop()
            self._flush = loop.call_later(max(BATCH_S, self._quiet_until - loop.time()), self._apply)

    def _apply(self) -> None:
        started = time.perf_counter()
        self._flush = None
        dirty, self._dirty = self._dirty, set()
        resources = dict(self.resources)
        before = self.generation
        changed = False
        for key in dirty:
            for cluster in self._clusters.get(key, ()):
                old = resources.get(cluster)
                self._assign(cluster, self._wanted[cluster], resources)
                new = resources.get(cluster)
                changed = changed or (old.version if old else None) != (new.version if new else None)
        if changed or before != self.generation:
            if resources.keys() != self.resources.keys():
                resources = dict(sorted(resources.items()))
            self.resources = resources
            self._on_change()
        cost = time.perf_counter() - started
        self._quiet_until = asyncio.get_running_loop().time() + FLUSH_SPACING * cost


def amend_statuses(
    statuses: Mapping[ObjectKey, dict[str, Any]], splits: Mapping[str, Split]
) -> Mapping[ObjectKey, dict[str, Any]]:
    """``statuses`` with each XBackend's ``Accepted`` message telling what its name's answer left out.

    The cluster of an XBackend is ``xbackend/NS/NAME`` (:class:`weir.ir.Upstream`).
    Only XBackends with something to say are copied; the rest are the given dicts.
    """
    notes: dict[ObjectKey, str] = {}
    for cluster, split in splits.items():
        note = split.note()
        kind, _, rest = cluster.partition("/")
        namespace, _, name = rest.partition("/")
        if note is not None and kind == "xbackend" and name and "/" not in name:
            notes[ObjectKey("XBackend", namespace, name)] = note
    if not notes:
        return statuses
    out = dict(statuses)
    for key, note in notes.items():
        status = out.get(key)
        if status is not None:
            out[key] = _with_note(status, note)
    return out


def _with_note(status: dict[str, Any], note: str) -> dict[str, Any]:
    out = dict(status)
    for list_key in ("parents", "ancestors"):  # the XBackend CRD's two shapes
        if list_key not in status:
            continue
        entries = []
        for entry in status[list_key]:
            conditions = []
            for condition in entry.get("conditions", []):
                if condition.get("type") == "Accepted" and condition.get("status") == "True":
                    message = (condition.get("message") or "").rstrip(".")
                    condition = {**condition, "message": f"{message}. {note}" if message else note}
                conditions.append(condition)
            entries.append({**entry, "conditions": conditions})
        out[list_key] = entries
    return out
