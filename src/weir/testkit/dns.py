"""A tiny authoritative DNS stub on loopback, for pointing Envoy's resolver at.

:class:`DnsStub` answers from a mutable table over UDP *and* TCP on the same
port (c-ares retries over TCP when a UDP answer is truncated). Semantics:

- a name not in the table → ``NXDOMAIN``;
- a name in the table → ``NOERROR``; an ``A`` query gets its IPv4 addresses,
  ``AAAA`` its IPv6 addresses, ``ANY`` both, any other type nothing. So an
  ``AAAA`` query for an IPv4-only name is ``NOERROR`` with an empty answer,
  which is what ``V4_PREFERRED``/``AUTO`` resolvers need to fall back cleanly.

Names are case-insensitive and compared without the trailing dot. Answers
carry :attr:`DnsStub.ttl` (default 1 s) so tests can change them quickly.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, NamedTuple, Self, cast

from dnslib import AAAA, QTYPE, RCODE, RR, A, DNSError, DNSRecord

from weir.testkit._conn import ConnectionTracker
from weir.testkit.net import require_loopback

__all__ = ["DnsQuery", "DnsStub"]

log = logging.getLogger(__name__)

_UDP_DEFAULT_MAX = 512


class DnsQuery(NamedTuple):
    """One question seen: normalised name (lower case, no trailing dot), type name."""

    name: str
    qtype: str


def _normalise(name: str) -> str:
    return name.rstrip(".").lower()


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, stub: DnsStub) -> None:
        self.stub = stub
        self.transport: asyncio.DatagramTransport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        reply = self.stub.answer(data, transport="udp")
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def error_received(self, exc: Exception) -> None:
        log.debug("dns stub: udp error %r", exc)


class DnsStub:
    """UDP+TCP DNS server on a loopback IP answering ``A``/``AAAA`` from a table.

    ``host`` must be a loopback IP literal (else
    :class:`~weir.testkit.net.NonLoopbackAddressError` at construction).
    ``port=0`` picks a port free for both UDP and TCP. ``records`` seeds the
    table as by :meth:`set`. With ``truncate_udp=True`` every UDP answer is
    sent empty with the TC bit (to exercise TCP fallback); otherwise UDP
    answers larger than the client's limit (512, or its EDNS payload size)
    are truncated the same way.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ttl: int = 1,
        records: Mapping[str, Iterable[str]] | None = None,
        truncate_udp: bool = False,
    ) -> None:
        self._host = require_loopback(host, what="DnsStub")
        self._port = port
        self.ttl = ttl
        self.truncate_udp = truncate_udp
        self._table: dict[str, list[ipaddress.IPv4Address | ipaddress.IPv6Address]] = {}
        self._queries: list[DnsQuery] = []
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._tcp_connections = ConnectionTracker()
        for name, addresses in (records or {}).items():
            self.set(name, addresses)

    # -- table --------------------------------------------------------------

    def set(self, name: str, addresses: Iterable[str]) -> None:
        """Make ``name`` resolve to ``addresses`` (IPv4 → A, IPv6 → AAAA).

        An empty list makes the name exist with no addresses (``NOERROR``,
        empty answer). Raises ValueError for something that is not an IP.
        """
        self._table[_normalise(name)] = [ipaddress.ip_address(a) for a in addresses]

    def remove(self, name: str) -> None:
        """Forget ``name`` (it becomes ``NXDOMAIN``). Unknown names are ignored."""
        self._table.pop(_normalise(name), None)

    def lookup(self, name: str) -> list[str] | None:
        """The addresses ``name`` currently has, or None if it is unknown."""
        found = self._table.get(_normalise(name))
        return None if found is None else [str(a) for a in found]

    @property
    def queries(self) -> list[DnsQuery]:
        """A copy of the questions seen so far (UDP and TCP), oldest first."""
        return list(self._queries)

    def clear_queries(self) -> None:
        self._queries.clear()

    # -- protocol -----------------------------------------------------------

    def answer(self, packet: bytes, *, transport: str = "udp") -> bytes | None:
        """The wire-format reply to ``packet``, or None to stay silent (unparseable).

        ``transport`` is ``"udp"`` (size limits and :attr:`truncate_udp`
        apply) or ``"tcp"``.
        """
        try:
            request = DNSRecord.parse(packet)
        except (DNSError, struct.error, IndexError, ValueError) as exc:
            log.debug("dns stub: unparseable query %r", exc)
            return None
        reply = request.reply()
        for question in request.questions:
            name = _normalise(str(question.qname))
            qtype = QTYPE.get(question.qtype, str(question.qtype))
            self._queries.append(DnsQuery(name, str(qtype)))
            addresses = self._table.get(name)
            if addresses is None:
                reply.header.rcode = RCODE.NXDOMAIN
                continue
            for address in addresses:
                if isinstance(address, ipaddress.IPv4Address) and qtype in ("A", "ANY"):
                    rdata: Any = A(str(address))
                    reply.add_answer(RR(question.qname, QTYPE.A, rdata=rdata, ttl=self.ttl))
                elif isinstance(address, ipaddress.IPv6Address) and qtype in ("AAAA", "ANY"):
                    rdata = AAAA(str(address))
                    reply.add_answer(RR(question.qname, QTYPE.AAAA, rdata=rdata, ttl=self.ttl))
        wire: bytes = reply.pack()
        if transport == "udp":
            limit = _UDP_DEFAULT_MAX
            for rr in request.ar:
                if rr.rtype == QTYPE.OPT:
                    limit = max(limit, int(rr.rclass))
            if self.truncate_udp or len(wire) > limit:
                truncated = request.reply()  # keeps the question; c-ares checks it
                truncated.header.tc = 1
                wire = truncated.pack()
        return wire

    # -- lifecycle ------------------------------------------------------------

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` as bound (port is real once started)."""
        return (self._host, self._port)

    async def start(self) -> Self:
        """Bind UDP and TCP on the same port. Returns self. Idempotent."""
        if self._udp is not None:
            return self
        loop = asyncio.get_running_loop()
        self._tcp_connections = ConnectionTracker()
        attempts = 20 if self._port == 0 else 1
        for attempt in range(attempts):
            udp, _ = await loop.create_datagram_endpoint(
                lambda: _Udp(self), local_addr=(self._host, self._port)
            )
            port: int = udp.get_extra_info("sockname")[1]
            try:
                self._tcp = await asyncio.start_server(self._serve_tcp, self._host, port)
            except OSError:
                udp.close()
                if attempt == attempts - 1:
                    raise
                continue
            self._udp, self._port = udp, port
            break
        return self

    async def stop(self) -> None:
        """Close both sockets and any open TCP connection. Idempotent."""
        if self._udp is not None:
            udp, self._udp = self._udp, None
            udp.close()
            await asyncio.wait_for(cast(_Udp, udp.get_protocol()).closed, 2.0)
        tcp, self._tcp = self._tcp, None
        if tcp is not None:
            tcp.close()
            await self._tcp_connections.close_all()
            await tcp.wait_closed()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._tcp_connections.track(writer) as serve:
            if not serve:
                return
            try:
                while True:
                    (length,) = struct.unpack("!H", await reader.readexactly(2))
                    reply = self.answer(await reader.readexactly(length), transport="tcp")
                    if reply is None:
                        break
                    writer.write(struct.pack("!H", len(reply)) + reply)
                    await writer.drain()
            except (OSError, asyncio.IncompleteReadError) as exc:
                log.debug("dns stub: tcp connection ended: %r", exc)
