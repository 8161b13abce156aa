"""A gRPC echo server on a loopback address that says which pod answered, and a client for it.

:class:`GrpcEchoServer` serves the service :data:`SERVICE` (the name the
Gateway API conformance echo server uses) with the unary methods
:data:`METHODS`, over h2c (gRPC's plaintext HTTP/2). Messages are not
protobuf: a request body is ignored and the reply is JSON bytes (gRPC itself
does not care what a message holds) describing the call:
``fullyQualifiedMethod``, ``headers`` (the call's metadata, lower-case name →
values), ``namespace``, ``pod`` and ``service``.

:func:`grpc_echo` calls a method through any HTTP/2 peer (a gateway) with a
chosen ``:authority`` and metadata, and returns the decoded reply.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from weir.testkit.echo_http import EchoIdentity
from weir.testkit.net import require_loopback

__all__ = ["METHODS", "SERVICE", "GrpcEchoCall", "GrpcEchoReply", "GrpcEchoServer", "grpc_echo"]

SERVICE = "gateway_api_conformance.echo_basic.grpcecho.GrpcEcho"
METHODS = ("Echo", "EchoTwo", "EchoThree")


@dataclass(frozen=True)
class GrpcEchoCall:
    """One call as the server received it."""

    method: str
    metadata: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class GrpcEchoReply:
    """What :func:`grpc_echo` got back (the server's JSON, decoded)."""

    method: str
    namespace: str
    pod: str
    service: str
    headers: dict[str, list[str]] = field(default_factory=dict)


def _metadata_pairs(metadata: Any) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for item in metadata or ():
        key, value = item[0], item[1]
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        pairs.append((str(key).lower(), str(value)))
    return tuple(pairs)


class GrpcEchoServer:
    """gRPC (h2c) echo of :data:`SERVICE` on a loopback IP literal; ``port=0`` picks a free port."""

    def __init__(self, identity: EchoIdentity, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.identity = identity
        self._host = require_loopback(host, what=f"GrpcEchoServer {identity.pod!r}")
        self._port = port
        self._server: Any = None
        self._calls: list[GrpcEchoCall] = []

    async def start(self) -> Self:
        """Bind and start serving. Returns self. Idempotent."""
        if self._server is None:
            server = grpc.aio.server()
            handlers = {
                name: grpc.unary_unary_rpc_method_handler(self._handler(name))  # bytes in, bytes out
                for name in METHODS
            }
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
            host = f"[{self._host}]" if ":" in self._host else self._host
            bound = int(server.add_insecure_port(f"{host}:{self._port}"))
            if bound == 0:
                raise OSError(f"GrpcEchoServer {self.identity.pod!r} could not bind {host}:{self._port}")
            self._port = bound
            await server.start()
            self._server = server
        return self

    async def stop(self) -> None:
        """Stop at once (calls in flight are cancelled). Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=None)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def calls(self) -> list[GrpcEchoCall]:
        """A copy of the calls received so far, oldest first."""
        return list(self._calls)

    def _handler(self, name: str) -> Any:
        method = f"/{SERVICE}/{name}"

        async def handle(_request: bytes, context: Any) -> bytes:
            metadata = _metadata_pairs(context.invocation_metadata())
            self._calls.append(GrpcEchoCall(method, metadata))
            headers: dict[str, list[str]] = {}
            for key, value in metadata:
                headers.setdefault(key, []).append(value)
            reply = {
                "fullyQualifiedMethod": method,
                "headers": headers,
                "namespace": self.identity.namespace,
                "pod": self.identity.pod,
                "service": self.identity.service,
            }
            return json.dumps(reply).encode()

        return handle


async def grpc_echo(
    target: str,
    method: str = "Echo",
    *,
    authority: str | None = None,
    metadata: Sequence[tuple[str, str]] = (),
    service: str = SERVICE,
    timeout: float = 3.0,
) -> GrpcEchoReply:
    """Call ``/service/method`` on ``target`` (``host:port``) over h2c and decode the echo.

    Raises:
        grpc.aio.AioRpcError: the call failed (its ``code()`` says how: a gateway
            with no route answers ``UNIMPLEMENTED`` or ``NOT_FOUND``-like codes).
        ValueError: the reply is not an echo server's JSON.
    """
    options = [("grpc.default_authority", authority)] if authority else []
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        call = channel.unary_unary(f"/{service}/{method}")
        raw = await call(b"", metadata=tuple(metadata), timeout=timeout)
    data = json.loads(bytes(raw))
    if not isinstance(data, dict) or "pod" not in data:
        raise ValueError(f"not an echo reply: {raw!r}")
    return GrpcEchoReply(
        method=str(data.get("fullyQualifiedMethod", "")),
        namespace=str(data.get("namespace", "")),
        pod=str(data.get("pod", "")),
        service=str(data.get("service", "")),
        headers={str(k): [str(v) for v in vs] for k, vs in dict(data.get("headers", {})).items()},
    )
