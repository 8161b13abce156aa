"""What a conformance case is made of: requests, expected answers, expected statuses, steps.

Plain data, written as tables by the test modules and carried out by
:mod:`harness` (:func:`harness.run_case`). Names and constants of the base
world (namespaces, Gateways) live in :mod:`harness` too; this module only
needs the infra namespace as a default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from .harness import Conformance

INFRA_NS = "gateway-conformance-infra"


# ----------------------------------------------------------------------------- expectations

#: A condition expectation: a status (any reason), or (status, reason).
CondSpec = str | tuple[str, str]


@dataclass(frozen=True)
class RouteStatus:
    """The route's parent entry for ``gateway`` (written by weir) must have these conditions.

    ``absent=True``: weir must have no entry for that Gateway at all.
    """

    name: str
    conditions: Mapping[str, CondSpec] = field(
        default_factory=lambda: {"Accepted": "True", "ResolvedRefs": "True"}
    )
    kind: str = "HTTPRoute"
    namespace: str = INFRA_NS
    gateway: str = "same-namespace"
    gateway_namespace: str = INFRA_NS
    section: str | None = None
    generation: int | None = None
    absent: bool = False


@dataclass(frozen=True)
class ListenerStatus:
    conditions: Mapping[str, CondSpec] = field(default_factory=dict)
    attached: int | None = None
    #: Route kinds ``supportedKinds`` must include (an implementation may support more, as
    #: upstream's check allows: an HTTP listener may also take GRPCRoutes).
    kinds: tuple[str, ...] | None = None
    #: Route kinds ``supportedKinds`` must be, exactly (in any order).
    only_kinds: tuple[str, ...] | None = None


@dataclass(frozen=True)
class GatewayStatus:
    name: str
    conditions: Mapping[str, CondSpec] = field(default_factory=dict)
    listeners: Mapping[str, ListenerStatus] = field(default_factory=dict)
    namespace: str = INFRA_NS
    #: When set, the status must list exactly these listeners.
    only_listeners: tuple[str, ...] | None = None
    #: When set, ``status.addresses`` must hold exactly these values.
    addresses: tuple[str, ...] | None = None
    generation: int | None = None
    #: ``ListenerSet``: the same checks of a ListenerSet's status (it has the Gateway's shape).
    kind: str = "Gateway"
    #: When set, ``status.attachedListenerSets`` must be this.
    attached_listener_sets: int | None = None


@dataclass(frozen=True)
class PolicyStatus:
    """A policy's ``status.ancestors`` entry (written by weir) for a Gateway."""

    kind: str
    name: str
    conditions: Mapping[str, CondSpec]
    namespace: str = INFRA_NS
    gateway: str = "same-namespace"
    gateway_namespace: str = INFRA_NS
    generation: int | None = None


@dataclass(frozen=True)
class ObjectStatus:
    """An object's own ``status.conditions`` (a GatewayClass, for instance)."""

    kind: str
    name: str
    conditions: Mapping[str, CondSpec]
    namespace: str = ""
    generation: int | None = None


StatusCheck = RouteStatus | GatewayStatus | PolicyStatus | ObjectStatus


@dataclass(frozen=True)
class Request:
    """A request sent to a Gateway listener (through its own loopback address).

    ``port`` is the listener port as the manifests say it (see
    :meth:`Conformance.listener_port`). ``host`` is the Host header
    (``:authority``); with ``scheme="https"`` the TLS SNI is ``sni`` or,
    by default, ``host`` without a port.
    """

    host: str = ""
    path: str = "/"
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    gateway: str = "same-namespace"
    gateway_namespace: str = INFRA_NS
    port: int = 80
    scheme: Literal["http", "https"] = "http"
    sni: str | None = None
    http2: bool = False
    body: bytes | None = None
    #: With ``scheme="https"``: the client certificate presented (a key of
    #: :data:`~tests.conformance.harness.CLIENT_CERTIFICATES`), or none.
    client_cert: str | None = None
    #: Not HTTP: this one datagram is sent to a UDP listener, and the datagram that answers
    #: (a UDP pod's JSON) is compared with ``Expect`` as the body of a 200 would be.
    datagram: bytes | None = None

    def describe(self) -> str:
        extra = f" headers={list(self.headers)}" if self.headers else ""
        if self.datagram is not None:
            where = f"{self.gateway_namespace}/{self.gateway}:{self.port}"
            return f"UDP datagram {self.datagram!r} via Gateway {where}"
        return (
            f"{self.method} {self.scheme}://{self.host or '<gateway address>'}{self.path} "
            f"via Gateway {self.gateway_namespace}/{self.gateway}:{self.port}{extra}"
        )


@dataclass(frozen=True)
class Seen:
    """What the backend must have received (``None``: not checked)."""

    path: str | None = None
    host: str | None = None
    method: str | None = None
    proto: str | None = None
    sni: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    absent_headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Redirect:
    """An expected ``Location``. ``port=None``: none written (the scheme's default);
    ``listener_port=True``: ``port`` is a listener port (mapped like requests')."""

    host: str
    path: str = "/"
    scheme: str = "http"
    port: int | None = None
    listener_port: bool = False


@dataclass(frozen=True)
class Expect:
    """The expected answer. ``backend``: the Service whose pod must answer (namespace ``namespace``).

    ``error=True``: the request must fail below HTTP (refused connection, TLS failure).
    ``server_error=True``: any 5xx status will do (the specification asks for no particular one);
    ``statuses``: any of these will do. ``header_choices``: the header must be one of the choices,
    compared as lists of comma-separated items in any order, whitespace ignored (``a, b`` = ``b,a``).
    """

    status: int = 200
    backend: str | None = None
    namespace: str = INFRA_NS
    seen: Seen | None = None
    headers: tuple[tuple[str, str], ...] = ()
    absent_headers: tuple[str, ...] = ()
    redirect: Redirect | None = None
    error: bool = False
    server_error: bool = False
    statuses: tuple[int, ...] = ()
    header_choices: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Exchange:
    request: Request
    expect: Expect


def ok(
    host: str,
    path: str,
    backend: str,
    namespace: str = INFRA_NS,
    *,
    gateway: str = "same-namespace",
    headers: tuple[tuple[str, str], ...] = (),
    method: str = "GET",
    seen: Seen | None = None,
) -> Exchange:
    """A request that ``backend`` (a Service in ``namespace``) must answer with 200."""
    return Exchange(
        Request(host=host, path=path, gateway=gateway, headers=headers, method=method),
        Expect(backend=backend, namespace=namespace, seen=seen),
    )


def status(
    host: str,
    path: str,
    code: int,
    *,
    gateway: str = "same-namespace",
    headers: tuple[tuple[str, str], ...] = (),
    method: str = "GET",
) -> Exchange:
    """A request the gateway itself must answer with ``code`` (404: no route, 500: no usable backend)."""
    return Exchange(
        Request(host=host, path=path, gateway=gateway, headers=headers, method=method), Expect(status=code)
    )


Manifests = str | Callable[["Conformance"], str]


def single_rule_route(kind: str, name: str, parent: str, backend: str, namespace: str = INFRA_NS) -> str:
    """A YAML document (after ``---``) of a ``kind`` route (TCPRoute, UDPRoute, ...) with one
    parentRef and one rule of one backendRef; ``parent`` and ``backend`` are flow-mapping bodies
    such as ``name: gw, port: 9300``."""
    return f"""
---
apiVersion: gateway.networking.k8s.io/v1
kind: {kind}
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  parentRefs: [{{{parent}}}]
  rules: [{{backendRefs: [{{{backend}}}]}}]
"""


@dataclass(frozen=True)
class Step:
    """A later state of a case: its manifests replace the previous ones (same file), then checks."""

    manifests: Manifests
    statuses: tuple[StatusCheck, ...] = ()
    exchanges: tuple[Exchange, ...] = ()


@dataclass(frozen=True)
class Case:
    """One conformance case: ``name`` is the upstream test's short name.

    ``pending`` names the feature when weir does not implement it yet: the
    case is then an xfail (strict) until it passes.
    """

    name: str
    #: YAML; a callable gets the harness (for what only a running world knows, like pod addresses).
    manifests: Manifests
    statuses: tuple[StatusCheck, ...] = ()
    exchanges: tuple[Exchange, ...] = ()
    #: Edits applied in order after the first state was checked.
    steps: tuple[Step, ...] = ()
    pending: str | None = None

    @property
    def file(self) -> str:
        return "case-" + "".join("-" + c.lower() if c.isupper() else c for c in self.name).lstrip("-")

    def param(self) -> Any:
        return pytest.param(self, id=self.name, marks=pending_marks(self.pending))


def pending_marks(feature: str | None) -> list[pytest.MarkDecorator]:
    """The xfail mark for a case whose feature weir does not implement yet (none if it does)."""
    if feature is None:
        return []
    # Only a failed expectation counts: a crash of the harness must not pass for "not implemented".
    return [pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"not implemented yet: {feature}")]


def params(cases: Sequence[Case]) -> list[Any]:
    names = [c.name for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    assert not duplicates, f"duplicate case names: {duplicates}"
    return [c.param() for c in cases]
