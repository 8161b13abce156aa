"""Bookkeeping of open stream connections, so servers can close them all on stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


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
