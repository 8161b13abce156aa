"""An HTTP echo server that answers with JSON describing the request it received.

Modelled on the echo server of the Gateway API conformance suite: each
:class:`EchoHttpServer` plays one pod of a Service, knows its namespace, pod
name and Service name (:class:`EchoIdentity`) and puts them in every answer,
so a test can tell which endpoint of which backend a gateway chose.

One port speaks everything a gateway may use towards a backend:

- HTTP/1.1 (``h11``) and h2c with prior knowledge (detected by the HTTP/2
  connection preface);
- over TLS (with ``ssl_context``): HTTP/2 or HTTP/1.1 as ALPN decides; SNI,
  ALPN, TLS version and cipher are reported;
- WebSocket: an HTTP/1.1 ``Upgrade: websocket`` request is answered ``101``
  and every data frame is echoed (:func:`weir.testkit.websocket.serve_echo`).

The JSON answer (:func:`describe`) has the fields ``path`` (the request
target, query included), ``host``, ``method``, ``proto`` (``HTTP/1.1``,
``HTTP/2.0``), ``headers`` (lower-case name → list of values, in arrival
order), ``namespace``, ``pod``, ``service``, ``tls`` (``version``,
``serverName``, ``negotiatedProtocol``, ``cipherSuite``; ``null`` in
plaintext), ``sni`` and ``body``.

Requests can steer the answer:

- ``/status/NNN`` answers status ``NNN``;
- a ``delay`` query parameter (``1s``, ``250ms``, ``0.5``) waits that long first;
- ``X-Echo-Set-Header: Name: value, Other: value`` adds those response headers;
- ``uuid``, ``responseCode`` and ``succeedAfter`` query parameters (upstream
  echo-basic's retry simulation): the first ``succeedAfter`` requests carrying
  one ``uuid`` are answered ``responseCode`` (``responseCode=reset``: over
  HTTP/1.x, the connection is closed without an answer; over HTTP/2, 502),
  later ones as usual. The count is
  shared by every echo server of the process, so a retry that lands on another
  pod of the Service still counts (:func:`retry_simulation_status`).

Every request is also recorded (:attr:`EchoHttpServer.requests`), WebSocket
upgrades included, so a test can check what reached a backend whose answer
it never sees (a mirror, for instance).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h2.exceptions
import h11

from weir.testkit._conn import StreamServer
from weir.testkit._http import READ_SIZE, RawRequest, Reply, serve_h2, sniff_h2_preface
from weir.testkit.websocket import PrefixedReader, accept_key, serve_echo

__all__ = [
    "EchoHttpServer",
    "EchoIdentity",
    "EchoRequest",
    "TlsFacts",
    "describe",
    "parse_delay",
    "retry_simulation_status",
]

log = logging.getLogger(__name__)

#: Longest ``delay`` honoured, in seconds (a typo must not hang a test).
MAX_DELAY = 30.0


@dataclass(frozen=True)
class EchoIdentity:
    """Who an echo server pretends to be: a pod of a Service in a namespace."""

    namespace: str
    pod: str
    service: str = ""


@dataclass(frozen=True)
class TlsFacts:
    """What the TLS handshake of a connection settled (None where not applicable)."""

    version: str | None
    server_name: str | None
    alpn: str | None
    cipher: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "serverName": self.server_name or "",
            "negotiatedProtocol": self.alpn or "",
            "cipherSuite": self.cipher or "",
        }


@dataclass(frozen=True)
class EchoRequest:
    """One request as an echo server received it.

    ``proto`` is ``HTTP/1.1``, ``HTTP/1.0`` or ``HTTP/2.0``; ``headers`` are
    lower-case, HTTP/2 pseudo-headers excluded; ``host`` is ``Host`` or
    ``:authority``; ``websocket`` marks an accepted WebSocket upgrade.
    """

    method: str
    path: str
    host: str | None
    proto: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    tls: TlsFacts | None
    remote: tuple[str, int]
    websocket: bool = False

    def header(self, name: str) -> str | None:
        """Values of header ``name`` joined with ``,`` (as one header), or None if absent."""
        values = self.header_values(name)
        return ",".join(values) if values else None

    def header_values(self, name: str) -> list[str]:
        wanted = name.lower()
        return [v for k, v in self.headers if k == wanted]


def describe(identity: EchoIdentity, request: EchoRequest) -> dict[str, Any]:
    """The JSON answer for ``request`` (see the module documentation)."""
    headers: dict[str, list[str]] = {}
    for name, value in request.headers:
        headers.setdefault(name, []).append(value)
    return {
        "path": request.path,
        "host": request.host or "",
        "method": request.method,
        "proto": request.proto,
        "headers": headers,
        "namespace": identity.namespace,
        "pod": identity.pod,
        "service": identity.service,
        "tls": request.tls.to_json() if request.tls is not None else None,
        "sni": (request.tls.server_name or "") if request.tls is not None else "",
        "body": request.body.decode("utf-8", errors="replace"),
    }


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
_STATUS_PATH = re.compile(r"^/status/(\d{3})$")


def parse_delay(target: str) -> float:
    """Seconds asked for by the ``delay`` query parameter of ``target`` (0 without one or if unreadable)."""
    values = parse_qs(urlsplit(target).query).get("delay")
    return _duration(values[0]) if values else 0.0


def _duration(text: str) -> float:
    """Seconds of a duration such as ``1s``, ``250ms``, ``0.5`` (0 if unreadable), at most MAX_DELAY."""
    match = _DURATION.match(text)
    if match is None:
        return 0.0
    number = float(match.group(1))
    unit = match.group(2) or "s"
    seconds = number / 1000 if unit == "ms" else number * 60 if unit == "m" else number
    return min(seconds, MAX_DELAY)


#: The simulated status that closes an HTTP/1.x connection without answering (a connection error).
RESET = 0

#: ``uuid`` -> requests seen with it (see :func:`retry_simulation_status`); process-wide.
_RETRY_COUNTS: dict[str, int] = {}


def retry_simulation_status(target: str) -> tuple[int, float] | None:
    """The status (and delay, in seconds) upstream's retry simulation asks of this request, or
    ``None`` (answer as usual).

    ``target`` carries ``uuid``, ``responseCode`` (a status, 200-599, or ``reset``: status
    :data:`RESET`, the connection closed unanswered) and ``succeedAfter`` (a count): the first
    ``succeedAfter`` requests with that ``uuid`` get ``responseCode``, each
    after ``delayRetry`` (a duration, as ``delay`` reads them) when given. Anything missing or
    unreadable turns the simulation off for the request.
    """
    query = parse_qs(urlsplit(target).query)
    uuid, code, after = (query.get(name, [""])[0] for name in ("uuid", "responseCode", "succeedAfter"))
    if code == "reset":
        code = str(RESET)
    if not uuid or not code.isdigit() or not after.isdigit() or not (200 <= int(code) <= 599 or code == "0"):
        return None
    seen = _RETRY_COUNTS[uuid] = _RETRY_COUNTS.get(uuid, 0) + 1
    if seen > int(after):
        return None
    return int(code), _duration(query.get("delayRetry", [""])[0])


def _echo_set_headers(request: EchoRequest) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for value in request.header_values("x-echo-set-header"):
        for item in value.split(","):
            name, sep, text = item.strip().partition(":")
            if sep and name.strip():
                out.append((name.strip().lower(), text.strip()))
    return out


class _SniRecorder:
    """An ``sni_callback`` that remembers the name per connection, then delegates."""

    def __init__(self, previous: Callable[..., Any] | None) -> None:
        self.previous = previous
        self.seen: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()

    def __call__(self, sslobj: Any, server_name: str | None, ctx: ssl.SSLContext) -> Any:
        self.seen[sslobj] = server_name
        return self.previous(sslobj, server_name, ctx) if self.previous else None


@dataclass
class _Stats:
    websocket_frames: int = 0
    connections: int = 0
    requests: list[EchoRequest] = field(default_factory=list)


class EchoHttpServer(StreamServer):
    """An HTTP/1.1 + h2c (+ TLS, + WebSocket) echo server bound to a loopback IP literal.

    ``host`` must be in 127.0.0.0/8 or ``::1`` (anything else raises at
    construction). ``port=0`` picks a free port (read :attr:`port` after
    :meth:`start`). With ``ssl_context`` the server speaks TLS only; its
    ``sni_callback`` is wrapped to record SNI, and its ALPN offer (for
    example ``h2, http/1.1`` from :func:`weir.testkit.pki.server_ssl_context`)
    decides between HTTP/2 and HTTP/1.1.
    """

    def __init__(
        self,
        identity: EchoIdentity,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(host, port, ssl_context, what=f"EchoHttpServer {identity.pod!r}")
        self.identity = identity
        self._stats = _Stats()
        self._sni: _SniRecorder | None = None
        if ssl_context is not None:
            self._sni = _SniRecorder(ssl_context.sni_callback)
            ssl_context.sni_callback = self._sni

    # -- facts ------------------------------------------------------------

    @property
    def requests(self) -> list[EchoRequest]:
        """A copy of the requests received so far, oldest first."""
        return list(self._stats.requests)

    @property
    def websocket_frames(self) -> int:
        """WebSocket data frames echoed so far."""
        return self._stats.websocket_frames

    @property
    def connections(self) -> int:
        """Connections accepted so far (with TLS: handshakes completed)."""
        return self._stats.connections

    def clear(self) -> None:
        """Forget the recorded requests."""
        self._stats.requests.clear()

    # -- connections ------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._connections.track(writer) as serve:
            if not serve:
                return
            self._stats.connections += 1
            peer = writer.get_extra_info("peername") or ("", 0)
            remote = (str(peer[0]), int(peer[1]))
            tls = self._tls_facts(writer)

            def answer(raw: RawRequest) -> Reply:
                return self._answer(raw, tls, remote)

            try:
                if tls is not None and tls.alpn == "h2":
                    await serve_h2(reader, writer, b"", answer)
                elif tls is not None and tls.alpn is not None:
                    await self._serve_h1(reader, writer, b"", tls, remote)
                else:
                    is_h2, initial = await sniff_h2_preface(reader)
                    if is_h2:
                        await serve_h2(reader, writer, initial, answer)
                    elif initial:
                        await self._serve_h1(reader, writer, initial, tls, remote)
            except (OSError, EOFError, h11.ProtocolError, h2.exceptions.H2Error) as exc:
                log.debug("echo %s: connection ended: %r", self.identity.pod, exc)
            except Exception:
                log.exception("echo %s: connection handler failed", self.identity.pod)

    def _tls_facts(self, writer: asyncio.StreamWriter) -> TlsFacts | None:
        sslobj: ssl.SSLObject | None = writer.get_extra_info("ssl_object")
        if sslobj is None:
            return None
        cipher = sslobj.cipher()
        return TlsFacts(
            version=sslobj.version(),
            server_name=self._sni.seen.get(sslobj) if self._sni is not None else None,
            alpn=sslobj.selected_alpn_protocol(),
            cipher=cipher[0] if cipher else None,
        )

    def _record(
        self, raw: RawRequest, tls: TlsFacts | None, remote: tuple[str, int], ws: bool
    ) -> EchoRequest:
        request = EchoRequest(
            method=raw.method,
            path=raw.path,
            host=raw.host,
            proto="HTTP/2.0" if raw.http_version == "2" else f"HTTP/{raw.http_version}",
            headers=raw.headers,
            body=raw.body,
            tls=tls,
            remote=remote,
            websocket=ws,
        )
        self._stats.requests.append(request)
        return request

    def _answer(self, raw: RawRequest, tls: TlsFacts | None, remote: tuple[str, int]) -> Reply:
        request = self._record(raw, tls, remote, ws=False)
        status = 200
        match = _STATUS_PATH.match(urlsplit(raw.path).path)
        if match is not None:
            status = int(match.group(1))
            if not 200 <= status <= 599:
                status = 400
        delay = parse_delay(raw.path)
        simulated = retry_simulation_status(raw.path)
        if simulated is not None:
            status, delay = simulated
            if status == RESET and raw.http_version == "2":
                status = 502  # a stream of a shared HTTP/2 connection: answered, not dropped
        headers = [
            ("content-type", "application/json"),
            ("x-content-type-options", "nosniff"),
            *_echo_set_headers(request),
        ]
        body = json.dumps(describe(self.identity, request), indent=1).encode()
        if raw.method == "HEAD" or status in (204, 304):
            body = b""
        return Reply(status, headers, body, delay)

    async def _serve_h1(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        data: bytes,
        tls: TlsFacts | None,
        remote: tuple[str, int],
    ) -> None:
        """HTTP/1.x with keep-alive; a WebSocket upgrade turns the connection into an echo of frames."""
        conn = h11.Connection(h11.SERVER)
        if data:
            conn.receive_data(data)
        request: h11.Request | None = None
        body = bytearray()

        def send(event: h11.Event) -> None:
            writer.write(conn.send(event) or b"")

        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    message = f"bad request: {exc}\n".encode()
                    head = [("content-length", str(len(message))), ("connection", "close")]
                    send(h11.Response(status_code=400, headers=head))
                    send(h11.Data(data=message))
                    await writer.drain()
                return
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(READ_SIZE))
            elif isinstance(event, h11.Request):
                request, body = event, bytearray()
                if conn.they_are_waiting_for_100_continue:
                    send(h11.InformationalResponse(status_code=100, headers=[]))
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                headers = tuple(
                    (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in request.headers
                )
                raw = RawRequest(
                    http_version=request.http_version.decode("ascii"),
                    method=request.method.decode("ascii"),
                    path=request.target.decode("latin-1"),
                    host=next((v for k, v in headers if k == "host"), None),
                    headers=headers,
                    body=bytes(body),
                )
                key = _websocket_key(raw)
                if key is not None:
                    self._record(raw, tls, remote, ws=True)
                    send(
                        h11.InformationalResponse(
                            status_code=101,
                            headers=[
                                ("upgrade", "websocket"),
                                ("connection", "Upgrade"),
                                ("sec-websocket-accept", accept_key(key)),
                            ],
                        )
                    )
                    await writer.drain()
                    rest, _closed = conn.trailing_data
                    self._stats.websocket_frames += await serve_echo(PrefixedReader(rest, reader), writer)
                    return
                reply = self._answer(raw, tls, remote)
                if reply.status == RESET:
                    writer.close()
                    return
                if reply.delay > 0:
                    await asyncio.sleep(reply.delay)
                head = [(k, v) for k, v in reply.headers if k != "content-length"]
                send(
                    h11.Response(
                        status_code=reply.status, headers=[*head, ("content-length", str(len(reply.body)))]
                    )
                )
                if reply.body:
                    send(h11.Data(data=reply.body))
                send(h11.EndOfMessage())
                await writer.drain()
                if h11.MUST_CLOSE in (conn.our_state, conn.their_state):
                    return
                conn.start_next_cycle()
                request = None
            elif isinstance(event, h11.ConnectionClosed):
                return


def _websocket_key(raw: RawRequest) -> str | None:
    """The ``Sec-WebSocket-Key`` of a WebSocket upgrade request, else None."""
    if raw.method != "GET":
        return None
    names = dict(raw.headers)
    upgrade = names.get("upgrade", "").lower()
    connection = {token.strip().lower() for token in names.get("connection", "").split(",")}
    if upgrade != "websocket" or "upgrade" not in connection:
        return None
    return names.get("sec-websocket-key")
