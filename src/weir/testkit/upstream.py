"""A recording HTTP upstream ("external API") on a loopback address.

:class:`RecordingUpstream` speaks HTTP/1.1 (``h11``) and HTTP/2 (``h2``),
over TLS (protocol chosen by ALPN) or plaintext (HTTP/2 prior knowledge is
detected by the connection preface, anything else is HTTP/1.1). Every request
is recorded as a :class:`SeenRequest` *before* the response is sent, and by
default answered ``200`` with those facts as JSON, so a test can assert on
what the upstream saw either from the response body or from
:attr:`RecordingUpstream.requests`.

Connection errors (resets, bad TLS, protocol violations) only end the
connection concerned; they never stop the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h2.exceptions
import h11

from weir.testkit._conn import ConnectionTracker, StreamServer
from weir.testkit._http import RawRequest, Reply, serve_h1, serve_h2, sniff_h2_preface
from weir.testkit.net import require_loopback

__all__ = ["Handler", "RecordingUpstream", "SeenRequest", "UpstreamResponse"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeenRequest:
    """What one upstream saw of one request.

    ``sni``/``alpn``/``tls_version``/``client_cn`` are None on plaintext (and
    ``sni`` is None when the client sent no SNI). ``http_version`` is
    ``"1.1"``, ``"1.0"`` or ``"2"``. ``host`` is the Host header, or
    ``:authority`` for HTTP/2. ``headers`` are the regular headers in arrival
    order, names lower-cased, HTTP/2 pseudo-headers excluded.
    """

    upstream: str
    sni: str | None
    alpn: str | None
    http_version: str
    tls_version: str | None
    method: str
    path: str
    host: str | None
    headers: tuple[tuple[str, str], ...]
    client_cn: str | None
    remote: tuple[str, int]
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """First value of header ``name`` (case-insensitive), or None."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k == wanted), None)

    def header_values(self, name: str) -> list[str]:
        """All values of header ``name`` (case-insensitive), in order."""
        wanted = name.lower()
        return [v for k, v in self.headers if k == wanted]

    def to_json(self) -> dict[str, Any]:
        """The facts as a JSON-able dict (the default response body)."""
        return {
            "upstream": self.upstream,
            "sni": self.sni,
            "alpn": self.alpn,
            "http_version": self.http_version,
            "tls_version": self.tls_version,
            "method": self.method,
            "path": self.path,
            "host": self.host,
            "headers": [list(pair) for pair in self.headers],
            "client_cn": self.client_cn,
            "remote": list(self.remote),
            "body": self.body.decode("utf-8", errors="replace"),
        }


@dataclass(frozen=True)
class UpstreamResponse:
    """A canned answer. ``delay`` seconds are waited before answering."""

    status: int = 200
    body: bytes | str = b""
    headers: tuple[tuple[str, str], ...] = (("content-type", "text/plain"),)
    delay: float = 0.0


#: Called per request (after recording it); None means "the default JSON answer".
Handler = Callable[[SeenRequest], UpstreamResponse | None]


@dataclass(frozen=True)
class _ConnInfo:
    sni: str | None
    alpn: str | None
    tls_version: str | None
    client_cn: str | None
    remote: tuple[str, int]


# SNI from the ClientHello, keyed by the server-side SSLObject it arrived on.
_SNI_SEEN: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


class _SniRecorder:
    """An ``SSLContext.sni_callback`` that remembers the name, then delegates."""

    def __init__(self, previous: Callable[..., Any] | None) -> None:
        self.previous = previous

    def __call__(self, sslobj: Any, server_name: str | None, ctx: ssl.SSLContext) -> Any:
        _SNI_SEEN[sslobj] = server_name
        return self.previous(sslobj, server_name, ctx) if self.previous else None


def _install_sni_recorder(ctx: ssl.SSLContext) -> None:
    if not isinstance(ctx.sni_callback, _SniRecorder):
        ctx.sni_callback = _SniRecorder(ctx.sni_callback)


def _peer_cn(sslobj: ssl.SSLObject) -> str | None:
    cert: dict[str, Any] = dict(sslobj.getpeercert() or {})
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class RecordingUpstream(StreamServer):
    """An HTTP/1.1 + HTTP/2 server on a loopback IP that records every request.

    ``host`` must be a loopback IP literal (see :func:`weir.testkit.net.loopback_ok`);
    anything else raises :class:`~weir.testkit.net.NonLoopbackAddressError` here,
    at construction. ``port=0`` picks a free port (read :attr:`port` after
    :meth:`start`). With ``ssl_context`` (e.g. from
    :func:`weir.testkit.pki.server_ssl_context`, whose ALPN offer defaults to
    ``h2, http/1.1``) the server speaks TLS. ``http2=False`` makes an
    HTTP/1.1-only server: it never speaks HTTP/2, whatever ALPN or the client's
    first bytes say, so an HTTP/2 connection preface is parsed as an (odd)
    HTTP/1.x request (method ``PRI``, version ``2.0``), as a real HTTP/1.1-only
    server would, and recorded as such. ``handler`` may be an
    :class:`UpstreamResponse` (answer every request with it) or a callable;
    it can be changed at any time through the :attr:`handler` attribute.

    Several upstreams may share one port on different loopback IPs (as the
    addresses a DNS name resolves to must): start the first with ``port=0``,
    then pass its :attr:`port` to the others.
    """

    def __init__(
        self,
        name: str = "upstream",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        handler: Handler | UpstreamResponse | None = None,
        http2: bool = True,
    ) -> None:
        self.name = name
        self._http2 = http2
        self._host = require_loopback(host, what=f"RecordingUpstream {name!r}")
        self._port = port
        self._ssl_context = ssl_context
        self.handler = handler
        self._requests: list[SeenRequest] = []
        self._server: asyncio.Server | None = None
        self._connections = ConnectionTracker()
        if ssl_context is not None:
            _install_sni_recorder(ssl_context)

    # -- facts ------------------------------------------------------------

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The server context (its ``sni_callback`` now also records SNI), or None."""
        return self._ssl_context

    @property
    def url(self) -> str:
        """``http(s)://host:port`` (IPv6 bracketed)."""
        scheme = "https" if self._ssl_context is not None else "http"
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{scheme}://{host}:{self._port}"

    @property
    def requests(self) -> list[SeenRequest]:
        """A copy of the requests recorded so far, oldest first."""
        return list(self._requests)

    def clear(self) -> None:
        """Forget the recorded requests."""
        self._requests.clear()

    # -- connections ------------------------------------------------------

    async def _on_connection(self, reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        async with self._connections.track(w) as serve:
            if not serve:
                return
            try:
                info = self._conn_info(w)

                def answer(raw: RawRequest) -> Reply:
                    return self._answer(info, raw)

                if info.alpn == "h2" and self._http2:
                    await serve_h2(reader, w, b"", answer)
                elif info.alpn is not None:
                    await serve_h1(reader, w, b"", answer)
                else:  # plaintext, or TLS without ALPN: prior-knowledge h2 or HTTP/1.x
                    is_h2, initial = await sniff_h2_preface(reader)
                    if is_h2 and self._http2:
                        await serve_h2(reader, w, initial, answer)
                    elif initial:
                        await serve_h1(reader, w, initial, answer)
            except (OSError, EOFError, h11.ProtocolError, h2.exceptions.H2Error) as exc:
                log.debug("upstream %s: connection ended: %r", self.name, exc)
            except Exception:
                log.exception("upstream %s: connection handler failed", self.name)

    def _conn_info(self, writer: asyncio.StreamWriter) -> _ConnInfo:
        peer = writer.get_extra_info("peername") or ("", 0)
        remote = (str(peer[0]), int(peer[1]))
        sslobj: ssl.SSLObject | None = writer.get_extra_info("ssl_object")
        if sslobj is None:
            return _ConnInfo(None, None, None, None, remote)
        return _ConnInfo(
            sni=_SNI_SEEN.get(sslobj),
            alpn=sslobj.selected_alpn_protocol(),
            tls_version=sslobj.version(),
            client_cn=_peer_cn(sslobj),
            remote=remote,
        )

    def _answer(self, info: _ConnInfo, raw: RawRequest) -> Reply:
        """Record the request, then decide the reply; handler errors become 500s."""
        seen = SeenRequest(
            upstream=self.name,
            sni=info.sni,
            alpn=info.alpn,
            http_version=raw.http_version,
            tls_version=info.tls_version,
            method=raw.method,
            path=raw.path,
            host=raw.host,
            headers=raw.headers,
            client_cn=info.client_cn,
            remote=info.remote,
            body=raw.body,
        )
        self._requests.append(seen)
        handler = self.handler
        try:
            resp = handler(seen) if callable(handler) else handler
        except Exception as exc:
            log.exception("upstream %s: handler failed", self.name)
            resp = UpstreamResponse(status=500, body=f"handler failed: {exc!r}")
        if resp is None:
            body = json.dumps(seen.to_json(), indent=1).encode()
            resp = UpstreamResponse(body=body, headers=(("content-type", "application/json"),))
        payload = resp.body.encode() if isinstance(resp.body, str) else resp.body
        return Reply(resp.status, list(resp.headers), payload, resp.delay)
