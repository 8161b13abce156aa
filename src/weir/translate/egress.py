"""Egress policy: which external hostnames XBackends may name, and which addresses they may reach.

Three guard-rails, from the strictest to the most configurable:

1. **Refused hostnames** (:func:`refused_hostname`), for every class and not
   configurable: IP literals, ``localhost`` and ``*.localhost``, single-label
   names, Kubernetes Service names (``*.svc``, ``*.svc.cluster.local``,
   ``*.svc.clusterset.local``) and the names of cloud metadata services. An
   XBackend naming one is ``Accepted=False``, reason ``UnsupportedValue``.
2. **Allowed hostnames**, per GatewayClass, optional: patterns
   (``api.openai.com``, ``*.example.com``) an XBackend's hostname must match;
   otherwise ``Accepted=False``, reason ``NotAllowed``.
3. **Denied networks**, per GatewayClass: checked by Envoy on the address
   each request (or, for a TCPRoute, each connection) is about to be sent
   to (:class:`weir.ir.EgressGuard`), so a
   name that resolves, or later re-resolves, into a private network is
   refused before any connection is made.

A class's policy (:func:`class_policy`) comes from weir's settings (the
``weir run`` flags) when they say something, else from the GatewayClassConfig
its ``parametersRef`` names, else from the defaults
(:data:`~weir.translate.settings.DEFAULT_DENIED_CIDRS`, any hostname).

Envoy has one cluster per XBackend, shared by every Gateway whose routes use
it, so an XBackend used by Gateways of several classes must be safe for all
of them (:func:`decide`): it must match every class's allow-list, it gets the
union of their denied networks, and their DNS settings must agree (an XBackend
has one resolver). A class whose ``parametersRef`` is invalid has an unknown
policy: its Gateways keep serving Services, but XBackends used through them
are refused (``NotAllowed``) until the reference is fixed. Failing closed for
egress only keeps a typo in the parameters from silently dropping an
allow-list.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from weir import ir
from weir.api.gateway_v1 import GatewayClass
from weir.api.meta import ObjectKey
from weir.api.weir_v1alpha1 import API_VERSION as CONFIG_API_VERSION
from weir.api.weir_v1alpha1 import GROUP as CONFIG_GROUP
from weir.api.weir_v1alpha1 import GatewayClassConfig
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.settings import DEFAULT_DENIED_CIDRS, Settings

#: Names of cloud metadata services (which hand out the machine's credentials).
#: Their addresses (169.254.169.254, fd00:ec2::254, 100.100.100.200) are in
#: the default denied networks; the names are refused outright so that an
#: XBackend cannot even be written for them. ``metadata`` and
#: ``instance-data`` are single-label and refused as such.
METADATA_HOSTNAMES = frozenset(
    {
        "metadata.google.internal",  # Google Cloud
        "metadata.goog",  # Google Cloud
        "instance-data.ec2.internal",  # AWS, us-east-1 (other regions: below)
        "metadata.azure.com",  # Azure
        "metadata.tencentyun.com",  # Tencent Cloud
        "api.metadata.cloud.ibm.com",  # IBM Cloud VPC
        "metadata.platformequinix.com",  # Equinix Metal
        "metadata.packet.net",  # Equinix Metal (formerly Packet)
    }
)
#: Kubernetes Service names. ``.cluster.local`` as a whole is already refused
#: by the XBackend schema.
SERVICE_SUFFIXES = (".svc", ".svc.cluster.local", ".svc.clusterset.local")


def refused_hostname(hostname: str) -> str | None:
    """Why ``hostname`` can never be an XBackend's external hostname, or ``None`` if it can."""
    name = hostname.lower().rstrip(".")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        return f"externalHostname {hostname!r} is an IP address; use a DNS name"
    if name in ("localhost", "localhost.localdomain") or name.endswith(".localhost"):
        return (
            f"externalHostname {hostname!r} names this machine (localhost, RFC 6761); "
            "an XBackend is for external services: use a Service backend for local ones"
        )
    if "." not in name:
        return (
            f"externalHostname {hostname!r} is a single-label name, which resolvers complete "
            "with local search domains or /etc/hosts; use the fully qualified name, like api.example.com"
        )
    if name.endswith(SERVICE_SUFFIXES):
        return (
            f"externalHostname {hostname!r} is a Kubernetes Service name; "
            "reference the Service itself (backendRef kind Service) instead of an XBackend"
        )
    if name in METADATA_HOSTNAMES or (
        name.startswith("instance-data.") and name.endswith(".compute.internal")
    ):
        return (
            f"externalHostname {hostname!r} is a cloud metadata service, which hands out this "
            "machine's credentials; weir never sends traffic to it"
        )
    return None


def hostname_matches(hostname: str, pattern: str) -> bool:
    """``pattern`` is a name (exact match) or ``*.suffix``: any name with one or more labels before it.

    As for Gateway API hostnames, ``*.example.com`` matches ``a.example.com``
    and ``a.b.example.com`` but not ``example.com``.
    """
    if pattern.startswith("*."):
        return hostname.endswith(pattern[1:]) and len(hostname) > len(pattern) - 1
    return hostname == pattern


@dataclass(frozen=True)
class ClassPolicy:
    """The egress policy of one GatewayClass (or of weir's settings, for ``class_name`` ``None``).

    ``denied_networks``: canonical CIDRs. ``allowed_hostnames``: patterns; empty:
    any hostname. ``allowed_source`` says where the allow-list comes from,
    for messages. ``dns``: how the class resolves external hostnames, ``None``
    when as :attr:`weir.ir.IR.dns`. ``problem``: what is wrong with the class's
    ``parametersRef`` (its policy is then unknown).
    """

    class_name: str | None
    denied_networks: tuple[str, ...]
    allowed_hostnames: tuple[str, ...] = ()
    allowed_source: str = ""
    dns: ir.DnsSettings | None = None
    problem: str | None = None


def class_config(resources: Resources, gc: GatewayClass) -> GatewayClassConfig | str | None:
    """The GatewayClassConfig ``gc`` names, ``None`` if it names none, or what is wrong with the reference."""
    ref = gc.spec.parameters_ref
    if ref is None:
        return None
    if (ref.group, ref.kind) != (CONFIG_GROUP, GatewayClassConfig.KIND):
        return (
            f"parametersRef names {ref.group or 'core'}/{ref.kind} {ref.name!r}; weir reads "
            f"parameters from a {CONFIG_API_VERSION} {GatewayClassConfig.KIND} (group {CONFIG_GROUP})"
        )
    if ref.namespace is not None:
        return (
            f"parametersRef has namespace {ref.namespace!r}, but {GatewayClassConfig.KIND} is "
            "cluster-scoped; remove parametersRef.namespace"
        )
    config = resources.get(GatewayClassConfig, "", ref.name)
    if config is None:
        return (
            f"{GatewayClassConfig.KIND} {ref.name!r} named by parametersRef does not exist "
            "(or is invalid: see `weir validate` or the problems in `weir status`)"
        )
    return config


def class_policy(resources: Resources, settings: Settings, gc: GatewayClass | None) -> ClassPolicy:
    """The egress policy of ``gc`` (``None``: weir's settings and the defaults alone)."""
    config = class_config(resources, gc) if gc is not None else None
    name = gc.name if gc is not None else None
    problem = config if isinstance(config, str) else None
    params = config if isinstance(config, GatewayClassConfig) else None

    if settings.egress_denied_cidrs is not None:
        denied: Iterable[str] = settings.egress_denied_cidrs
    elif params is not None and params.spec.egress.denied_cidrs is not None:
        denied = params.spec.egress.denied_cidrs
    else:
        denied = DEFAULT_DENIED_CIDRS

    if settings.egress_allowed_hostnames is not None:
        allowed, source = settings.egress_allowed_hostnames, "weir's --egress-allowed-hostnames"
    elif params is not None and params.spec.egress.allowed_hostnames:
        allowed = params.spec.egress.allowed_hostnames
        source = f"{GatewayClassConfig.KIND} {params.name} spec.egress.allowedHostnames"
    else:
        allowed, source = (), ""

    dns: ir.DnsSettings | None = None
    if params is not None:
        default = instance_dns(settings)
        resolvers = settings.dns_resolvers or tuple((r.address, r.port) for r in params.spec.dns.resolvers)
        timeout = params.spec.dns.lookup_timeout_ms or default.lookup_timeout_ms
        dns = ir.DnsSettings(resolvers=resolvers, lookup_timeout_ms=timeout)
        dns = None if dns == default else dns
    return ClassPolicy(name, normalise_networks(denied), tuple(allowed), source, dns, problem)


def instance_dns(settings: Settings) -> ir.DnsSettings:
    """How external hostnames are resolved when their class says nothing (:attr:`weir.ir.IR.dns`)."""
    return ir.DnsSettings(resolvers=settings.dns_resolvers)


def normalise_networks(cidrs: Iterable[str]) -> tuple[str, ...]:
    """Canonical, sorted CIDRs, IPv4 first, without those inside another of the list.

    Neighbours are not merged (``::/128`` and ``::1/128`` stay two networks,
    not ``::/127``): each keeps the name a reader will look for in logs.
    """
    # Every XBackend asks with the same few lists: parse each list once.
    return _normalise_networks(tuple(cidrs))


@functools.lru_cache(maxsize=256)
def _normalise_networks(cidrs: tuple[str, ...]) -> tuple[str, ...]:
    nets = sorted(
        {ipaddress.ip_network(cidr) for cidr in cidrs},
        key=lambda n: (n.version, int(n.network_address), n.prefixlen),
    )
    kept: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for net in nets:  # a network comes after any network that contains it
        if not any(net.version == k.version and net.subnet_of(k) for k in kept):  # type: ignore[arg-type]
            kept.append(net)
    return tuple(str(net) for net in kept)


@dataclass(frozen=True)
class Decision:
    """What the policies of its users make of an external hostname.

    ``refusal``: ``(reason, message)`` for ``Accepted=False``, or ``None``;
    then ``guard`` and ``dns`` are what the upstream gets.
    """

    refusal: tuple[str, str] | None
    guard: ir.EgressGuard = field(default_factory=ir.EgressGuard)
    dns: ir.DnsSettings | None = None


def decide(hostname: str, policies: Sequence[ClassPolicy]) -> Decision:
    """Combine ``policies`` (of every class whose Gateways use the hostname's XBackend)."""
    broken = sorted(p.class_name or "" for p in policies if p.problem)
    if broken:
        return Decision(
            (
                st.R_NOT_ALLOWED,
                f"GatewayClass {', '.join(broken)} has an invalid parametersRef (see its status), "
                "so its egress policy is unknown and weir sends nothing to external hostnames "
                "through its Gateways until it is fixed",
            )
        )
    for policy in policies:
        allowed = policy.allowed_hostnames
        if allowed and not any(hostname_matches(hostname, p) for p in allowed):
            where = f"Gateways of GatewayClass {policy.class_name}" if policy.class_name else "this weir"
            return Decision(
                (
                    st.R_NOT_ALLOWED,
                    f"externalHostname {hostname!r} is not allowed for {where}: "
                    f"{policy.allowed_source} allows only {', '.join(allowed)}; "
                    "add the hostname there, or use a Gateway of a class that allows it",
                )
            )
    resolvers = {p.dns for p in policies}
    if len(resolvers) > 1:
        classes = ", ".join(sorted(p.class_name or "" for p in policies))
        return Decision(
            (
                st.R_UNSUPPORTED_VALUE,
                f"the XBackend is used by Gateways of GatewayClasses {classes}, whose "
                f"{GatewayClassConfig.KIND}s resolve external hostnames differently (spec.dns); "
                "an XBackend has one resolver: make their dns settings equal or use one XBackend per class",
            )
        )
    denied = normalise_networks(net for p in policies for net in p.denied_networks)
    return Decision(None, ir.EgressGuard(denied), resolvers.pop() if resolvers else None)


#: Who uses an XBackend, known before any backend is resolved: XBackend → the Gateways whose
#: routes resolve it (see :func:`weir.translate.users.xbackend_users`).
UsersOf = Callable[[ObjectKey], AbstractSet[ObjectKey]]


@dataclass(frozen=True)
class EgressPolicy:
    """The egress policy inputs of one translation, and who uses each XBackend.

    ``gateway_classes``: each Gateway's class name. ``policies``: each class's
    policy. ``fallback``: the policy of an XBackend no Gateway uses.
    ``users``: the Gateways using an XBackend, as far as known before
    resolution (a full pass knows them all; an incremental patch knows those
    of the routes it does not recompute). The backend resolver decides an
    XBackend's guard, or its refusal, from these when a route first resolves
    it (:meth:`decide`), so routes are built once, with the decision made.
    """

    gateway_classes: Mapping[ObjectKey, str]
    policies: Mapping[str, ClassPolicy]
    fallback: ClassPolicy
    users: UsersOf = field(default=lambda _key: frozenset())
    #: ``users`` are all of them (a full pass): the Gateways of the resolving route add nothing.
    complete: bool = False

    def decide(self, xbackend: ObjectKey, hostname: str, gateways: AbstractSet[ObjectKey]) -> Decision:
        """The decision for ``xbackend`` (external ``hostname``), used through ``gateways`` and by
        its known users (see :func:`decide`)."""
        return self.decide_for(hostname, self.users(xbackend) | gateways)

    def decide_for(self, hostname: str, users: AbstractSet[ObjectKey]) -> Decision:
        """The decision for an XBackend of ``hostname`` whose users are exactly ``users``."""
        classes = sorted({self.gateway_classes[gw] for gw in users if gw in self.gateway_classes})
        return decide(hostname, [self.policies[c] for c in classes if c in self.policies] or [self.fallback])


def egress_policy(
    resources: Resources,
    settings: Settings,
    classes: Iterable[str],
    gateways: Mapping[ObjectKey, str],
    users: UsersOf | None = None,
) -> EgressPolicy:
    """The :class:`EgressPolicy` of ``classes`` (weir's accepted GatewayClasses) and ``gateways``
    (each of weir's Gateways and its class)."""
    policies = {
        name: class_policy(resources, settings, resources.get(GatewayClass, "", name))
        for name in sorted(classes)
    }
    fallback = class_policy(resources, settings, None)
    if users is None:
        return EgressPolicy(dict(gateways), policies, fallback)
    return EgressPolicy(dict(gateways), policies, fallback, users)
