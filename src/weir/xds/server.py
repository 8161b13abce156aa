"""The ADS server: serves :class:`~weir.xds.snapshot.Snapshot` objects to Envoy.

Aggregated discovery, state of the world (``StreamAggregatedResources``),
over ``grpc.aio`` on a unix socket only.

How a snapshot reaches Envoy
----------------------------
* :meth:`AdsServer.set_snapshot` replaces the current snapshot. Every
  connected stream then sends, in :data:`~weir.xds.snapshot.PUSH_ORDER`, each
  type it subscribes to whose resources differ from what was last sent on
  that stream. Unchanged types are not re-sent: their last answer (ACK or
  pending) now stands for the new version too.
* Wildcard types (listeners, clusters) carry every resource of the type;
  named types (routes, secrets) carry the resources Envoy asked for that
  exist. A change of the names Envoy asks for is answered at once.
* The first subscription to any type is answered immediately, even with zero
  resources, once a snapshot exists (before the first snapshot, Envoy waits).
* A NACK leaves Envoy on its previous configuration. The server does not send
  the rejected resources again by itself; the next snapshot sends the type
  again, whatever its content.
* A new stream (Envoy restarted or reconnected) gets the current snapshot,
  except that a resource Envoy rejected, and unchanged since, is sent in the
  last version an Envoy accepted: a restarted Envoy serves what the previous
  one did, and the version is still reported as rejected.
* Every response carries ``version_info = snapshot.version`` and a nonce that
  is unique for the life of the server.

What Envoy accepted
-------------------
:meth:`AdsServer.state` returns an immutable :class:`ServerState`;
:meth:`AdsServer.wait_for` waits for a predicate over it,
:meth:`AdsServer.wait_acked` for a version to be accepted or rejected, and
:meth:`AdsServer.add_listener` registers a callback run on every change.
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
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import any_pb2
from google.protobuf.message import Message

from weir.xds.acks import (
    AckResult,
    AckStatus,
    Nack,
    NodeState,
    NodeTypeState,
    Outcome,
    ServerState,
    TypeState,
    short_type_name,
)
from weir.xds.snapshot import PUSH_ORDER, WILDCARD_TYPES, Snapshot

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

#: Longest path a unix socket address may have on Linux (``sun_path`` less NUL).
_MAX_UNIX_PATH = 107


# --------------------------------------------------------------------------
# The immutable view
# --------------------------------------------------------------------------
# Mutable per-stream bookkeeping
# --------------------------------------------------------------------------


@dataclass(slots=True)
class _Sub:
    """One type on one stream."""

    type_url: str
    wildcard: bool
    subscribed: bool = False
    names: frozenset[str] = frozenset()
    # The last response.
    nonce: str | None = None
    sent_version: str | None = None
    sent_names: frozenset[str] | None = None
    content: dict[str, Message] | None = None
    synced_version: str | None = None
    outcome: Outcome | None = None
    # The rejection whose resources the last response replaced by their last
    # accepted versions (see AdsServer._first_content).
    fallback: Nack | None = None
    # Envoy's answers.
    acked_version: str | None = None
    nack: Nack | None = None

    @property
    def active(self) -> bool:
        return self.subscribed and (self.wildcard or bool(self.names))

    def view(self) -> NodeTypeState:
        return NodeTypeState(
            type_url=self.type_url,
            subscribed=self.active,
            resource_names=self.names,
            sent_version=self.sent_version,
            synced_version=self.synced_version,
            outcome=self.outcome,
            acked_version=self.acked_version,
            nack=self.nack,
        )


#: Stream queue markers: the snapshot changed; the request stream ended.
_WAKE, _EOF = object(), object()


@dataclass(slots=True)
class _Stream:
    id: int
    peer: str
    connected_since: float
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    node_id: str | None = None
    subs: dict[str, _Sub] = field(default_factory=dict)


# --------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------


class AdsServer:
    """A state-of-the-world ADS server on a unix socket."""

    def __init__(self, socket_path: str) -> None:
        if len(os.fsencode(socket_path)) > _MAX_UNIX_PATH:
            raise ValueError(f"unix socket path is longer than {_MAX_UNIX_PATH} bytes: {socket_path!r}")
        self.socket_path = socket_path
        self._server: grpc.aio.Server | None = None
        self._snapshot: Snapshot | None = None
        self._streams: dict[int, _Stream] = {}
        self._streams_opened = 0
        self._nonces = itertools.count(1)
        self._types = {t: TypeState(t, None, None, None) for t in PUSH_ORDER}
        self._state: ServerState | None = None
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[ServerState], None]] = []
        self._any_cache: dict[int, tuple[Message, Any]] = {}
        # Per type, by name: the last version of each resource an Envoy
        # accepted, and resources rejected since (with the rejection).
        self._accepted: dict[str, dict[str, Message]] = {}
        self._rejected: dict[str, dict[str, tuple[Message, Nack]]] = {}

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
        self._any_cache.clear()
        for type_url, rejected in self._rejected.items():
            current = snapshot.of_type(type_url)
            for name in [n for n, (m, _) in rejected.items() if not _eq(current.get(n), m)]:
                del rejected[name]  # changed since: no longer known bad
        for stream in self._streams.values():
            stream.queue.put_nowait(_WAKE)
        log.debug("snapshot %s set (%d streams)", snapshot.version, len(self._streams))
        self._notify()

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

    # ---------------------------------------------------------------- internals

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
                item = await stream.queue.get()
                if item is _EOF:
                    break
                responses = self._on_snapshot(stream) if item is _WAKE else self._on_request(stream, item)
                for response in responses:
                    yield response
        finally:
            reader.cancel()
            del self._streams[stream.id]
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
            sub = stream.subs[type_url] = _Sub(type_url, wildcard=type_url in WILDCARD_TYPES)
        nonce: str = request.response_nonce
        if nonce and sub.nonce is not None:
            if nonce != sub.nonce:
                log.debug(
                    "stale %s request from %s (nonce %s, expected %s): ignored",
                    short_type_name(type_url),
                    stream.node_id,
                    nonce,
                    sub.nonce,
                )
                return []
            if request.HasField("error_detail"):
                self._on_nack(stream, sub, request)
            elif request.version_info == sub.sent_version:
                self._on_ack(stream, sub)
            else:
                log.debug(
                    "%s answer from %s with version %r for sent version %r: ignored",
                    short_type_name(type_url),
                    stream.node_id,
                    request.version_info,
                    sub.sent_version,
                )
        first = not sub.subscribed
        sub.subscribed = True
        if not sub.wildcard:
            sub.names = frozenset(request.resource_names)
        snapshot = self._snapshot
        if snapshot is None:
            self._notify()
            return []  # answered by the first set_snapshot
        if sub.content is None or first:
            send = True  # a first subscription is always answered
        else:
            send = not sub.wildcard and bool(sub.names) and sub.names != sub.sent_names
        if send:
            return [self._respond(stream, sub, snapshot)]
        self._notify()
        return []

    def _on_ack(self, stream: _Stream, sub: _Sub) -> None:
        content = sub.content or {}
        accepted = self._accepted.setdefault(sub.type_url, {})
        if sub.wildcard:
            accepted.clear()
        accepted.update(content)
        rejected = self._rejected.get(sub.type_url, {})
        for name in [n for n, (m, _) in rejected.items() if _eq(content.get(n), m)]:
            del rejected[name]
        if sub.fallback is not None:
            # Envoy took the last accepted versions: the version stays rejected.
            sub.outcome, sub.nack = Outcome.NACKED, sub.fallback
            self._aggregate(sub.type_url, nack=sub.fallback)
        else:
            sub.outcome, sub.nack = Outcome.ACKED, None
            sub.acked_version = sub.sent_version
            self._aggregate(sub.type_url, acked_version=sub.sent_version, nack=None)
        log.debug(
            "ACK %s version=%s from %s", short_type_name(sub.type_url), sub.sent_version, stream.node_id
        )

    def _on_nack(self, stream: _Stream, sub: _Sub, request: Any) -> None:
        assert stream.node_id is not None
        message: str = request.error_detail.message
        nack = Nack(
            type_url=sub.type_url,
            version=sub.sent_version or "",
            message=message,
            node_id=stream.node_id,
        )
        sub.outcome = Outcome.NACKED
        sub.nack = nack
        accepted = self._accepted.get(sub.type_url, {})
        rejected = self._rejected.setdefault(sub.type_url, {})
        for name, resource in (sub.content or {}).items():
            if not _eq(accepted.get(name), resource):  # accepted before: not the culprit
                rejected[name] = (resource, nack)
        self._aggregate(sub.type_url, nack=nack)
        log.warning(
            "Envoy %s rejected %s version %s (stays on %r): %s",
            stream.node_id,
            short_type_name(sub.type_url),
            sub.sent_version,
            request.version_info,
            message,
        )

    def _on_snapshot(self, stream: _Stream) -> list[Any]:
        snapshot = self._snapshot
        if snapshot is None:
            return []
        responses: list[Any] = []
        synced = False
        order = list(PUSH_ORDER) + [t for t in stream.subs if t not in PUSH_ORDER]
        for type_url in order:
            sub = stream.subs.get(type_url)
            if sub is None or not sub.subscribed:
                continue
            if sub.content is None:
                send = True  # subscribed before the first snapshot
            elif not sub.active:
                continue
            elif sub.outcome is Outcome.NACKED:
                send = True  # a new snapshot gets another chance
            else:
                send = not _same(self._desired(sub, snapshot), sub.content)
            if send:
                responses.append(self._respond(stream, sub, snapshot, notify=False))
            elif sub.synced_version != snapshot.version:
                sub.synced_version = snapshot.version
                synced = True
        if responses or synced:
            self._notify()
        return responses

    def _desired(self, sub: _Sub, snapshot: Snapshot) -> dict[str, Message]:
        resources = snapshot.of_type(sub.type_url)
        if sub.wildcard:
            return dict(resources)
        return {name: resources[name] for name in sorted(sub.names) if name in resources}

    def _first_content(
        self, stream: _Stream, sub: _Sub, snapshot: Snapshot
    ) -> tuple[dict[str, Message], Nack | None]:
        """The first resources of a type for a stream (a new or restarted Envoy).

        A resource Envoy rejected, and unchanged since, is replaced by the
        last version an Envoy accepted: a restarted Envoy then serves what the
        one before it did, instead of losing the resource.
        """
        content = self._desired(sub, snapshot)
        rejected = self._rejected.get(sub.type_url)
        if not rejected:
            return content, None
        accepted = self._accepted.get(sub.type_url, {})
        fallback = None
        for name, message in list(content.items()):
            entry = rejected.get(name)
            if entry is not None and _eq(entry[0], message) and name in accepted:
                content[name], fallback = accepted[name], entry[1]
                log.info(
                    "%s %r: sending %s its last accepted version (the current one was rejected)",
                    short_type_name(sub.type_url),
                    name,
                    stream.node_id,
                )
        return content, fallback

    def _respond(self, stream: _Stream, sub: _Sub, snapshot: Snapshot, *, notify: bool = True) -> Any:
        if sub.content is None:
            content, sub.fallback = self._first_content(stream, sub, snapshot)
        else:
            content, sub.fallback = self._desired(sub, snapshot), None
        nonce = str(next(self._nonces))
        response = discovery_pb2.DiscoveryResponse(
            version_info=snapshot.version,
            type_url=sub.type_url,
            nonce=nonce,
            resources=[self._pack(message) for message in content.values()],
        )
        sub.nonce = nonce
        sub.sent_version = snapshot.version
        sub.sent_names = sub.names
        sub.content = content
        sub.synced_version = snapshot.version
        sub.outcome = Outcome.PENDING
        self._aggregate(sub.type_url, sent_version=snapshot.version)
        log.debug(
            "push %s version=%s nonce=%s resources=%d to %s",
            short_type_name(sub.type_url),
            snapshot.version,
            nonce,
            len(content),
            stream.node_id,
        )
        if notify:
            self._notify()
        return response

    def _pack(self, message: Message) -> Any:
        cached = self._any_cache.get(id(message))
        if cached is not None and cached[0] is message:
            return cached[1]
        packed = any_pb2.Any()
        packed.Pack(message)
        self._any_cache[id(message)] = (message, packed)
        return packed


def _eq(a: Message | None, b: Message | None) -> bool:
    return a is b or (a is not None and b is not None and a == b)


def _same(a: Mapping[str, Message], b: Mapping[str, Message]) -> bool:
    return a.keys() == b.keys() and all(_eq(a[name], b[name]) for name in a)


class _Servicer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    def __init__(self, server: AdsServer) -> None:
        self._server = server

    async def StreamAggregatedResources(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async for response in self._server._serve(request_iterator, context):
            yield response

    async def DeltaAggregatedResources(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "weir serves state-of-the-world ADS")
