"""Gateway API TCPRoute: ``gateway.networking.k8s.io/v1``, and ``v1alpha2`` as older manifests write it.

Gateway API v1.6 moved TCPRoute to the standard channel as ``v1``; its CRD
no longer serves ``v1alpha2`` (``served: false``), so on a cluster weir
watches ``v1``. The two schemas differ in one constraint: ``v1`` allows
exactly one rule, ``v1alpha2`` 1 to 16. Folders of YAML may hold either:
:class:`TCPRoute` reads ``v1`` with its constraint, :class:`TCPRouteV1Alpha2`
reads ``v1alpha2`` with its own (see :data:`weir.api.registry.OLDER_VERSIONS`),
and translation handles both as TCPRoutes (a ``v1alpha2`` route with several
rules gets the limit in its status, a TCP connection carries nothing to
choose a rule by). Otherwise constraints follow the upstream CRD: 1 to 16
``backendRefs`` (required), a Service reference needs a ``port``, weights 0
to 1,000,000. The shared types (:class:`~weir.api.gateway_v1.ParentReference`,
:class:`~weir.api.gateway_v1.BackendRef`) are those of ``v1``, as upstream.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from weir.api.cel import CelChecked
from weir.api.gateway_v1 import GROUP, BackendRef, ParentRefs
from weir.api.meta import KubeObject, Model, SectionName

API_VERSION = f"{GROUP}/v1"
API_VERSION_V1ALPHA2 = f"{GROUP}/v1alpha2"

_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}


class TCPRouteRule(Model):
    name: SectionName | None = None
    backend_refs: tuple[BackendRef, ...] = Field(min_length=1, max_length=16, json_schema_extra=_ATOMIC)


class TCPRouteSpec(Model):
    parent_refs: ParentRefs = ()
    rules: tuple[TCPRouteRule, ...] = Field(min_length=1, max_length=1, json_schema_extra=_ATOMIC)


class TCPRouteSpecV1Alpha2(TCPRouteSpec):
    rules: tuple[TCPRouteRule, ...] = Field(min_length=1, max_length=16, json_schema_extra=_ATOMIC)


class TCPRoute(CelChecked, KubeObject):
    """Forwards the connections a TCP listener accepts to the backends of its rule."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "TCPRoute"

    spec: TCPRouteSpec


class TCPRouteV1Alpha2(TCPRoute):
    """A TCPRoute written as ``v1alpha2`` (up to 16 rules); one kind with :class:`TCPRoute`."""

    API_VERSION: ClassVar[str] = API_VERSION_V1ALPHA2

    spec: TCPRouteSpecV1Alpha2
