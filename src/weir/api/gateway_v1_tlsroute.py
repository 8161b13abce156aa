"""Gateway API ``gateway.networking.k8s.io/v1``: TLSRoute.

TLSRoute is in the standard channel since Gateway API v1.5, as ``v1``; v1.6
no longer serves ``v1alpha2``, whose schema also differs (hostnames
optional, up to 16 rules), so weir reads ``v1`` only (a ``v1alpha2``
TLSRoute gets the loader's warning naming the version weir reads).
Constraints follow the upstream CRD: ``hostnames`` 1 to 1024 with its three
CEL rules, exactly one rule, 1 to 16 ``backendRefs``. Kept out of
:mod:`weir.api.gateway_v1` like BackendTLSPolicy, so that each route kind's
model can change on its own.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from weir.api.cel import CelChecked, CelRule
from weir.api.gateway_v1 import GROUP, BackendRef, ParentRefs
from weir.api.meta import Hostname, KubeObject, Model, SectionName

API_VERSION = f"{GROUP}/v1"

_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}
_RFC1123 = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$"

TLSRouteHostnames = Annotated[
    tuple[Hostname, ...],
    Field(min_length=1, max_length=1024, json_schema_extra=_ATOMIC),
    CelRule("self.all(h, !isIP(h))", "Hostnames cannot contain an IP"),
    CelRule(
        f"self.all(h, !h.contains('*') ? h.matches('{_RFC1123}') : true)",
        "Hostnames must be valid based on RFC-1123",
    ),
    CelRule(
        f"self.all(h, h.contains('*') ? (h.startsWith('*.') && h.substring(2).matches('{_RFC1123}')) : true)",
        "Wildcards on hostnames must be the first label, and the rest of hostname must be valid based on "
        "RFC-1123",
    ),
]


class TLSRouteRule(Model):
    name: SectionName | None = None
    backend_refs: tuple[BackendRef, ...] = Field(min_length=1, max_length=16, json_schema_extra=_ATOMIC)


class TLSRouteSpec(Model):
    parent_refs: ParentRefs = ()
    hostnames: TLSRouteHostnames
    rules: tuple[TLSRouteRule, ...] = Field(min_length=1, max_length=1, json_schema_extra=_ATOMIC)


class TLSRoute(CelChecked, KubeObject):
    """Routes TLS connections by the server name (SNI) of their ClientHello to the backends of its rule."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "TLSRoute"

    spec: TLSRouteSpec
