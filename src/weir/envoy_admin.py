"""Envoy's admin interface, over the unix socket it listens on: weir's one client for it.

Envoy's admin can stop every listener (``POST /drain_listeners``), quit the
process, change log levels and dump the configuration, secrets' names
included. weir therefore never lets it listen on TCP, where any local
process (or a browser aimed at it by DNS rebinding) could reach it: it
listens on a unix socket in weir's run folder (:mod:`weir.runfolder`),
which only weir's user can open (folder 0700, socket 0600). Everything
weir reads from Envoy goes through :class:`EnvoyAdmin`: readiness, stats
for ``/metrics`` (streamed, :meth:`EnvoyAdmin.stream`), the listeners it
serves, and the drain at a graceful stop.

HTTP/1.1 with ``h11``, which decodes the chunked bodies Envoy sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import urllib.parse
from collections.abc import Callable, Collection

import h11

__all__ = ["EnvoyAdmin"]

#: How much is read from the socket at a time: a streamed body (Envoy's stats) is handed over in
#: pieces this big, one per turn of the event loop (~400 stat lines, about a millisecond to parse).
READ_SIZE = 16 * 1024


class EnvoyAdmin:
    """Requests to Envoy's admin interface on the unix socket ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def __repr__(self) -> str:
        return f"EnvoyAdmin({self.path!r})"

    async def get(self, target: str, timeout: float = 2.0) -> tuple[int, str]:
        """``GET target``: ``(status, body)``. Raises :class:`OSError` or :class:`TimeoutError`."""
        return await self._collect("GET", target, timeout)

    async def post(self, target: str, timeout: float = 2.0) -> tuple[int, str]:
        """``POST target`` (no body): ``(status, body)``."""
        return await self._collect("POST", target, timeout)

    async def in_flight(self, tcp_listeners: Collection[str] = ()) -> int:
        """HTTP requests in flight plus connections open on ``tcp_listeners`` (-1 if Envoy does not say).

        ``tcp_listeners``: names (``ADDRESS:PORT``) of TCP listeners, whose
        connections are the unit of work; the admin interface's own request
        (this one) is not counted.
        """
        pattern = r"^http\..*\.downstream_rq_active$|^listener\..*\.downstream_cx_active$"
        try:
            code, body = await self.get("/stats?type=Gauges&filter=" + urllib.parse.quote(pattern))
        except (OSError, TimeoutError):
            return -1
        if code != 200:
            return -1
        tcp = {"listener." + name.replace(":", "_") + ".downstream_cx_active" for name in tcp_listeners}
        total = 0
        for line in body.splitlines():
            name, _, value = line.partition(": ")
            if name == "http.admin.downstream_rq_active" or not value.strip().isdigit():
                continue
            if name.startswith("http.") or name in tcp:
                total += int(value)
        return total

    async def stream(
        self, target: str, feed: Callable[[bytes], None], *, timeout: float, max_bytes: int
    ) -> None:
        """``GET target`` and hand the body to ``feed`` as it arrives, a piece per turn of the loop.

        Raises :class:`OSError` when Envoy answers anything but 200 or the
        body grows past ``max_bytes``, :class:`TimeoutError` after
        ``timeout`` seconds in all.
        """
        received = 0

        def on_status(status: int) -> None:
            if status != 200:
                raise OSError(f"Envoy's admin answered {status}")

        def on_data(data: bytes) -> None:
            nonlocal received
            received += len(data)
            if received > max_bytes:
                raise OSError(f"Envoy's answer exceeds {max_bytes} bytes")
            feed(data)

        await self._exchange("GET", target, timeout, on_status, on_data, yield_between=True)

    async def _collect(self, method: str, target: str, timeout: float) -> tuple[int, str]:
        status = 0
        body = bytearray()

        def on_status(code: int) -> None:
            nonlocal status
            status = code

        await self._exchange(method, target, timeout, on_status, body.extend, yield_between=False)
        return status, body.decode("utf-8", "replace")

    async def _exchange(
        self,
        method: str,
        target: str,
        timeout: float,
        on_status: Callable[[int], None],
        on_data: Callable[[bytes], None],
        *,
        yield_between: bool,
    ) -> None:
        conn = h11.Connection(h11.CLIENT)
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_unix_connection(self.path)
            try:
                headers = [("host", "envoy-admin"), ("connection", "close")]
                if method != "GET":
                    headers.append(("content-length", "0"))
                writer.write(conn.send(h11.Request(method=method, target=target, headers=headers)))
                writer.write(conn.send(h11.EndOfMessage()))
                await writer.drain()
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        conn.receive_data(await reader.read(READ_SIZE))
                    elif isinstance(event, h11.Response):
                        on_status(event.status_code)
                    elif isinstance(event, h11.Data):
                        on_data(bytes(event.data))
                        if yield_between:
                            # A read of data already buffered does not give the loop a turn: give it one.
                            await asyncio.sleep(0)
                    elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                        break
            except h11.ProtocolError as exc:
                raise OSError(f"malformed HTTP answer from Envoy's admin ({self.path}): {exc}") from None
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
