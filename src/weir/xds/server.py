"""The ADS server: serves :class:`~weir.xds.snapshot.Snapshot` objects to Envoy.

Aggregated discovery, incremental ("delta") variant
(``DeltaAggregatedResources``), over ``grpc.aio`` on a unix socket only.
The state-of-the-world variant is refused (``UNIMPLEMENTED``): weir writes
Envoy's bootstrap itself (``DELTA_GRPC``), and a second protocol would be a
second way to get make-before-break wrong.

How a snapshot reaches Envoy
----------------------------
* Every resource carries its own version, a hash of its bytes
  (:class:`~weir.xds.snapshot.Resource`). Per stream and type the server
  knows which version of each resource that Envoy has (or was last sent),
  starting from the ``initial_resource_versions`` Envoy declares when it
  (re)connects.
* :meth:`AdsServer.set_snapshot` replaces the current snapshot. Every
  connected stream then sends, in :data:`~weir.xds.snapshot.PUSH_ORDER`, for
  each type it subscribes to, only the resources whose version differs from
  Envoy's, and the names of the clusters and listeners that are gone. An
  edit of one route sends one route configuration, not ten thousand
  clusters.
* Clusters and listeners are wildcard subscriptions (Envoy wants them all);
  route configurations, secrets and cluster load assignments (EDS, the
  addresses of external hostnames: :mod:`weir.xds.endpoints`) are asked for
  by name, and a name newly asked for is answered at once. A cluster sent
  again is followed by its assignment, changed or not: Envoy's replacement
  cluster waits for one and does not ask. Removals are only ever sent for wildcard
  types: Envoy unsubscribes from a route configuration or secret, and drops
  it, once nothing uses it any more (a removal of a route configuration
  still in use is ignored by Envoy anyway).
  Removing a cluster that routes still use is the controller's business
  (make before break, :func:`weir.controller._keep_retiring`).
* The first request for any type is answered immediately, even with zero
  resources, once a snapshot exists (before the first snapshot, Envoy waits).
* A NACK leaves Envoy on its previous version of the resources in the
  rejected response (for clusters and listeners Envoy may have applied the
  good ones; which ones is not knowable). Those resources stay *suspect* on
  that stream until a later response carrying them is ACKed. The server
  does not send them again by itself; the next snapshot does, whatever its
  content, and so does :meth:`AdsServer.retry_rejected` (a rejection can be
  transient: a port that was in use; the controller retries those).
* A new stream (Envoy restarted or reconnected) gets what it lacks of the
  current snapshot, except that a resource Envoy rejected, and unchanged
  since, is sent in the last version an Envoy accepted: a restarted Envoy
  serves what the previous one did, and the version is still reported as
  rejected.
* Every response carries ``system_version_info = snapshot.version`` and a
  nonce that is unique for the life of the server; Envoy answers each nonce.

What Envoy accepted
-------------------
:meth:`AdsServer.state` returns an immutable :class:`ServerState`;
:meth:`AdsServer.wait_for` waits for a predicate over it,
:meth:`AdsServer.wait_acked` for a version to be accepted or rejected, and
:meth:`AdsServer.add_listener` registers a callback run on every change;
:meth:`AdsServer.flushed` waits until every stream has sent what it has.
All methods must be called from the event loop the server runs on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from weir.runfolder import unix_socket_path
from weir.xds import accesslog
from weir.xds.acks import (
    AckResult,
    AckStatus,
    Nack,
    NodeState,
    NodeTypeState,
    Outcome,
    Push,
    ServerState,
    Subscription,
    TypeState,
    short_type_name,
)
from weir.xds.counters import XdsCounters
from weir.xds.snapshot import CLUSTER, ENDPOINT, PUSH_ORDER, WILDCARD_TYPES, Resource, Snapshot

__all__ = [
    "AckResult",
    "AckStatus",
    "AdsServer",
    "Nack",
    "NodeState",
    "NodeTypeState",
    "Outcome",
    "ServerState",
    "TypeState",
]

log = logging.getLogger("weir.xds")

_T = TypeVar("_T")


# --------------------------------------------------------------------------
# Per stream
# --------------------------------------------------------------------------


#: Stream queue markers: the snapshot changed; the request stream ended.
_WAKE, _EOF = object(), object()


@dataclass(slots=True)
class _Stream:
    id: int
    peer: str
    connected_since: float
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    node_id: str | None = None
    subs: dict[str, Subscription] = field(default_factory=dict)
    #: Waiting for the next item with nothing left to send (see :meth:`AdsServer.flushed`).
    waiting: bool = False

    @property
    def flushed(self) -> bool:
        return self.waiting and self.queue.empty()


# --------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------


class AdsServer:
    """A delta ADS server on a unix socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = unix_socket_path(socket_path)
        self._server: grpc.aio.Server | None = None
        self._snapshot: Snapshot | None = None
        self._streams: dict[int, _Stream] = {}
        self._streams_opened = 0
        self._nonces = itertools.count(1)
        self._types = {t: TypeState(t, None, None, None) for t in PUSH_ORDER}
        self._state: ServerState | None = None
        self._changed = asyncio.Event()
        self._drained = asyncio.Event()  # set (and replaced) whenever a stream has sent all it had
        self._listeners: list[Callable[[ServerState], None]] = []
        # Per type, by name: the last version of each resource an Envoy
        # accepted, and resources rejected since (with the rejection).
        self._accepted: dict[str, dict[str, Resource]] = {t: {} for t in PUSH_ORDER}
        self._rejected: dict[str, dict[str, tuple[str, Nack]]] = {t: {} for t in PUSH_ORDER}
        #: Pushes, ACKs and NACKs per type, for /metrics (weir.telemetry).
        self.counters = XdsCounters()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind the unix socket and start serving."""
        if self._server is not None:
            raise RuntimeError("AdsServer already started")
        directory = os.path.dirname(self.socket_path) or "."
        os.makedirs(directory, exist_ok=True)
        try:
            st = os.lstat(self.socket_path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(st.st_mode):
                raise FileExistsError(f"{self.socket_path} exists and is not a socket")
            os.unlink(self.socket_path)  # left over from a previous run
        server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                # Envoy pings (HTTP/2 keepalive) to detect a dead control plane.
                ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
                ("grpc.keepalive_permit_without_calls", 1),
            ]
        )
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(_Servicer(self), server)
        accesslog.add_to_server(server)  # Envoy's access log of MCP tool calls (weir.xds.accesslog)
        address = f"unix:{self.socket_path}"
        port = server.add_insecure_port(address)
        if not port:
            raise OSError(f"cannot bind ADS server to {address}")
        await server.start()
        try:
            os.chmod(self.socket_path, 0o600)
        except OSError:
            log.warning("cannot restrict permissions of %s", self.socket_path)
        self._server = server
        log.info("ADS server listening on %s", address)

    async def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving; open streams are cancelled after ``grace`` seconds."""
        server, self._server = self._server, None
        if server is None:
            return
        try:
            await server.stop(grace)
        finally:
            for stream in list(self._streams.values()):
                stream.queue.put_nowait(_EOF)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
            log.info("ADS server stopped")

    async def __aenter__(self) -> AdsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---------------------------------------------------------------- snapshot

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def set_snapshot(self, snapshot: Snapshot) -> None:
        """Make ``snapshot`` current and push what changed to every Envoy."""
        self._snapshot = snapshot
        for type_url, rejected in self._rejected.items():
            current = snapshot.of_type(type_url)
            for name in [n for n, (v, _) in rejected.items() if _version(current.get(n)) != v]:
                del rejected[name]  # changed since: no longer known bad
        for stream in self._streams.values():
            stream.queue.put_nowait(_WAKE)
        log.debug("snapshot %s set (%d streams)", snapshot.version, len(self._streams))
        self._notify()

    def retry_rejected(self) -> None:
        """Send every Envoy again the resources it rejected, in their current versions.

        For a rejection that may not last: a listener whose port was busy
        is added once the port is free. Resources Envoy accepted meanwhile
        are not sent again; nothing happens when nothing was rejected.
        """
        for stream in self._streams.values():
            if any(sub.suspects for sub in stream.subs.values()):
                stream.queue.put_nowait(_WAKE)

    # ---------------------------------------------------------------- observing

    def state(self) -> ServerState:
        """An immutable summary, rebuilt only after a change."""
        if self._state is None:
            nodes: dict[str, NodeState] = {}
            for stream in sorted(self._streams.values(), key=lambda s: s.id):
                if stream.node_id is None:
                    continue
                # A newer stream of the same node replaces an older one that
                # has not been noticed dead yet.
                nodes[stream.node_id] = NodeState(
                    node_id=stream.node_id,
                    stream_id=stream.id,
                    peer=stream.peer,
                    connected_since=stream.connected_since,
                    types=MappingProxyType({t: s.view() for t, s in stream.subs.items()}),
                )
            self._state = ServerState(
                snapshot_version=self._snapshot.version if self._snapshot else None,
                nodes=MappingProxyType(nodes),
                types=MappingProxyType(dict(self._types)),
                streams_opened=self._streams_opened,
            )
        return self._state

    def add_listener(self, callback: Callable[[ServerState], None]) -> Callable[[], None]:
        """Call ``callback(state)`` after every change; returns a function removing it.

        Callbacks run synchronously on the event loop and must not block.
        """
        self._listeners.append(callback)

        def remove() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return remove

    async def wait_for(
        self, predicate: Callable[[ServerState], _T | None], timeout: float | None = None
    ) -> _T:
        """Wait until ``predicate(state)`` is neither ``None`` nor ``False``; return it.

        Raises :class:`TimeoutError` after ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            while True:
                changed = self._changed
                value = predicate(self.state())
                if value is not None and value is not False:
                    return value
                await changed.wait()

    async def wait_acked(self, version: str, timeout: float) -> AckResult:
        """Wait until every connected Envoy ACKed every type of ``version``.

        Returns as soon as one type of that version is NACKed (with Envoy's
        message), when another snapshot replaces it, or after ``timeout``
        seconds (status ``TIMEOUT``, with what was still awaited).
        """
        try:
            return await self.wait_for(lambda s: s.ack_result(version), timeout)
        except TimeoutError:
            reason = self.state().pending_reason(version)
            return AckResult(version, AckStatus.TIMEOUT, message=reason)

    async def flushed(self) -> None:
        """Wait until every stream has handed gRPC all it has to send, including for the current snapshot.

        A stream has flushed when it has answered every request and snapshot
        it was given, and gRPC has taken the last response (the stream got
        control back from sending it). Work that may wait, such as status,
        waits for this, so as not to hold up a push on the event loop: a
        push of several types goes out one response at a time, and each
        needs the event loop to follow the one before. Returns at once when
        no Envoy is connected.
        """
        while not all(stream.flushed for stream in self._streams.values()):
            await self._drained.wait()

    # ---------------------------------------------------------------- internals

    def _signal_drained(self) -> None:
        drained, self._drained = self._drained, asyncio.Event()
        drained.set()

    def _aggregate(self, type_url: str, **changes: Any) -> None:
        if type_url in self._types:
            self._types[type_url] = dataclasses.replace(self._types[type_url], **changes)

    def _notify(self) -> None:
        self._state = None
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self._listeners:
            state = self.state()
            for callback in list(self._listeners):
                try:
                    callback(state)
                except Exception:
                    log.exception("ADS state listener failed")

    async def _serve(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        self._streams_opened += 1
        stream = _Stream(id=self._streams_opened, peer=str(context.peer() or ""), connected_since=time.time())
        self._streams[stream.id] = stream
        reader = asyncio.create_task(self._read(requests, stream))
        try:
            while True:
                if stream.queue.empty():
                    stream.waiting = True
                    self._signal_drained()
                item = await stream.queue.get()
                stream.waiting = False
                if item is _EOF:
                    break
                responses = self._on_snapshot(stream) if item is _WAKE else self._on_request(stream, item)
                self._notify()
                for response in responses:
                    yield response
        finally:
            reader.cancel()
            del self._streams[stream.id]
            self._signal_drained()
            if stream.node_id is not None:
                log.info("Envoy disconnected: node=%s stream=%d", stream.node_id, stream.id)
            self._notify()

    async def _read(self, requests: AsyncIterator[Any], stream: _Stream) -> None:
        try:
            async for request in requests:
                stream.queue.put_nowait(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the peer went away
            log.debug("ADS stream %d read ended: %r", stream.id, exc)
        finally:
            stream.queue.put_nowait(_EOF)

    # ------------------------------------------------------------ Envoy's requests

    def _on_request(self, stream: _Stream, request: Any) -> list[Any]:
        type_url: str = request.type_url
        if stream.node_id is None:
            stream.node_id = request.node.id or f"stream-{stream.id}"
            log.info(
                "Envoy connected: node=%s cluster=%s stream=%d",
                stream.node_id,
                request.node.cluster,
                stream.id,
            )
        sub = stream.subs.get(type_url)
        if sub is None:
            sub = stream.subs[type_url] = Subscription(type_url, wildcard=type_url in WILDCARD_TYPES)
        nonce: str = request.response_nonce
        if nonce:
            push = sub.pending.pop(nonce, None)
            if push is None:
                log.debug("%s answer to unknown nonce %s: ignored", short_type_name(type_url), nonce)
            elif request.HasField("error_detail"):
                self._on_nack(stream, sub, push, request.error_detail.message)
            else:
                self._on_ack(stream, sub, push)

        # Subscriptions: "*" is the wildcard, which only clusters and listeners use.
        first = not sub.subscribed
        added = {n for n in request.resource_names_subscribe if n != "*"}
        if first:
            sub.subscribed = True
            initial: Mapping[str, str] = request.initial_resource_versions
            sub.known = {n: v for n, v in initial.items() if sub.wildcard or n in added}
        for name in request.resource_names_unsubscribe:
            sub.names.discard(name)
            sub.known.pop(name, None)
            sub.suspects.pop(name, None)
        added -= sub.names
        if not sub.wildcard:
            sub.names |= added

        snapshot = self._snapshot
        if snapshot is None:
            return []  # answered by the first set_snapshot
        if first:
            return [self._respond(stream, sub, snapshot, *self._changes(sub, snapshot), always=True)]
        if added and not sub.wildcard:
            # Newly asked-for names that exist are sent, whatever Envoy is believed to have.
            resources = snapshot.of_type(type_url)
            for name in added:
                sub.known.pop(name, None)
            send = {n: resources[n] for n in sorted(added) if n in resources}
            fallbacks = self._fallbacks(sub.type_url, send, list(send))
            response = self._respond(stream, sub, snapshot, send, fallbacks, ())
            return [response] if response is not None else []
        return []

    def _on_ack(self, stream: _Stream, sub: Subscription, push: Push) -> None:
        self.counters.acked(sub.type_url, push.nonce)
        accepted = self._accepted.setdefault(sub.type_url, {})
        rejected = self._rejected.setdefault(sub.type_url, {})
        for name, resource in push.resources.items():
            accepted[name] = resource
            if name in push.fallbacks:
                # The old version is in, the current one is not: still rejected.
                sub.suspects[name] = sub.nack = push.fallbacks[name]
                continue
            sub.suspects.pop(name, None)
            entry = rejected.get(name)
            if entry is not None and entry[0] == resource.version:
                del rejected[name]  # it was not the culprit after all
        for name in push.removed:
            accepted.pop(name, None)
            sub.suspects.pop(name, None)
        sub.answered = True
        if not sub.suspects:
            sub.nack = None
            sub.acked_version = push.version
            self._aggregate(sub.type_url, acked_version=push.version, nack=None)
        else:
            self._aggregate(sub.type_url, nack=sub.nack)
        log.debug(
            "ACK %s version=%s nonce=%s from %s",
            short_type_name(sub.type_url),
            push.version,
            push.nonce,
            stream.node_id,
        )

    def _on_nack(self, stream: _Stream, sub: Subscription, push: Push, message: str) -> None:
        assert stream.node_id is not None
        self.counters.nacked(sub.type_url, push.nonce)
        nack = Nack(type_url=sub.type_url, version=push.version, message=message, node_id=stream.node_id)
        accepted = self._accepted.setdefault(sub.type_url, {})
        rejected = self._rejected.setdefault(sub.type_url, {})
        for name, resource in push.resources.items():
            sub.suspects[name] = nack
            if _version(accepted.get(name)) != resource.version:  # accepted before: not the culprit
                rejected[name] = (resource.version, nack)
        sub.answered = True
        sub.nack = nack
        self._aggregate(sub.type_url, nack=nack)
        log.warning(
            "Envoy %s rejected %s version %s (%d resources; it keeps their previous versions): %s",
            stream.node_id,
            short_type_name(sub.type_url),
            push.version,
            len(push.resources),
            message,
        )

    # ------------------------------------------------------------ responses

    def _on_snapshot(self, stream: _Stream) -> list[Any]:
        snapshot = self._snapshot
        if snapshot is None:
            return []
        responses: list[Any] = []
        replaced: set[str] = set()  # clusters sent in this push
        order = list(PUSH_ORDER) + [t for t in stream.subs if t not in PUSH_ORDER]
        for type_url in order:
            sub = stream.subs.get(type_url)
            if sub is None or not sub.subscribed:
                continue
            if type_url == ENDPOINT and replaced:
                # An EDS cluster Envoy replaces waits (warming) for its assignment again,
                # and Envoy does not ask for it: send it again, changed or not.
                for name in replaced:
                    sub.known.pop(name, None)
                sub.synced_resources = None
            if not sub.active and sub.responded:
                continue
            if sub.synced_resources is snapshot.of_type(type_url) and not sub.suspects:
                sub.synced_version = snapshot.version  # the very resources last synced: no change
                continue
            send, fallbacks, removed = self._changes(sub, snapshot, retry_suspects=True)
            response = self._respond(
                stream, sub, snapshot, send, fallbacks, removed, always=not sub.responded
            )
            if response is not None:
                responses.append(response)
                if type_url == CLUSTER:
                    replaced = set(send)
        return responses

    def _changes(
        self, sub: Subscription, snapshot: Snapshot, *, retry_suspects: bool = False
    ) -> tuple[dict[str, Resource], dict[str, Nack], tuple[str, ...]]:
        """What ``sub`` lacks of ``snapshot``: (to send, of which fallbacks, names removed)."""
        resources = snapshot.of_type(sub.type_url)
        known = sub.known
        if sub.wildcard:
            wanted: Any = resources
        else:
            wanted = sorted(n for n in sub.names if n in resources)
        send: dict[str, Resource] = {}
        for name in wanted:
            resource = resources[name]
            if known.get(name) != resource.version or (retry_suspects and name in sub.suspects):
                send[name] = resource
        removed: tuple[str, ...] = ()
        if sub.wildcard:
            removed = tuple(sorted(n for n in known if n not in resources))
        # Only what this Envoy never had is replaced by its last accepted version.
        return send, self._fallbacks(sub.type_url, send, [n for n in send if n not in known]), removed

    def _fallbacks(self, type_url: str, send: dict[str, Resource], names: Iterable[str]) -> dict[str, Nack]:
        """Replace in ``send`` those of ``names`` known to be rejected by their last accepted versions."""
        rejected = self._rejected.get(type_url)
        if not rejected:
            return {}
        accepted = self._accepted.get(type_url, {})
        fallbacks: dict[str, Nack] = {}
        for name in names:
            resource = send[name]
            entry = rejected.get(name)
            if entry is not None and entry[0] == resource.version and name in accepted:
                send[name], fallbacks[name] = accepted[name], entry[1]
                log.info(
                    "%s %r: sending its last accepted version (the current one was rejected)",
                    short_type_name(type_url),
                    name,
                )
        return fallbacks

    def _respond(
        self,
        stream: _Stream,
        sub: Subscription,
        snapshot: Snapshot,
        send: dict[str, Resource],
        fallbacks: dict[str, Nack],
        removed: tuple[str, ...],
        *,
        always: bool = False,
    ) -> Any:
        """A response carrying ``send`` and ``removed`` (``None`` if there is nothing to say)."""
        sub.synced_version = snapshot.version
        sub.synced_resources = snapshot.of_type(sub.type_url)
        if not send and not removed and not always:
            return None
        nonce = str(next(self._nonces))
        response = discovery_pb2.DeltaDiscoveryResponse(
            system_version_info=snapshot.version,
            type_url=sub.type_url,
            nonce=nonce,
            removed_resources=removed,
        )
        out = response.resources
        for name, resource in send.items():
            item = out.add()
            item.name = name
            item.version = resource.version
            item.resource.type_url = resource.type_url
            item.resource.value = resource.value
            sub.known[name] = resource.version
        for name in removed:
            sub.known.pop(name, None)
        sub.pending[nonce] = Push(nonce, snapshot.version, send, fallbacks, removed)
        sub.responded = True
        sub.sent_version = snapshot.version
        self._aggregate(sub.type_url, sent_version=snapshot.version)
        self.counters.pushed(sub.type_url, nonce)
        log.debug(
            "push %s version=%s nonce=%s resources=%d removed=%d to %s",
            short_type_name(sub.type_url),
            snapshot.version,
            nonce,
            len(send),
            len(removed),
            stream.node_id,
        )
        return response


def _version(resource: Resource | None) -> str | None:
    return resource.version if resource is not None else None


class _Servicer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    def __init__(self, server: AdsServer) -> None:
        self._server = server

    async def StreamAggregatedResources(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> None:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "weir serves incremental (delta) ADS only; set ads_config.api_type to DELTA_GRPC",
        )

    async def DeltaAggregatedResources(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async for response in self._server._serve(request_iterator, context):
            yield response
