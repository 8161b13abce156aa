"""weir's own admin endpoint: a tiny HTTP/1.1 server on loopback.

It answers ``GET`` only, with what callbacks the controller provides return
(JSON, or :class:`Text`; a callback may be a coroutine), so it never reaches
into the controller's state:

* ``/healthz`` — 200 while the control plane runs (liveness).
* ``/ready`` — 200 once Envoy runs and has accepted a configuration, else 503.
* ``/status`` — every managed object's status and every standing problem.
* ``/metrics`` — Prometheus metrics (text format 0.0.4, see :mod:`weir.telemetry`).

It binds to loopback unless told otherwise; it exposes status, which can
reveal names of internal objects. Whatever it binds to, it answers only
requests whose ``Host`` is an IP literal or ``localhost`` (any port), and
others get 421: a web page the browser loaded from ``evil.example`` can make
that name resolve to 127.0.0.1 (DNS rebinding) and read the answers as
same-origin, but its requests still say ``Host: evil.example``. Probes and
scrapers address weir by IP or as ``localhost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import h11

from weir.heap import return_free_memory

log = logging.getLogger("weir.admin")

#: A response body bigger than this (``/status`` or ``/metrics`` of thousands of objects) is
#: followed by returning free heap memory (:mod:`weir.heap`): its copies were big allocations.
_BIG_BODY = 1 << 20


@dataclass(frozen=True)
class Text:
    """A body sent as it is, with its content type, rather than as JSON."""

    body: str
    content_type: str = "text/plain; charset=utf-8"


#: ``() -> (status, body)``; the body is JSON data or a :class:`Text`.
Handler = Callable[[], tuple[int, Any] | Awaitable[tuple[int, Any]]]


class AdminServer:
    def __init__(self, host: str, port: int, routes: dict[str, Handler]) -> None:
        self._host = host
        self._port = port
        self._routes = routes
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when started with port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        log.info("admin endpoint on http://%s:%d", self._host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await asyncio.wait_for(reader.read(65536), 30)
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    target = event.target.decode().split("?", 1)[0]
                    host = next((v.decode("latin-1") for k, v in event.headers if k == b"host"), None)
                    if host is not None and not host_allowed(host):
                        code, body = (
                            421,
                            {"error": f"Host {host!r} is not this machine: use an IP address or localhost"},
                        )
                    else:
                        code, body = await self._respond(event.method.decode(), target)
                    if isinstance(body, Text):
                        payload, content_type = body.body.encode(), body.content_type
                    else:
                        payload = _json(body)
                        content_type = "application/json"
                    headers = [
                        ("content-type", content_type),
                        ("content-length", str(len(payload))),
                    ]
                    writer.write(conn.send(h11.Response(status_code=code, headers=headers)) or b"")
                    writer.write(conn.send(h11.Data(data=payload)) or b"")
                    writer.write(conn.send(h11.EndOfMessage()) or b"")
                    await writer.drain()
                    if len(payload) > _BIG_BODY:
                        del payload, body  # what is still referenced elsewhere stays, of course
                        return_free_memory("a big admin response")
                if isinstance(event, h11.ConnectionClosed) or conn.our_state is h11.MUST_CLOSE:
                    break
                if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                    conn.start_next_cycle()
        except (h11.RemoteProtocolError, TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _respond(self, method: str, target: str) -> tuple[int, Any]:
        if method != "GET":
            return 405, {"error": "only GET is supported"}
        handler = self._routes.get(target)
        if handler is None:
            return 404, {"error": f"no such endpoint {target}", "endpoints": sorted(self._routes)}
        try:
            result = handler()
            return await result if inspect.isawaitable(result) else result
        except Exception as exc:  # a bug in a handler must not kill the admin endpoint
            log.exception("admin handler %s failed", target)
            return 500, {"error": str(exc)}


def host_allowed(host: str) -> bool:
    """Whether a ``Host`` header names this machine by address or as ``localhost``, with any port.

    A request without ``Host`` (HTTP/1.0) is not a browser's, and is answered.
    """
    name = host.strip().lower()
    if name.startswith("["):  # [v6]:port
        literal, _, rest = name[1:].partition("]")
        return (not rest or (rest.startswith(":") and rest[1:].isdigit())) and _is_ip(literal)
    if name.count(":") == 1:
        name, _, port = name.partition(":")
        if not port.isdigit():
            return False
    return name in ("localhost", "localhost.") or _is_ip(name)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _json(body: Any) -> bytes:
    """``body`` as compact JSON (and a newline).

    Compact, because only then does :mod:`json` use its C encoder: with
    ``indent`` it falls back to Python, and ``/status`` at 10,000 routes took
    0.6 s of the event loop and about 110 MiB of short-lived strings (weir's
    resident memory stayed 60 MiB higher afterwards); compact, 0.16 s and
    about 20 MiB. ``weir status`` prints it as YAML for people.
    """
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
