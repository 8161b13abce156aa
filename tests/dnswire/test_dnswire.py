"""weir.dnswire: the resolver's question and answer on the wire, checked against dnslib (a general
DNS library) and against whatever bytes a server, or someone spoofing one, can send."""

from __future__ import annotations

import contextlib
import ipaddress
import struct

import pytest
from dnslib import AAAA, CNAME, QTYPE, RCODE, RR, TXT, A, DNSRecord
from hypothesis import given, settings
from hypothesis import strategies as st

from weir import dnswire
from weir.dnswire import DnsWireError, parse_answer, question

LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20).filter(
    lambda s: not s.startswith("-") and not s.endswith("-")
)
HOSTNAME = st.lists(LABEL, min_size=1, max_size=5).map(".".join)
IPV4 = st.integers(0, 2**32 - 1).map(lambda i: str(ipaddress.IPv4Address(i)))
IPV6 = st.integers(0, 2**128 - 1).map(lambda i: str(ipaddress.IPv6Address(i)))


def reply_for(ident: int, hostname: str, qtype: int, records: list[RR], rcode: int = 0, tc: int = 0) -> bytes:
    """What a server answers, written by dnslib (which compresses repeated names)."""
    asked = DNSRecord.question(hostname + ".", QTYPE[qtype])
    asked.header.id = ident
    reply = asked.reply()
    reply.header.rcode = rcode
    reply.header.tc = tc
    for record in records:
        reply.add_answer(record)
    return reply.pack()


def test_the_question_is_what_dnslib_reads() -> None:
    ident, packet = question("api.Example.com.", dnswire.AAAA)
    parsed = DNSRecord.parse(packet)
    assert parsed.header.id == ident and parsed.header.rd == 1 and parsed.header.qr == 0
    assert str(parsed.q.qname) == "api.Example.com." and parsed.q.qtype == QTYPE.AAAA


@settings(max_examples=200, deadline=None)
@given(
    HOSTNAME,
    st.sampled_from([dnswire.A, dnswire.AAAA]),
    st.lists(st.tuples(st.booleans(), st.integers(0, 2**31 - 1)), max_size=6),
    st.data(),
)
def test_answers_read_as_dnslib_writes_them(
    hostname: str, qtype: int, shape: list[tuple[bool, int]], data: st.DataObject
) -> None:
    """Addresses in order and the least TTL of the asked type, past CNAMEs and other records."""
    ident, _ = question(hostname, qtype)
    records: list[RR] = []
    wanted: list[tuple[str, int]] = []
    for is_address, ttl in shape:
        if is_address:
            address = data.draw(IPV4 if qtype == dnswire.A else IPV6)
            rdata = A(address) if qtype == dnswire.A else AAAA(address)
            records.append(RR(hostname + ".", qtype, rdata=rdata, ttl=ttl))
            wanted.append((address, ttl))
        else:
            other = data.draw(st.sampled_from(["cname", "txt", "other-address"]))
            if other == "cname":
                records.append(RR(hostname + ".", QTYPE.CNAME, rdata=CNAME("alias." + hostname + "."), ttl=1))
            elif other == "txt":
                records.append(RR(hostname + ".", QTYPE.TXT, rdata=TXT("hello"), ttl=1))
            else:  # an address of the other family: not what was asked
                rdata = AAAA("2001:db8::1") if qtype == dnswire.A else A("192.0.2.1")
                rtype = QTYPE.AAAA if qtype == dnswire.A else QTYPE.A
                records.append(RR(hostname + ".", rtype, rdata=rdata, ttl=1))
    reply = parse_answer(reply_for(ident, hostname, qtype, records), ident, hostname.upper(), qtype)
    assert reply.rcode == dnswire.NOERROR and not reply.truncated
    assert reply.addresses == tuple(a for a, _ in wanted)
    assert reply.ttl == min((t for _, t in wanted), default=0)


@pytest.mark.parametrize("rcode", [RCODE.NXDOMAIN, RCODE.SERVFAIL, RCODE.REFUSED])
def test_the_response_code_is_read(rcode: int) -> None:
    ident, _ = question("x.example", dnswire.A)
    raw = reply_for(ident, "x.example", dnswire.A, [], rcode=rcode)
    reply = parse_answer(raw, ident, "x.example", dnswire.A)
    assert reply.rcode == rcode and reply.addresses == ()
    assert reply.rcode_name == RCODE[rcode]


def test_a_truncated_answer_says_so() -> None:
    ident, _ = question("x.example", dnswire.A)
    raw = reply_for(ident, "x.example", dnswire.A, [RR("x.example.", rdata=A("192.0.2.1"))], tc=1)
    assert parse_answer(raw, ident, "x.example", dnswire.A).truncated


@pytest.mark.parametrize(
    ("ident", "hostname", "qtype"),
    [(1, "x.example", dnswire.A), (7, "y.example", dnswire.A), (7, "x.example", dnswire.AAAA)],
    ids=["another-id", "another-name", "another-type"],
)
def test_an_answer_to_another_question_is_refused(ident: int, hostname: str, qtype: int) -> None:
    raw = reply_for(7, "x.example", dnswire.A, [RR("x.example.", rdata=A("192.0.2.1"))])
    with pytest.raises(DnsWireError, match="another question"):
        parse_answer(raw, ident, hostname, qtype)


def test_a_name_that_points_in_circles_is_refused() -> None:
    header = struct.pack("!6H", 5, 0x8180, 1, 0, 0, 0)
    looping = header + b"\xc0\x0c" + struct.pack("!HH", 1, 1)  # the question's name points at itself
    with pytest.raises(DnsWireError):
        parse_answer(looping, 5, "x.example", dnswire.A)


def test_an_address_record_of_the_wrong_size_is_refused() -> None:
    ident, packet = question("x.example", dnswire.A)
    body = packet[12:]
    header = struct.pack("!6H", ident, 0x8180, 1, 1, 0, 0)
    record = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 5) + b"\x01\x02\x03\x04\x05"
    with pytest.raises(DnsWireError, match="5 bytes"):
        parse_answer(header + body + record, ident, "x.example", dnswire.A)


def test_a_name_too_long_for_dns_is_not_asked() -> None:
    with pytest.raises(DnsWireError):
        question("a" * 64 + ".example", dnswire.A)
    with pytest.raises(DnsWireError):
        question(".".join(["abcdefgh"] * 40), dnswire.A)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600))
def test_any_bytes_are_an_answer_or_refused(raw: bytes) -> None:
    with contextlib.suppress(DnsWireError):
        parse_answer(raw, int.from_bytes(raw[:2] or b"\0\0", "big"), "x.example", dnswire.A)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_a_mutated_answer_is_an_answer_or_refused(data: st.DataObject) -> None:
    ident, _ = question("x.example", dnswire.A)
    records = [
        RR("x.example.", QTYPE.CNAME, rdata=CNAME("y.example.")),
        RR("y.example.", rdata=A("192.0.2.1")),
    ]
    raw = bytearray(reply_for(ident, "x.example", dnswire.A, records))
    for _ in range(data.draw(st.integers(1, 6))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    try:
        reply = parse_answer(bytes(raw[:cut]), ident, "x.example", dnswire.A)
    except DnsWireError:
        return
    assert all(ipaddress.ip_address(a).version == 4 for a in reply.addresses)
