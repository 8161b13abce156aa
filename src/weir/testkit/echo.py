"""A TCP echo server on a loopback address, plaintext or TLS, that records what it saw.

:class:`EchoServer` sends every byte it receives back on the same
connection, until the peer closes its side; then it closes too. Per
connection it records the peer, the TLS facts (SNI, version) and how many
bytes arrived (:class:`EchoConnection`). With TLS it also records the SNI of
every ClientHello, handshakes that fail included (:attr:`EchoServer.hellos`),
so a test can tell "a TLS handshake was attempted and refused" from "nothing
connected" and from "bytes were delivered".
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from weir.testkit._conn import ConnectionTracker
from weir.testkit.net import require_loopback

__all__ = ["EchoConnection", "EchoServer"]

log = logging.getLogger(__name__)


@dataclass
class EchoConnection:
    """One accepted connection (with TLS: one that completed its handshake).

    ``received`` counts the bytes that arrived (all were echoed); ``closed``
    is set once the connection ended.
    """

    remote: tuple[str, int]
    sni: str | None
    tls_version: str | None
    received: int = 0
    closed: bool = False


class EchoServer:
    """A TCP echo server bound to a loopback IP literal (anything else raises at construction).

    ``port=0`` picks a free port (read :attr:`port` after :meth:`start`).
    With ``ssl_context`` (e.g. :func:`weir.testkit.pki.server_ssl_context`)
    the server speaks TLS; its ``sni_callback`` is wrapped to record SNI.
    """

    def __init__(
        self,
        name: str = "echo",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.name = name
        self._host = require_loopback(host, what=f"EchoServer {name!r}")
        self._port = port
        self._ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self._connections = ConnectionTracker()
        self._sni: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()
        self.connections: list[EchoConnection] = []
        self.hellos: list[str | None] = []
        if ssl_context is not None:
            previous: Any = ssl_context.sni_callback  # typeshed's signature omits the None name

            def record(sslobj: Any, server_name: str | None, ctx: ssl.SSLContext) -> int | None:
                self.hellos.append(server_name)
                self._sni[sslobj] = server_name
                return previous(sslobj, server_name, ctx) if previous is not None else None

            ssl_context.sni_callback = record

    async def start(self) -> Self:
        """Bind and start accepting. Returns self. Idempotent."""
        if self._server is None:
            extra: dict[str, Any] = {}
            if self._ssl_context is not None:
                extra = {"ssl_handshake_timeout": 10.0, "ssl_shutdown_timeout": 2.0}
            self._server = await asyncio.start_server(
                self._on_connection, self._host, self._port, ssl=self._ssl_context, **extra
            )
            self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Close the listening socket and every open connection. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        await self._connections.close_all()
        await server.wait_closed()

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
    def received(self) -> int:
        """Bytes received over every connection so far."""
        return sum(c.received for c in self.connections)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._connections.track(writer) as serve:
            if not serve:
                return
            peer = writer.get_extra_info("peername") or ("", 0)
            sslobj: ssl.SSLObject | None = writer.get_extra_info("ssl_object")
            conn = EchoConnection(
                remote=(str(peer[0]), int(peer[1])),
                sni=self._sni.get(sslobj) if sslobj is not None else None,
                tls_version=sslobj.version() if sslobj is not None else None,
            )
            self.connections.append(conn)
            try:
                while data := await reader.read(65536):
                    conn.received += len(data)
                    writer.write(data)
                    await writer.drain()
            except (OSError, ssl.SSLError) as exc:
                log.debug("echo %s: connection ended: %r", self.name, exc)
            finally:
                conn.closed = True
