"""Which IP addresses an external hostname must never lead to, and the IPv6 forms that hide an IPv4 one.

Two facts live here, for every part of weir that judges an address:

* :data:`DEFAULT_DENIED` — the default denied networks, each with the
  registry entry (and RFC) it comes from. The rule: every block of the IANA
  IPv4 and IPv6 Special-Purpose Address Registries that is not globally
  reachable, plus multicast and the deprecated IPv6 site-local block (from
  the IANA address-space registries), which no external API uses. Blocks
  that merely *contain* an IPv4 address (IPv4-mapped, NAT64 ``64:ff9b::/96``,
  6to4) are not on the list: they are judged by the IPv4 address inside
  (:data:`EMBEDDINGS`). A few globally reachable anycast services inside
  denied blocks (PCP and TURN anycast in 192.0.0.0/24 and 2001:1::/48, AMT
  and AS112 in 2001::/23) are denied with their block: none serves HTTP.
* :data:`EMBEDDINGS` — IPv6 prefixes whose addresses reach an IPv4 address
  through a translator, a tunnel or the host's own socket layer. An IPv6
  address in one of them is denied when the IPv4 address it embeds is
  (:func:`denied_by`), whatever list is configured. Where the IPv4 address
  cannot be read reliably (Teredo obfuscates it; a local-use NAT64 prefix
  may use any RFC 6052 layout), the whole prefix is denied as soon as the
  list denies any IPv4 network.

Not covered: ISATAP (RFC 5214) identifiers, which embed an IPv4 address
under any /64 and are only reachable through an ISATAP interface on the
gateway's host; weir's hosts are not expected to have one.

:func:`enforced_ranges` turns a denied list into plain CIDR ranges for a
matcher that compares addresses as written (Envoy's ``upstream_ip_port``);
:func:`denied_by` answers for one address. Both follow the same rules, and a
test checks that they agree.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Registered:
    """One default denied network: ``cidr``, what it is, and where that is written down."""

    cidr: str
    name: str
    source: str


_V4 = "IANA IPv4 Special-Purpose Address Registry"
_V6 = "IANA IPv6 Special-Purpose Address Registry"

#: The default denied networks (see the module's docstring for the rule).
DEFAULT_DENIED: tuple[Registered, ...] = (
    Registered("0.0.0.0/8", '"This network" (0.0.0.0 reaches this host)', f"{_V4}, RFC 791 §3.2"),
    Registered("10.0.0.0/8", "Private-Use", f"{_V4}, RFC 1918"),
    Registered(
        "100.64.0.0/10", "Shared Address Space (Alibaba Cloud metadata: 100.100.100.200)", f"{_V4}, RFC 6598"
    ),
    Registered("127.0.0.0/8", "Loopback", f"{_V4}, RFC 1122 §3.2.1.3"),
    Registered("169.254.0.0/16", "Link Local (cloud metadata: 169.254.169.254)", f"{_V4}, RFC 3927"),
    Registered("172.16.0.0/12", "Private-Use", f"{_V4}, RFC 1918"),
    Registered(
        "192.0.0.0/24",
        "IETF Protocol Assignments (DS-Lite, NAT64 discovery, PCP/TURN anycast)",
        f"{_V4}, RFC 6890 §2.1",
    ),
    Registered("192.0.2.0/24", "Documentation (TEST-NET-1)", f"{_V4}, RFC 5737"),
    Registered("192.88.99.0/24", "Deprecated 6to4 Relay Anycast", f"{_V4}, RFC 7526"),
    Registered("192.168.0.0/16", "Private-Use", f"{_V4}, RFC 1918"),
    Registered("198.18.0.0/15", "Benchmarking", f"{_V4}, RFC 2544"),
    Registered("198.51.100.0/24", "Documentation (TEST-NET-2)", f"{_V4}, RFC 5737"),
    Registered("203.0.113.0/24", "Documentation (TEST-NET-3)", f"{_V4}, RFC 5737"),
    Registered("224.0.0.0/4", "Multicast", "IANA IPv4 Address Space Registry, RFC 5771"),
    Registered(
        "240.0.0.0/4", "Reserved, and Limited Broadcast 255.255.255.255", f"{_V4}, RFC 1112 §4, RFC 919"
    ),
    Registered("::/128", "Unspecified Address", f"{_V6}, RFC 4291"),
    Registered("::1/128", "Loopback Address", f"{_V6}, RFC 4291"),
    Registered("64:ff9b:1::/48", "IPv4-IPv6 Translation, local use", f"{_V6}, RFC 8215"),
    Registered("100::/64", "Discard-Only Address Block", f"{_V6}, RFC 6666"),
    Registered("100:0:0:1::/64", "Dummy IPv6 Prefix", f"{_V6}, RFC 9780"),
    Registered(
        "2001::/23",
        "IETF Protocol Assignments (Teredo 2001::/32, benchmarking, ORCHID, AMT, AS112)",
        f"{_V6}, RFC 2928",
    ),
    Registered("2001:db8::/32", "Documentation", f"{_V6}, RFC 3849"),
    Registered("3fff::/20", "Documentation", f"{_V6}, RFC 9637"),
    Registered("5f00::/16", "Segment Routing (SRv6) SIDs", f"{_V6}, RFC 9602"),
    Registered("fc00::/7", "Unique-Local (AWS metadata: fd00:ec2::254)", f"{_V6}, RFC 4193"),
    Registered("fe80::/10", "Link-Local Unicast", f"{_V6}, RFC 4291"),
    Registered("fec0::/10", "Site-Local (deprecated)", "IANA IPv6 Address Space Registry, RFC 3879"),
    Registered("ff00::/8", "Multicast", "IANA IPv6 Address Space Registry, RFC 4291"),
)

#: :data:`DEFAULT_DENIED` as CIDRs, in canonical order.
DEFAULT_DENIED_CIDRS: tuple[str, ...] = tuple(entry.cidr for entry in DEFAULT_DENIED)


@dataclass(frozen=True)
class Embedding:
    """An IPv6 prefix whose addresses reach an IPv4 address.

    ``offset``: the bit where the 32-bit IPv4 address starts, or ``None``
    when it cannot be read reliably (then the whole prefix stands for any
    IPv4 address).
    """

    prefix: str
    name: str
    source: str
    offset: int | None

    @functools.cached_property
    def network(self) -> ipaddress.IPv6Network:
        return ipaddress.IPv6Network(self.prefix)


#: The IPv6 forms of IPv4 addresses.
EMBEDDINGS: tuple[Embedding, ...] = (
    Embedding("::ffff:0:0/96", "IPv4-mapped", "RFC 4291 §2.5.5.2", 96),
    Embedding("::/96", "IPv4-compatible (deprecated)", "RFC 4291 §2.5.5.1", 96),
    Embedding("::ffff:0:0:0/96", "IPv4-translated (SIIT)", "RFC 2765", 96),
    Embedding("64:ff9b::/96", "NAT64 well-known prefix", "RFC 6052", 96),
    Embedding("2002::/16", "6to4", "RFC 3056", 16),
    Embedding("64:ff9b:1::/48", "NAT64 local-use prefix (any RFC 6052 layout)", "RFC 8215", None),
    Embedding("2001::/32", "Teredo (client address obfuscated)", "RFC 4380", None),
)


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[Embedding, ipaddress.IPv4Address | None]]:
    """The forms ``address`` is in, each with the IPv4 address it reaches (``None``: unreadable)."""
    found: list[tuple[Embedding, ipaddress.IPv4Address | None]] = []
    for form in EMBEDDINGS:
        if address in form.network:
            if form.offset is None:
                found.append((form, None))
            else:
                bits = (int(address) >> (96 - form.offset)) & 0xFFFFFFFF
                found.append((form, ipaddress.IPv4Address(bits)))
    return found


def denied_by(address: str | IPAddress, denied_networks: Iterable[str]) -> str | None:
    """The denied network (or embedding prefix) that ``address`` falls in, or ``None`` if it is allowed."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    nets = _parsed(tuple(denied_networks))
    for net in nets:
        if ip.version == net.version and ip in net:
            return str(net)
    if isinstance(ip, ipaddress.IPv6Address):
        any_v4 = any(net.version == 4 for net in nets)
        for form, v4 in embedded_ipv4(ip):
            if v4 is None:
                if any_v4:
                    return form.prefix
                continue
            for net in nets:
                if net.version == 4 and v4 in net:
                    return str(net)
    return None


def enforced_ranges(denied_networks: Iterable[str]) -> dict[str, tuple[IPNetwork, ...]]:
    """Each denied network (and unreadable embedding) → the CIDR ranges that enforce it on written addresses.

    An IPv4 network ``10.0.0.0/8`` is also ``::ffff:10.0.0.0/104``,
    ``::10.0.0.0/104``, ``::ffff:0:10.0.0.0/104``, ``64:ff9b::10.0.0.0/104``
    and ``2002:a00::/24``; when any IPv4 network is denied, the Teredo and
    local-use NAT64 prefixes are denied whole, under their own names, unless
    an IPv6 network of the list already covers them. Keys are in the order of
    :func:`denied_by`'s answers (the network that contains the address).
    """
    nets = _parsed(tuple(denied_networks))
    out: dict[str, tuple[IPNetwork, ...]] = {}
    for net in nets:
        ranges: list[IPNetwork] = [net]
        if isinstance(net, ipaddress.IPv4Network):
            for form in EMBEDDINGS:
                if form.offset is not None:
                    base = int(form.network.network_address) | (
                        int(net.network_address) << (96 - form.offset)
                    )
                    ranges.append(ipaddress.IPv6Network((base, form.offset + net.prefixlen)))
        out[str(net)] = tuple(ranges)
    if any(net.version == 4 for net in nets):
        v6 = [net for net in nets if isinstance(net, ipaddress.IPv6Network)]
        for form in EMBEDDINGS:
            if form.offset is None and not any(form.network.subnet_of(net) for net in v6):
                out[form.prefix] = (form.network,)
    return out


@functools.lru_cache(maxsize=256)
def _parsed(cidrs: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr) for cidr in cidrs)
