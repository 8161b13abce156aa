"""Stream servers of the testkit: their shared lifecycle, and bookkeeping of open connections so
that stopping closes them all."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

from weir.testkit.net import require_loopback


class ConnectionTracker:
    """Tracks the handler task and writer of each open connection.

    Use :meth:`track` around a ``start_server`` callback's body and
    :meth:`close_all` when stopping. A tracker is single-use: after
    :meth:`close_all`, connections that arrive late are closed at once.
    """

    def __init__(self) -> None:
        self._open: dict[asyncio.StreamWriter, asyncio.Task[object] | None] = {}
        self._closed = False

    @contextlib.asynccontextmanager
    async def track(self, writer: asyncio.StreamWriter) -> AsyncIterator[bool]:
        """Register the connection; yield False if it must not be served; close it on exit.

        A cancellation (only :meth:`close_all` cancels these tasks) is
        swallowed: asyncio's stream callback would otherwise log cancelled
        handler tasks as errors.
        """
        if self._closed:
            writer.transport.abort()
        self._open[writer] = asyncio.current_task()
        try:
            yield not self._closed
        except asyncio.CancelledError:
            pass
        finally:
            self._open.pop(writer, None)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def close_all(self, grace: float = 0.1) -> None:
        """Abort every connection; cancel handlers still running after ``grace`` s."""
        self._closed = True
        for writer in list(self._open):
            writer.transport.abort()
        me = asyncio.current_task()
        tasks = {t for t in self._open.values() if t is not None and t is not me}
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


class StreamServer:
    """The lifecycle the testkit's stream servers share: bound to a loopback IP literal (anything
    else raises at construction), started and stopped idempotently, every connection closed on
    stop, usable as ``async with``.

    ``port=0`` picks a free port (read :attr:`port` after :meth:`start`); with
    ``ssl_context`` the server speaks TLS only. Subclasses serve each
    connection in :meth:`_on_connection`, inside ``self._connections.track``.
    """

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None, *, what: str) -> None:
        self._host = require_loopback(host, what=what)
        self._port = port
        self._ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self._connections = ConnectionTracker()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def start(self) -> Self:
        """Bind and start accepting. Returns self. Idempotent."""
        if self._server is None:
            self._connections = ConnectionTracker()  # single-use: a restarted server needs a new one
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
        """The bound port (the requested one until :meth:`start` picks one for 0)."""
        return self._port
