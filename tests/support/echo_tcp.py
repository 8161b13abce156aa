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
from typing import Any

from weir.testkit._conn import StreamServer

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


class EchoServer(StreamServer):
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
        super().__init__(host, port, ssl_context, what=f"EchoServer {name!r}")
        self.name = name
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
