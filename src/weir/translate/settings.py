"""Inputs to translation that do not come from Gateway API objects."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

from weir import DEFAULT_CONTROLLER_NAME
from weir.addresses import DEFAULT_DENIED_CIDRS
from weir.ir import DEFAULT_REQUEST_TIMEOUT_MS

__all__ = ["DEFAULT_DENIED_CIDRS", "DEFAULT_SYSTEM_TRUST_FILE", "Settings"]

#: Debian's (and most distributions') bundle of system-trusted CAs.
DEFAULT_SYSTEM_TRUST_FILE = "/etc/ssl/certs/ca-certificates.crt"


@dataclass(frozen=True)
class Settings:
    """How this weir instance is set up.

    ``controller_name``: GatewayClasses naming it are weir's.
    ``bind_address``: where listeners bind when a Gateway has no addresses.
    ``dns_resolvers``: ``(ip, port)`` of DNS servers for external hostnames
    (empty: the system resolver). ``system_trust_file``: the CA bundle used
    for ``wellKnownCACertificates: System`` and when an XBackend names no CA.
    ``request_timeout_ms``: how long a request may take, end of request to
    last byte of the response, on routes that do not go to an MCP backend
    (those have no such limit); ``0`` means no limit.

    Egress policy (see :mod:`weir.translate.egress`); each setting, when
    given, replaces what GatewayClass parameters say, for every class:
    ``egress_denied_cidrs``: networks the resolved addresses of external
    hostnames must not be in; ``None`` (the default): each class's
    parameters, else :data:`weir.addresses.DEFAULT_DENIED_CIDRS`; ``()``: nothing is
    denied. ``egress_allowed_hostnames``: hostname patterns (``api.example.com``,
    ``*.example.com``) every XBackend must match; ``None``: each class's
    parameters, else any hostname; ``()``: any hostname. Non-empty
    ``dns_resolvers`` likewise replace the resolvers of class parameters.

    Gateway ``status.addresses`` (where clients reach a Gateway that requests
    no ``spec.addresses``): ``gateway_addresses`` when given (an IP address
    is ``IPAddress``, anything else ``Hostname``); else, with
    ``publish_service`` (``(namespace, name)``, in a cluster the Service in
    front of weir's pods), that Service's load-balancer ingress, else its
    cluster IP; else the address listeners bind to. ``gateway_services``
    (``ClusterIP`` or ``LoadBalancer``; ``None``, the default: off) is the
    per-Gateway Service mode (:mod:`weir.infrastructure`): each
    Gateway's addresses come from its own Service instead of
    ``publish_service``, and GatewayClasses claim ``GatewayInfrastructurePropagation``.
    """

    controller_name: str = DEFAULT_CONTROLLER_NAME
    bind_address: str = "127.0.0.1"
    dns_resolvers: tuple[tuple[str, int], ...] = ()
    system_trust_file: str = DEFAULT_SYSTEM_TRUST_FILE
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    egress_denied_cidrs: tuple[str, ...] | None = None
    egress_allowed_hostnames: tuple[str, ...] | None = None
    publish_service: tuple[str, str] | None = None
    gateway_addresses: tuple[str, ...] = ()
    gateway_services: Literal["ClusterIP", "LoadBalancer"] | None = None

    def __post_init__(self) -> None:
        for cidr in self.egress_denied_cidrs or ():
            ipaddress.ip_network(cidr)  # ValueError for a typo, host bits included
