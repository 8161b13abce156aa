"""The default denied networks and the IPv6 forms of IPv4 addresses (weir.addresses)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.addresses import DEFAULT_DENIED, DEFAULT_DENIED_CIDRS, EMBEDDINGS, denied_by, enforced_ranges
from weir.translate.egress import normalise_networks

FORMS = {
    "::ffff:10.20.30.40": "10.0.0.0/8",
    "::a14:1e28": "10.0.0.0/8",
    "::ffff:0:a14:1e28": "10.0.0.0/8",
    "64:ff9b::a14:1e28": "10.0.0.0/8",
    "2002:a14:1e28::1": "10.0.0.0/8",
    "64:ff9b:1::a14:1e28": "64:ff9b:1::/48",
    "2001:0:c633:6401:8000:ffff:f5eb:e1d7": "2001::/32",
}


def test_default_list_is_canonical_and_documented() -> None:
    assert normalise_networks(DEFAULT_DENIED_CIDRS) == DEFAULT_DENIED_CIDRS
    for entry in DEFAULT_DENIED:
        assert entry.name and ("RFC" in entry.source and "IANA" in entry.source), entry


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254", "100.100.100.200", "0.0.0.0", "255.255.255.255", "224.0.0.1", "198.18.0.1",
        "192.0.0.170", "240.1.2.3", "::", "::1", "fd00:ec2::254", "fe80::1", "fec0::1", "ff02::1",
        "2001:db8::1", "3fff::1", "100::1", "5f00::1",
        # embedded forms of the metadata address
        "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::", "::a9fe:a9fe",
        "::ffff:0:a9fe:a9fe",
    ],
)  # fmt: skip
def test_default_list_denies(address: str) -> None:
    assert denied_by(address, DEFAULT_DENIED_CIDRS) is not None


@pytest.mark.parametrize(
    "address",
    ["1.1.1.1", "8.8.8.8", "2606:4700::1111", "64:ff9b::101:101", "2002:808:808::1", "::ffff:1.1.1.1"],
)
def test_default_list_allows_public_addresses(address: str) -> None:
    assert denied_by(address, DEFAULT_DENIED_CIDRS) is None


@pytest.mark.parametrize(("address", "network"), FORMS.items())
def test_embedded_ipv4_is_judged_under_any_list(address: str, network: str) -> None:
    assert denied_by(address, ["10.0.0.0/8"]) == network
    assert denied_by(address, ["192.168.0.0/16"]) in (None, "64:ff9b:1::/48", "2001::/32")
    assert denied_by(address, ["fc00::/7"]) is None  # no IPv4 network: nothing embedded is denied


def test_unreadable_prefixes_are_denied_only_when_some_ipv4_is() -> None:
    assert set(enforced_ranges(["::1/128"])) == {"::1/128"}
    assert {"64:ff9b:1::/48", "2001::/32"} <= set(enforced_ranges(["10.0.0.0/8"]))
    assert "2001::/32" not in enforced_ranges(["10.0.0.0/8", "2001::/23"])  # covered by the list


def _in_ranges(address: str, denied: list[str]) -> str | None:
    ip = ipaddress.ip_address(address)
    for name, ranges in enforced_ranges(denied).items():
        if any(ip.version == net.version and ip in net for net in ranges):
            return name
    return None


embedded = st.sampled_from([e for e in EMBEDDINGS if e.offset is not None]).flatmap(
    lambda e: st.integers(0, 2**32 - 1).map(
        lambda v4: str(ipaddress.IPv6Address(int(e.network.network_address) | (v4 << (96 - (e.offset or 0)))))
    )
)
anything = st.one_of(
    st.ip_addresses().map(str),
    embedded,
    st.sampled_from(list(FORMS)),
)


@settings(max_examples=400, deadline=None)
@given(
    address=anything,
    denied=st.sampled_from([list(DEFAULT_DENIED_CIDRS), ["10.0.0.0/8"], ["127.0.0.66/32", "::1/128"]]),
)
def test_envoy_ranges_and_python_check_agree(address: str, denied: list[str]) -> None:
    """What Envoy's matcher denies (written addresses in the ranges) is what weir's own check denies."""
    assert (_in_ranges(address, denied) is None) == (denied_by(address, denied) is None), address
