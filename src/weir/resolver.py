"""weir's own resolver for external hostnames: the first half of serving Envoy only allowed addresses.

Envoy's DNS clusters resolve names themselves, so every address a name ever
answers reaches Envoy's load balancer, and the egress guard must check each
request's chosen address (an upstream RBAC filter: about 9 % of Envoy's CPU
per request, measured with ``bench/dataplane.py levers no-guard``; and Envoy
skips it for requests without a downstream connection). The design this
module starts (see docs/architecture.md, "Where the guard lives") resolves
names in weir and hands Envoy, over EDS, only the addresses the policy
allows, so no per-request check remains and a denied address never reaches
Envoy at all.

:class:`Resolver` keeps each tracked name resolved:

* It asks the configured resolvers (:class:`weir.ir.DnsSettings`), else the
  nameservers of ``/etc/resolv.conf``; never with search domains (a name is
  fully qualified; in a pod ``openai.com`` would first be
  ``openai.com.<ns>.svc.cluster.local``), over UDP with a fallback to TCP
  when an answer is truncated, each query bounded by ``lookup_timeout_ms``.
* IPv4 first: ``A``, and ``AAAA`` only when there is no ``A`` record (as
  Envoy's ``V4_PREFERRED``), because many hosts have no IPv6 route.
* It re-resolves when the answer's TTL (the smallest of its records) runs
  out, at least :attr:`Resolver.min_ttl` and at most :attr:`Resolver.max_ttl`
  apart.
* A failure (timeout, SERVFAIL, REFUSED, a network error) keeps the last good
  answer, records the error, and retries after 250 ms, backing off to 5 s.
  ``NXDOMAIN`` or an empty answer is an answer: the name has no addresses.
* Each change of a name's addresses (or error) is handed to ``on_change``.

It knows nothing of policy: :func:`weir.addresses.denied_by` splits an
answer into the addresses Envoy may get and the ones it must not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from weir import dnswire
from weir.addresses import denied_by
from weir.ir import DnsSettings

log = logging.getLogger(__name__)

#: Retry after a failed lookup: first after this many seconds, doubling up to :data:`FAILURE_MAX`.
FAILURE_BASE = 0.25
FAILURE_MAX = 5.0


class DnsLookupError(Exception):
    """A lookup that did not produce an answer (the last good one is kept)."""


@dataclass(frozen=True)
class Answer:
    """What a name resolves to now.

    ``addresses``: in the order the server gave them; ``ttl``: seconds until
    the next lookup; ``error``: why the latest lookup failed (then
    ``addresses`` are the last good answer's), else ``None``; ``resolved``:
    whether any lookup ever succeeded.
    """

    hostname: str
    addresses: tuple[str, ...] = ()
    ttl: float = 0.0
    error: str | None = None
    resolved: bool = False

    def split(self, denied_networks: Iterable[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        """``(allowed addresses, ((denied address, the network that denies it), ...))``."""
        nets = tuple(denied_networks)
        allowed: list[str] = []
        denied: list[tuple[str, str]] = []
        for address in self.addresses:
            network = denied_by(address, nets)
            if network is None:
                allowed.append(address)
            else:
                denied.append((address, network))
        return tuple(allowed), tuple(denied)


def system_nameservers(path: str | Path = "/etc/resolv.conf") -> tuple[tuple[str, int], ...]:
    """The ``nameserver`` lines of ``resolv.conf`` (port 53); else ``127.0.0.1``, as for libc."""
    servers: list[tuple[str, int]] = []
    with contextlib.suppress(OSError):
        for line in Path(path).read_text().splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[0] == "nameserver":
                servers.append((fields[1].split("%", 1)[0], 53))
    return tuple(servers) or (("127.0.0.1", 53),)


async def lookup(hostname: str, dns: DnsSettings) -> tuple[tuple[str, ...], float]:
    """``(addresses, ttl)`` of ``hostname``: ``A`` records, else ``AAAA``; raises :class:`DnsLookupError`."""
    servers = dns.resolvers or system_nameservers()
    timeout = dns.lookup_timeout_ms / 1000
    errors: list[str] = []
    for server in servers:  # the next server only when one fails, as c-ares
        try:
            addresses, ttl = await _query(hostname, "A", server, timeout)
            if not addresses:
                addresses, ttl = await _query(hostname, "AAAA", server, timeout)
            return addresses, ttl
        except DnsLookupError as exc:
            errors.append(f"{server[0]}:{server[1]}: {exc}")
    raise DnsLookupError("; ".join(errors))


async def _query(
    hostname: str, qtype: str, server: tuple[str, int], timeout: float
) -> tuple[tuple[str, ...], float]:
    kind = dnswire.A if qtype == "A" else dnswire.AAAA
    try:
        ident, packet = dnswire.question(hostname, kind)
        async with asyncio.timeout(timeout):
            reply = dnswire.parse_answer(await _udp(packet, server), ident, hostname, kind)
            if reply.truncated:  # ask again over TCP
                reply = dnswire.parse_answer(await _tcp(packet, server), ident, hostname, kind)
    except TimeoutError:
        raise DnsLookupError(f"no answer within {timeout:g} s") from None
    except (OSError, dnswire.DnsWireError, asyncio.IncompleteReadError) as exc:
        raise DnsLookupError(f"{type(exc).__name__}: {exc}") from None
    if reply.rcode == dnswire.NXDOMAIN:
        return (), 0.0
    if reply.rcode != dnswire.NOERROR:
        raise DnsLookupError(f"server answered {reply.rcode_name}")
    return reply.addresses, reply.ttl


async def _udp(packet: bytes, server: tuple[str, int]) -> bytes:
    """Send ``packet`` to ``server`` from a new socket (a random source port, as resolvers do
    against spoofed answers) and return the first datagram that comes back on it."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.connect(server)  # a connected UDP socket takes datagrams from the server only
        sock.send(packet)
        return await loop.sock_recv(sock, 65535)


async def _tcp(packet: bytes, server: tuple[str, int]) -> bytes:
    reader, writer = await asyncio.open_connection(*server)
    try:
        writer.write(len(packet).to_bytes(2, "big") + packet)
        await writer.drain()
        size = int.from_bytes(await reader.readexactly(2), "big")
        return await reader.readexactly(size)
    finally:
        writer.close()


class Resolver:
    """Keeps tracked names resolved (see the module's docstring); ``on_change(answer)`` after each change."""

    def __init__(
        self,
        on_change: Callable[[Answer], None],
        *,
        min_ttl: float = 1.0,
        max_ttl: float = 300.0,
        concurrency: int = 256,
    ) -> None:
        self.on_change = on_change
        self.min_ttl = min_ttl
        self.max_ttl = max_ttl
        self._gate = asyncio.Semaphore(concurrency)  # thousands of names load at once
        self._tasks: dict[tuple[str, DnsSettings], asyncio.Task[None]] = {}
        self._answers: dict[tuple[str, DnsSettings], Answer] = {}

    def track(self, hostname: str, dns: DnsSettings) -> None:
        """Resolve ``hostname`` with ``dns`` from now on (no-op if already tracked)."""
        key = (hostname, dns)
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(self._keep(key), name=f"resolve {hostname}")

    def untrack(self, hostname: str, dns: DnsSettings) -> None:
        task = self._tasks.pop((hostname, dns), None)
        self._answers.pop((hostname, dns), None)
        if task is not None:
            task.cancel()

    def tracked(self) -> set[tuple[str, DnsSettings]]:
        return set(self._tasks)

    def answer(self, hostname: str, dns: DnsSettings) -> Answer | None:
        """The current answer, or ``None`` before the first lookup has finished."""
        return self._answers.get((hostname, dns))

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _keep(self, key: tuple[str, DnsSettings]) -> None:
        hostname, dns = key
        failures = 0
        while True:
            previous = self._answers.get(key)
            try:
                async with self._gate:
                    addresses, ttl = await lookup(hostname, dns)
            except DnsLookupError as exc:
                failures += 1
                delay = min(FAILURE_MAX, FAILURE_BASE * 2 ** (failures - 1))
                old = previous or Answer(hostname)
                now = Answer(hostname, old.addresses, delay, str(exc), old.resolved)
                log.info("resolving %s failed (%s); keeping %s", hostname, exc, list(old.addresses))
            else:
                failures = 0
                delay = min(self.max_ttl, max(self.min_ttl, ttl))
                if not addresses:
                    delay = min(delay, FAILURE_MAX)  # a name that gains addresses is followed soon
                now = Answer(hostname, addresses, delay, None, True)
            self._answers[key] = now
            if previous is None or (previous.addresses, previous.error) != (now.addresses, now.error):
                self.on_change(now)
            # A little jitter, so that names loaded together do not stay in lockstep.
            await asyncio.sleep(delay * random.uniform(1.0, 1.05))
