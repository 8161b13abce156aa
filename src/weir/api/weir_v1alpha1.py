"""weir's own API, ``weir.dev/v1alpha1``: GatewayClassConfig.

A GatewayClass names its configuration through ``spec.parametersRef``
(``group: weir.dev, kind: GatewayClassConfig, name: ...``, no namespace: the
kind is cluster-scoped, like the GatewayClass itself, so only whoever may
manage GatewayClasses decides a class's egress policy). Example::

    apiVersion: weir.dev/v1alpha1
    kind: GatewayClassConfig
    metadata: {name: egress}
    spec:
      egress:
        deniedCIDRs: [10.0.0.0/8, 169.254.0.0/16]   # absent: weir's default list; []: deny nothing
        allowedHostnames: [api.openai.com, "*.example.com"]   # absent or []: any hostname
      dns:
        resolvers: [{address: 10.0.0.10, port: 53}]   # absent: weir's (or the system's)
        lookupTimeout: 2s

What each field does is in :mod:`weir.translate.egress`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from typing import ClassVar

from pydantic import Field, field_validator

from weir.api.meta import Hostname, KubeObject, Model, PortNumber

GROUP = "weir.dev"
API_VERSION = f"{GROUP}/v1alpha1"

#: Gateway API's Duration format (GEP-2257), e.g. ``1s``, ``1500ms``, ``1m30s``.
_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
_DURATION_PART = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_MS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}


def _denied_network(i: int, cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """Entry ``i`` of ``deniedCIDRs`` as a network, or ``ValueError`` saying what to write."""
    wrong = f"[{i}] {cidr!r} is not a network in CIDR notation (like 10.0.0.0/8 or fc00::/7)"
    # ipaddress also takes netmasks ("/255.0.0.0"), IPv6 zones ("%eth0") and a prefix length
    # with a leading zero ("/08"); Envoy and the CRD (Kubernetes' isCIDR) take none of them.
    _, slash, prefix = cidr.partition("/")
    if "%" in cidr or (slash and not (prefix.isdigit() and (prefix == "0" or prefix[0] != "0"))):
        raise ValueError(wrong)
    try:
        network = ipaddress.ip_network(cidr)
    except ValueError:
        hint = ""
        with contextlib.suppress(ValueError):
            hint = f"; did you mean {ipaddress.ip_network(cidr, strict=False)}?"
        raise ValueError(wrong + hint) from None
    mapped = getattr(network.network_address, "ipv4_mapped", None)
    if mapped is not None:
        raise ValueError(
            f"[{i}] {cidr!r} is an IPv4-mapped IPv6 network, which Kubernetes refuses: write "
            f"{mapped}/{max(network.prefixlen - 96, 0)}, which denies its IPv4-mapped form too"
        )
    return network


def duration_ms(value: str) -> int:
    """Milliseconds in a Gateway API Duration (``ValueError`` if it is not one)."""
    if not _DURATION.match(value):
        raise ValueError(f"{value!r} is not a duration like 1s, 1500ms or 1m30s")
    return sum(int(n) * _UNIT_MS[unit] for n, unit in _DURATION_PART.findall(value))


class EgressConfig(Model):
    """Where Gateways of the class may send traffic for XBackends."""

    denied_cidrs: tuple[str, ...] | None = Field(default=None, alias="deniedCIDRs", max_length=64)
    allowed_hostnames: tuple[Hostname, ...] | None = Field(default=None, max_length=64)

    @field_validator("denied_cidrs")
    @classmethod
    def _cidrs(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        out = []
        for i, cidr in enumerate(value):
            out.append(str(_denied_network(i, cidr)))
        return tuple(out)


class DnsResolver(Model):
    address: str
    port: PortNumber = 53

    @field_validator("address")
    @classmethod
    def _ip(cls, value: str) -> str:
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address") from None
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is not None:
            # As Kubernetes' isIP, which the CRD's rule uses, does.
            raise ValueError(f"{value!r} is an IPv4-mapped IPv6 address: write {mapped}")
        return str(address)


class DnsConfig(Model):
    """How Envoy resolves the external hostnames of the class's XBackends."""

    resolvers: tuple[DnsResolver, ...] = Field(default=(), max_length=8)
    lookup_timeout: str | None = None

    @field_validator("lookup_timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        if value is not None and not 1000 <= duration_ms(value) <= 60_000:
            raise ValueError(f"{value!r} is out of range: use 1s to 60s (DNS counts whole seconds)")
        return value

    @property
    def lookup_timeout_ms(self) -> int | None:
        return None if self.lookup_timeout is None else duration_ms(self.lookup_timeout)


class GatewayClassConfigSpec(Model):
    egress: EgressConfig = Field(default_factory=EgressConfig)
    dns: DnsConfig = Field(default_factory=DnsConfig)


class GatewayClassConfig(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "GatewayClassConfig"
    NAMESPACED: ClassVar[bool] = False

    spec: GatewayClassConfigSpec = Field(default_factory=GatewayClassConfigSpec)
