"""Gateway API ``gateway.networking.k8s.io/v1alpha2``: TCPRoute.

Field constraints follow the upstream CRD (v1.6, version ``v1alpha2``):
``rules`` holds 1 to 16 rules, each with 1 to 16 ``backendRefs`` (required),
a Service reference needs a ``port``, weights are 0 to 1,000,000. The shared
types (:class:`~weir.api.gateway_v1.ParentReference`,
:class:`~weir.api.gateway_v1.BackendRef`) are those of ``v1``, as upstream.

A TCP connection carries nothing to choose a rule by, so translation serves
TCPRoutes with exactly one rule (the ``v1`` schema allows only one); the
model still accepts what the ``v1alpha2`` CRD accepts, so the limit is
reported in the route's status rather than as an invalid object.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from weir.api.gateway_v1 import GROUP, BackendRef, ParentReference
from weir.api.meta import KubeObject, Model, SectionName

API_VERSION = f"{GROUP}/v1alpha2"


class TCPRouteRule(Model):
    name: SectionName | None = None
    backend_refs: tuple[BackendRef, ...] = Field(min_length=1, max_length=16)


class TCPRouteSpec(Model):
    parent_refs: tuple[ParentReference, ...] = Field(default=(), max_length=32)
    rules: tuple[TCPRouteRule, ...] = Field(min_length=1, max_length=16)


class TCPRoute(KubeObject):
    """Forwards the connections a TCP listener accepts to the backends of its rule."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "TCPRoute"

    spec: TCPRouteSpec
