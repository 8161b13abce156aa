"""The two DNS messages weir's resolver needs: an ``A``/``AAAA`` question, and the answer to it.

:mod:`weir.resolver` asks for thousands of names at start (one XBackend
each). A general DNS library builds and parses every message as objects
(about 0.2 ms per lookup); this module writes the question's bytes and
reads the answer's records straight from the wire (RFC 1035 section 4,
RFC 3596 for ``AAAA``), keeping only what the resolver uses.

Contract of :func:`parse_answer`: it returns the answer to exactly the
question asked (same id, one question with the same name, case-insensitive,
and type), or raises :class:`DnsWireError`; never another exception,
whatever the bytes (a property test feeds it random and mutated messages).
Compressed names are followed (RFC 1035 4.1.4) with a bound on the jumps.
Records of other types (a ``CNAME`` chain before the addresses) are
skipped; their TTLs do not count.
"""

from __future__ import annotations

import ipaddress
import secrets
import struct
from dataclasses import dataclass

__all__ = ["AAAA", "NOERROR", "NXDOMAIN", "A", "DnsWireError", "Reply", "parse_answer", "question"]

A = 1
AAAA = 28
NOERROR = 0
NXDOMAIN = 3
_CLASS_IN = 1
_HEADER = struct.Struct("!6H")
_RECORD = struct.Struct("!HHIH")
_MAX_JUMPS = 32
_RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


class DnsWireError(ValueError):
    """A message that is not a well-formed answer to the question asked."""


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer: its response code, whether it was truncated, the addresses and their least TTL."""

    rcode: int
    truncated: bool
    addresses: tuple[str, ...]
    ttl: float

    @property
    def rcode_name(self) -> str:
        return _RCODES.get(self.rcode, str(self.rcode))


def question(hostname: str, qtype: int) -> tuple[int, bytes]:
    """``(id, message)``: a recursive query for ``hostname``'s ``qtype`` records, with a random id."""
    ident = secrets.randbelow(1 << 16)
    return ident, _HEADER.pack(ident, 0x0100, 1, 0, 0, 0) + _encode_name(hostname) + struct.pack(
        "!HH", qtype, _CLASS_IN
    )


def parse_answer(message: bytes, ident: int, hostname: str, qtype: int) -> Reply:
    """The reply ``message`` to question ``ident`` (``hostname``, ``qtype``), else :class:`DnsWireError`."""
    try:
        return _parse(bytes(message), ident, hostname, qtype)
    except DnsWireError:
        raise
    except (IndexError, struct.error, ValueError, UnicodeDecodeError) as exc:
        raise DnsWireError(f"malformed answer ({type(exc).__name__})") from None


def _parse(message: bytes, ident: int, hostname: str, qtype: int) -> Reply:
    got, flags, qdcount, ancount, _, _ = _HEADER.unpack_from(message, 0)
    if got != ident:
        raise DnsWireError("answer to another question")
    if not flags & 0x8000:
        raise DnsWireError("not an answer")
    if qdcount != 1:
        raise DnsWireError(f"answer with {qdcount} questions")
    name, pos = _read_name(message, _HEADER.size)
    asked_type, asked_class = struct.unpack_from("!HH", message, pos)
    pos += 4
    if name.lower() != hostname.rstrip(".").lower() or asked_type != qtype or asked_class != _CLASS_IN:
        raise DnsWireError("answer to another question")
    rcode = flags & 0x000F
    truncated = bool(flags & 0x0200)
    addresses: list[str] = []
    ttls: list[int] = []
    size = 4 if qtype == A else 16
    for _ in range(ancount if rcode == NOERROR and not truncated else 0):
        pos = _skip_name(message, pos)
        rtype, rclass, ttl, length = _RECORD.unpack_from(message, pos)
        pos += _RECORD.size
        data = message[pos : pos + length]
        if len(data) != length:
            raise DnsWireError("record cut short")
        pos += length
        if rtype != qtype or rclass != _CLASS_IN:
            continue
        if length != size:
            raise DnsWireError(f"an address record of {length} bytes")
        addresses.append(str(ipaddress.IPv4Address(data) if size == 4 else ipaddress.IPv6Address(data)))
        ttls.append(ttl)
    return Reply(rcode, truncated, tuple(addresses), float(min(ttls, default=0)))


def _encode_name(hostname: str) -> bytes:
    out = bytearray()
    for label in hostname.rstrip(".").split("."):
        raw = label.encode("idna") if not label.isascii() else label.encode()
        if not 0 < len(raw) < 64:
            raise DnsWireError(f"{hostname!r} is not a DNS name")
        out += bytes((len(raw),)) + raw
    if len(out) > 254:
        raise DnsWireError(f"{hostname!r} is longer than a DNS name may be")
    return bytes(out) + b"\x00"


def _read_name(message: bytes, pos: int) -> tuple[str, int]:
    """The name at ``pos`` (dotted, without the final dot) and the position after it."""
    labels: list[str] = []
    end = -1
    for _ in range(_MAX_JUMPS):
        while True:
            size = message[pos]
            if size & 0xC0 == 0xC0:
                if end < 0:
                    end = pos + 2
                pos = ((size & 0x3F) << 8) | message[pos + 1]
                break
            if size & 0xC0:
                raise DnsWireError("a label of an unknown kind")
            if size == 0:
                return ".".join(labels), (end if end >= 0 else pos + 1)
            label = message[pos + 1 : pos + 1 + size]
            if len(label) != size:
                raise DnsWireError("name cut short")
            labels.append(label.decode("ascii"))
            pos += 1 + size
    raise DnsWireError("a name that points in circles")


def _skip_name(message: bytes, pos: int) -> int:
    """The position after the (possibly compressed) name at ``pos``."""
    while True:
        size = message[pos]
        if size & 0xC0 == 0xC0:
            if pos + 1 >= len(message):
                raise DnsWireError("name cut short")
            return pos + 2
        if size & 0xC0:
            raise DnsWireError("a label of an unknown kind")
        if size == 0:
            return pos + 1
        pos += 1 + size
