"""Gateway API ``gateway.networking.k8s.io/v1``: GRPCRoute.

In a module of its own so that :mod:`weir.api.gateway_v1` (HTTPRoute, whose
filter models this one shares) stays a size a reader can take in. The
constraints follow the upstream CRD (v1.6, standard channel); its CEL rules
are declared here as :class:`~weir.api.cel.CelRule`, word for word.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from weir.api.cel import CelChecked, CelModel, CelRule
from weir.api.gateway_v1 import (
    GROUP,
    HEADER_NAME_PATTERN,
    BackendRef,
    HTTPHeaderFilter,
    HTTPRequestMirrorFilter,
    ParentRefs,
    SessionPersistence,
)
from weir.api.listtypes import list_map
from weir.api.meta import Hostname, KubeObject, LocalObjectReference, Model, SectionName

API_VERSION = f"{GROUP}/v1"


class GRPCMethodMatch(CelModel):
    """``method``: the gRPC service and/or method (the request path is ``/<service>/<method>``)."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "has(self.type) ? has(self.service) || has(self.method) : true",
            "One or both of 'service' or 'method' must be specified",
        ),
        CelRule(
            "(!has(self.type) || self.type == 'Exact') && has(self.service) ? "
            'self.service.matches(r"""^(?i)\\.?[a-z_][a-z_0-9]*(\\.[a-z_][a-z_0-9]*)*$"""): true',
            "service must only contain valid characters (matching "
            "^(?i)\\.?[a-z_][a-z_0-9]*(\\.[a-z_][a-z_0-9]*)*$)",
        ),
        CelRule(
            "(!has(self.type) || self.type == 'Exact') && has(self.method) ? "
            'self.method.matches(r"""^[A-Za-z_][A-Za-z_0-9]*$"""): true',
            "method must only contain valid characters (matching ^[A-Za-z_][A-Za-z_0-9]*$)",
        ),
    )

    type: Literal["Exact", "RegularExpression"] = "Exact"
    service: str | None = Field(default=None, max_length=1024)
    method: str | None = Field(default=None, max_length=1024)


class GRPCHeaderMatch(Model):
    type: Literal["Exact", "RegularExpression"] = "Exact"
    name: str = Field(min_length=1, max_length=256, pattern=HEADER_NAME_PATTERN)
    value: str = Field(min_length=1, max_length=4096)


class GRPCRouteMatch(Model):
    """All conditions must hold. No ``method``: every service and method."""

    method: GRPCMethodMatch | None = None
    #: A list-map keyed by name: the API server refuses a repeated name (exact spelling; the
    #: Gateway API then ignores later entries differing only in case).
    headers: tuple[GRPCHeaderMatch, ...] = Field(
        default=(), max_length=16, json_schema_extra=list_map("name")
    )


class GRPCRouteFilter(CelModel):
    """A filter: ``type`` names it, and the field of that name (only that one) configures it."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = tuple(
        rule
        for field, kind in (
            ("requestHeaderModifier", "RequestHeaderModifier"),
            ("responseHeaderModifier", "ResponseHeaderModifier"),
            ("requestMirror", "RequestMirror"),
            ("extensionRef", "ExtensionRef"),
        )
        for rule in (
            CelRule(
                f"!(has(self.{field}) && self.type != '{kind}')",
                f"filter.{field} must be nil if the filter.type is not {kind}",
            ),
            CelRule(
                f"!(!has(self.{field}) && self.type == '{kind}')",
                f"filter.{field} must be specified for {kind} filter.type",
            ),
        )
    )

    type: Literal["ResponseHeaderModifier", "RequestHeaderModifier", "RequestMirror", "ExtensionRef"]
    request_header_modifier: HTTPHeaderFilter | None = None
    response_header_modifier: HTTPHeaderFilter | None = None
    request_mirror: HTTPRequestMirrorFilter | None = None
    extension_ref: LocalObjectReference | None = None


GRPCRouteFilters = Annotated[
    tuple[GRPCRouteFilter, ...],
    Field(max_length=16),
    CelRule(
        "self.filter(f, f.type == 'RequestHeaderModifier').size() <= 1",
        "RequestHeaderModifier filter cannot be repeated",
    ),
    CelRule(
        "self.filter(f, f.type == 'ResponseHeaderModifier').size() <= 1",
        "ResponseHeaderModifier filter cannot be repeated",
    ),
]


class GRPCBackendRef(BackendRef):
    """A backend of a GRPCRoute rule, with the filters applied to its share of requests."""

    filters: GRPCRouteFilters = ()


class GRPCRouteRule(Model):
    name: SectionName | None = None
    #: None: every gRPC request matches.
    matches: tuple[GRPCRouteMatch, ...] = Field(default=(), max_length=8)
    filters: GRPCRouteFilters = ()
    backend_refs: tuple[GRPCBackendRef, ...] = Field(default=(), max_length=16)
    session_persistence: SessionPersistence | None = None


_TOTAL_MATCHES = " + ".join(
    f"(self.size() > {i} ? (has(self[{i}].matches) ? self[{i}].matches.size() : 0) : 0)" for i in range(16)
)

GRPCRouteRules = Annotated[
    tuple[GRPCRouteRule, ...],
    Field(max_length=16),
    CelRule(
        f"{_TOTAL_MATCHES} <= 128",
        "While 16 rules and 64 matches per rule are allowed, the total number of matches across all "
        "rules in a route must be less than 128",
    ),
]


class GRPCRouteSpec(Model):
    parent_refs: ParentRefs = ()
    hostnames: tuple[Hostname, ...] = Field(default=(), max_length=16)
    rules: GRPCRouteRules = ()


class GRPCRoute(CelChecked, KubeObject):
    """Routes gRPC calls by service, method and metadata (HTTP/2 headers) to backends."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "GRPCRoute"

    spec: GRPCRouteSpec = GRPCRouteSpec()
