"""Loopback-only test servers shared by the end-to-end tests and ``weir demo``.

- :mod:`weir.testkit.pki`: a throw-away CA, server/client certificates, SSL contexts.
- :mod:`weir.testkit.upstream`: :class:`RecordingUpstream`, an HTTP/1.1 + HTTP/2
  "external API" that records what it saw.
- :mod:`weir.testkit.dns`: :class:`DnsStub`, a UDP+TCP DNS server with a mutable table.
- :mod:`weir.testkit.echo`: :class:`EchoServer`, a TCP echo server (plaintext or TLS)
  that records connections, SNI and byte counts.
- :mod:`weir.testkit.net`: loopback checks and :func:`free_port`.

Every server here refuses to bind anywhere but 127.0.0.0/8 or ::1.
"""

from weir.testkit.dns import DnsQuery, DnsStub
from weir.testkit.echo import EchoConnection, EchoServer
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

__all__ = [
    "CertAuthority",
    "DnsQuery",
    "DnsStub",
    "EchoConnection",
    "EchoServer",
    "IssuedCert",
    "NonLoopbackAddressError",
    "PemFiles",
    "RecordingUpstream",
    "SeenRequest",
    "UpstreamResponse",
    "client_ssl_context",
    "free_port",
    "loopback_ok",
    "make_ca",
    "require_loopback",
    "server_ssl_context",
]
