"""What translation knows of each of weir's Gateways, ListenerSets and listeners while routes attach
(:class:`GatewayContext`, :class:`ListenerContext`): made by :mod:`weir.translate.gateways`, filled by
the route kinds, read for status and IR."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from weir import ir
from weir.api.gateway_v1 import Gateway, Listener
from weir.api.gateway_v1_listenerset import ListenerSet
from weir.api.meta import KubeObject, ObjectKey
from weir.translate import status as st
from weir.translate.certificates import CertificateProblem
from weir.translate.frontendtls import ClientCAProblem, ClientValidation

#: Route kinds a listener of each protocol can carry, today.
#: HTTPS carries what HTTP carries, inside TLS; TLS carries TLSRoutes (passthrough or terminated).
SUPPORTED_KINDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "HTTP": ("HTTPRoute", "GRPCRoute"),
        "HTTPS": ("HTTPRoute", "GRPCRoute"),
        "TCP": ("TCPRoute",),
        "UDP": ("UDPRoute",),
        "TLS": ("TLSRoute",),
    }
)

#: The Gateway API release whose resources weir implements (``SupportedVersion``).
GATEWAY_API_VERSION = "v1.6"

#: The protocols of the Gateway API core, which it says to compare case-insensitively.
CORE_PROTOCOLS = ("HTTP", "HTTPS", "TLS", "TCP", "UDP")

#: Which listeners can share a socket: HTTP ones (told apart by Host), TLS ones (HTTPS and
#: TLS, told apart by the server name of the ClientHello); a TCP or UDP listener has its socket
#: alone (weir keys sockets by address and port, so a UDP listener does not share a port with TCP).
FAMILIES = MappingProxyType({"HTTP": "HTTP", "HTTPS": "TLS", "TLS": "TLS", "TCP": "TCP", "UDP": "UDP"})
#: Families whose listener has its socket alone.
ALONE = ("TCP", "UDP")

#: A route's place among the routes of one domain: smaller first (see :mod:`weir.translate.routes`).
RouteEntry = tuple[tuple[Any, ...], ir.Route]


@dataclass(frozen=True)
class Conflict:
    """Why a listener of a supported protocol is not served: another listener wants its socket or name.

    ``reason`` is the listener's ``Accepted=False`` reason; ``conflicted``
    the reason of ``Conflicted=True`` (``ProtocolConflict``,
    ``HostnameConflict``), if the Gateway API calls it a conflict.
    """

    reason: str
    message: str
    conflicted: str | None


@dataclass
class ListenerContext:
    """One Gateway listener weir will serve, with what routes attach to it.

    ``attached`` counts routes that attached (for ``attachedRoutes``);
    translation of routes increments it. ``valid`` (``Accepted=True``) is
    False for an unsupported protocol, for a value weir does not support
    (``unsupported`` says which), and for a listener that lost its socket or
    server name to another (``conflict`` says why). Routes attach to valid
    listeners. A valid listener that terminates TLS is only served once its
    ``certificates`` resolve: with a ``certificate_problem`` routes still
    attach (and count) but it serves nothing.
    """

    gateway: Gateway
    spec: Listener
    sockets: tuple[tuple[str, int], ...]
    kinds: tuple[str, ...]
    valid: bool
    attached: int = 0
    conflict: Conflict | None = None
    unsupported: str | None = None
    certificates: tuple[ir.TlsCertificate, ...] = ()
    certificate_problem: CertificateProblem | None = None
    #: HTTPS only: how clients' certificates are validated (the Gateway's ``spec.tls.frontend``
    #: for this port), or why they cannot be; either way the listener owns its server name.
    client_validation: ClientValidation | None = None
    client_ca_problem: ClientCAProblem | None = None
    #: Listeners on the same socket whose TLS hostnames overlap this one's (``OverlappingTLSConfig``).
    overlapping: list[str] = field(default_factory=list)
    #: The HTTP routes attached to this listener, by domain (filled by route translation); what
    #: an HTTPS listener serves, since the server name of a connection picks one listener.
    routes: dict[str, list[RouteEntry]] = field(default_factory=lambda: defaultdict(list))
    #: A TLS listener's server names, each with the backends of the TLSRoute that gets its
    #: connections (filled by TLSRoute translation).
    relays: dict[str, tuple[ir.WeightedBackend, ...]] = field(default_factory=dict)
    #: The ListenerSet this listener comes from (``None``: the Gateway's own).
    listener_set: ListenerSet | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def owner(self) -> KubeObject:
        """The object that declares the listener: its Gateway, or the ListenerSet that adds it."""
        return self.listener_set if self.listener_set is not None else self.gateway

    @property
    def protocol(self) -> str:
        """``spec.protocol``, upper-cased when it is a core protocol (``https`` is ``HTTPS``)."""
        upper = self.spec.protocol.upper()
        return upper if upper in CORE_PROTOCOLS else self.spec.protocol

    @property
    def family(self) -> str:
        """Which listeners this one can share a socket with (see :data:`FAMILIES`)."""
        return FAMILIES.get(self.protocol, self.protocol)

    @property
    def hostname(self) -> str | None:
        return self.spec.hostname

    @property
    def terminates_tls(self) -> bool:
        """HTTPS, or TLS in mode ``Terminate``: the gateway presents certificates."""
        tls = self.spec.tls
        return self.protocol == "HTTPS" or (
            self.protocol == "TLS" and tls is not None and tls.mode == "Terminate"
        )

    @property
    def served(self) -> bool:
        """Accepted and usable: it is in the data plane."""
        return self.valid and self.certificate_problem is None and self.client_ca_problem is None


@dataclass
class ListenerSetContext:
    """A ListenerSet that names one of weir's Gateways: its listeners once attached, or why not.

    ``refusal`` is its ``Accepted=False`` reason and message (the Gateway does
    not allow it, or is not accepted itself); its listeners are then not
    part of the Gateway.
    """

    listener_set: ListenerSet
    listeners: list[ListenerContext] = field(default_factory=list)
    refusal: tuple[str, str] | None = None

    @property
    def key(self) -> ObjectKey:
        return self.listener_set.key


@dataclass
class GatewayContext:
    """A Gateway of weir's classes. ``listeners`` is the merged list the Gateway API describes: the
    Gateway's own, then those of its attached ListenerSets in precedence order."""

    gateway: Gateway
    listeners: list[ListenerContext] = field(default_factory=list)
    addresses: tuple[str, ...] = ()
    conditions: list[st.Condition] = field(default_factory=list)
    #: ``status.addresses`` when they are not where listeners bind (see :func:`published_addresses`).
    published: tuple[tuple[str, str], ...] | None = None
    #: Every ListenerSet naming this Gateway, oldest first (attached or refused).
    listener_sets: list[ListenerSetContext] = field(default_factory=list)
    #: The Gateway's own ``ResolvedRefs``, when it has references of its own (``spec.tls.backend``).
    resolved_refs: st.Condition | None = None
    #: Why the Gateway has no Service of its own (``--gateway-services``: a foreign Service has its name).
    address_problem: str | None = None

    @property
    def own_listeners(self) -> list[ListenerContext]:
        """The listeners of ``spec.listeners`` (those the Gateway's status reports)."""
        return [lc for lc in self.listeners if lc.listener_set is None]
