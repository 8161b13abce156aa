"""Loopback-only test servers shared by the end-to-end tests and ``weir demo``.

- :mod:`weir.testkit.pki`: a throw-away CA, server/client certificates, SSL contexts.
- :mod:`weir.testkit.upstream`: :class:`RecordingUpstream`, an HTTP/1.1 + HTTP/2
  "external API" that records what it saw.
- :mod:`weir.testkit.dns`: :class:`DnsStub`, a UDP+TCP DNS server with a mutable table.
- :mod:`weir.testkit.echo_http`: :class:`EchoHttpServer`, one "pod" of a Service
  (HTTP/1.1, h2c, TLS, WebSocket) answering with JSON that describes the request.
- :mod:`weir.testkit.websocket`: a minimal WebSocket codec and :class:`WebSocketClient`.
- :mod:`weir.testkit.net`: loopback checks and :func:`free_port`.

The TCP and gRPC echo servers only tests use live in ``tests/support`` (``echo_tcp``,
``echo_grpc``). Every server here refuses to bind anywhere but 127.0.0.0/8 or ::1.
"""

from weir.testkit.dns import DnsQuery, DnsStub
from weir.testkit.echo_http import EchoHttpServer, EchoIdentity, EchoRequest, TlsFacts
from weir.testkit.net import NonLoopbackAddressError, free_port, loopback_ok, require_loopback
from weir.testkit.pki import (
    CertAuthority,
    IssuedCert,
    PemFiles,
    client_ssl_context,
    make_ca,
    server_ssl_context,
)
from weir.testkit.upstream import RecordingUpstream, SeenRequest, UpstreamResponse
from weir.testkit.websocket import WebSocketClient, WebSocketHandshakeError

__all__ = [
    "CertAuthority",
    "DnsQuery",
    "DnsStub",
    "EchoHttpServer",
    "EchoIdentity",
    "EchoRequest",
    "IssuedCert",
    "NonLoopbackAddressError",
    "PemFiles",
    "RecordingUpstream",
    "SeenRequest",
    "TlsFacts",
    "UpstreamResponse",
    "WebSocketClient",
    "WebSocketHandshakeError",
    "client_ssl_context",
    "free_port",
    "loopback_ok",
    "make_ca",
    "require_loopback",
    "server_ssl_context",
]
