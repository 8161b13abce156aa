"""Inputs to translation that do not come from Gateway API objects."""

from __future__ import annotations

from dataclasses import dataclass

from weir import DEFAULT_CONTROLLER_NAME

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
    """

    controller_name: str = DEFAULT_CONTROLLER_NAME
    bind_address: str = "127.0.0.1"
    dns_resolvers: tuple[tuple[str, int], ...] = ()
    system_trust_file: str = DEFAULT_SYSTEM_TRUST_FILE
