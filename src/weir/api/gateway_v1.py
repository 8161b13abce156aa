"""Gateway API ``gateway.networking.k8s.io/v1``: GatewayClass, Gateway, HTTPRoute.

Field constraints and defaults follow the upstream CRDs (v1.6). Where the
upstream schema carries a CEL rule that weir already needs, it is expressed as
a model validator with the API server's message.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from weir.api.meta import (
    Group,
    Hostname,
    Kind,
    KubeObject,
    Model,
    Namespace,
    ObjectName,
    PortNumber,
    SectionName,
)

GROUP = "gateway.networking.k8s.io"
API_VERSION = f"{GROUP}/v1"


# ---------------------------------------------------------------- GatewayClass


class ParametersReference(Model):
    """``spec.parametersRef``: the object configuring the class (for weir, a GatewayClassConfig)."""

    group: Group
    kind: Kind
    name: str = Field(min_length=1, max_length=253)
    namespace: Namespace | None = None


class GatewayClassSpec(Model):
    controller_name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$",
    )
    description: str | None = Field(default=None, max_length=64)
    parameters_ref: ParametersReference | None = None


class GatewayClass(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "GatewayClass"
    NAMESPACED: ClassVar[bool] = False

    spec: GatewayClassSpec


# ---------------------------------------------------------------- Gateway


class LabelSelectorRequirement(Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


class LabelSelector(Model):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


class RouteNamespaces(Model):
    from_: Literal["All", "Selector", "Same"] = Field(default="Same", alias="from")
    selector: LabelSelector | None = None


class RouteGroupKind(Model):
    group: Group = GROUP
    kind: Kind


class AllowedRoutes(Model):
    namespaces: RouteNamespaces = RouteNamespaces()
    kinds: tuple[RouteGroupKind, ...] = Field(default=(), max_length=8)


class SecretObjectReference(Model):
    group: Group = ""
    kind: Kind = "Secret"
    name: ObjectName
    namespace: Namespace | None = None


class GatewayTLSConfig(Model):
    mode: Literal["Terminate", "Passthrough"] = "Terminate"
    certificate_refs: tuple[SecretObjectReference, ...] = Field(default=(), max_length=64)
    options: dict[str, str] = Field(default_factory=dict)


class Listener(Model):
    name: SectionName
    hostname: Hostname | None = None
    port: PortNumber
    protocol: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?$|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9]+$",
    )
    tls: GatewayTLSConfig | None = None
    allowed_routes: AllowedRoutes = AllowedRoutes()

    @model_validator(mode="after")
    def _tls_by_protocol(self) -> Listener:
        if self.protocol in ("HTTP", "TCP", "UDP") and self.tls is not None:
            raise ValueError("tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']")
        if self.protocol == "HTTPS" and self.tls is None:
            raise ValueError("tls mode must be set for protocol HTTPS")
        if self.protocol in ("HTTP", "HTTPS", "TLS") or self.hostname is None:
            return self
        raise ValueError("hostname must not be specified for protocols ['TCP', 'UDP']")


class GatewayAddress(Model):
    type: str = Field(default="IPAddress", min_length=1, max_length=253)
    value: str = Field(min_length=1, max_length=253)


class GatewaySpec(Model):
    gateway_class_name: ObjectName
    listeners: tuple[Listener, ...] = Field(min_length=1, max_length=64)
    addresses: tuple[GatewayAddress, ...] = Field(default=(), max_length=16)

    @model_validator(mode="after")
    def _unique_listener_names(self) -> GatewaySpec:
        names = [listener.name for listener in self.listeners]
        if len(names) != len(set(names)):
            raise ValueError("Listener name must be unique within the Gateway")
        combos = [(lst.port, lst.protocol, lst.hostname) for lst in self.listeners]
        if len(combos) != len(set(combos)):
            raise ValueError("Combination of port, protocol and hostname must be unique for each listener")
        return self


class Gateway(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Gateway"

    spec: GatewaySpec


# ---------------------------------------------------------------- HTTPRoute


class ParentReference(Model):
    group: Group = GROUP
    kind: Kind = "Gateway"
    namespace: Namespace | None = None
    name: ObjectName
    section_name: SectionName | None = None
    port: PortNumber | None = None


class HTTPPathMatch(Model):
    type: Literal["Exact", "PathPrefix", "RegularExpression"] = "PathPrefix"
    value: str = Field(default="/", max_length=1024)

    @model_validator(mode="after")
    def _path_shape(self) -> HTTPPathMatch:
        if self.type in ("Exact", "PathPrefix"):
            if not self.value.startswith("/"):
                raise ValueError(
                    "value must be an absolute path and start with '/' when type one of "
                    "['Exact', 'PathPrefix']"
                )
            if "//" in self.value:
                raise ValueError("must not contain '//' when type one of ['Exact', 'PathPrefix']")
            for bad in ("/./", "/../", "%2f", "%2F", "#"):
                if bad in self.value:
                    raise ValueError(f"must not contain '{bad}' when type one of ['Exact', 'PathPrefix']")
            if self.value.endswith(("/..", "/.")):
                raise ValueError("must not end with '/..' or '/.' when type one of ['Exact', 'PathPrefix']")
        return self


HeaderName = str


class HTTPHeaderMatch(Model):
    type: Literal["Exact", "RegularExpression"] = "Exact"
    name: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$")
    value: str = Field(min_length=0, max_length=4096)


class HTTPQueryParamMatch(Model):
    type: Literal["Exact", "RegularExpression"] = "Exact"
    name: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$")
    value: str = Field(min_length=1, max_length=1024)


HTTPMethod = Literal["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"]


class HTTPRouteMatch(Model):
    path: HTTPPathMatch = HTTPPathMatch()
    headers: tuple[HTTPHeaderMatch, ...] = Field(default=(), max_length=16)
    query_params: tuple[HTTPQueryParamMatch, ...] = Field(default=(), max_length=16)
    method: HTTPMethod | None = None


class HTTPRouteFilter(Model):
    """A filter. Its configuration is kept as written until weir implements the filter."""

    type: Literal[
        "RequestHeaderModifier",
        "ResponseHeaderModifier",
        "RequestMirror",
        "RequestRedirect",
        "URLRewrite",
        "ExtensionRef",
        "CORS",
        "ExternalAuth",
    ]
    request_header_modifier: dict[str, Any] | None = None
    response_header_modifier: dict[str, Any] | None = None
    request_mirror: dict[str, Any] | None = None
    request_redirect: dict[str, Any] | None = None
    url_rewrite: dict[str, Any] | None = None
    extension_ref: dict[str, Any] | None = None
    cors: dict[str, Any] | None = None
    external_auth: dict[str, Any] | None = None


class BackendRef(Model):
    """Gateway API ``BackendRef``: an object to forward to, and its share of the traffic.

    ``port`` is required for Services (the upstream CRD's CEL rule, with its message).
    """

    group: Group = ""
    kind: Kind = "Service"
    name: ObjectName
    namespace: Namespace | None = None
    port: PortNumber | None = None
    weight: int = Field(default=1, ge=0, le=1_000_000, strict=True)

    @model_validator(mode="after")
    def _service_needs_port(self) -> Self:
        if self.group == "" and self.kind == "Service" and self.port is None:
            raise ValueError("Must have port for Service reference")
        return self


class HTTPBackendRef(BackendRef):
    """A backend reference of an HTTPRoute rule, with the filters applied to its share of requests."""

    filters: tuple[HTTPRouteFilter, ...] = Field(default=(), max_length=16)


class HTTPRouteTimeouts(Model):
    request: str | None = None
    backend_request: str | None = None


class HTTPRouteRule(Model):
    name: SectionName | None = None
    matches: tuple[HTTPRouteMatch, ...] = Field(default=(HTTPRouteMatch(),), max_length=64)
    filters: tuple[HTTPRouteFilter, ...] = Field(default=(), max_length=16)
    backend_refs: tuple[HTTPBackendRef, ...] = Field(default=(), max_length=16)
    timeouts: HTTPRouteTimeouts | None = None
    retry: dict[str, Any] | None = None
    session_persistence: dict[str, Any] | None = None


class HTTPRouteSpec(Model):
    parent_refs: tuple[ParentReference, ...] = Field(default=(), max_length=32)
    hostnames: tuple[Hostname, ...] = Field(default=(), max_length=16)
    rules: tuple[HTTPRouteRule, ...] = Field(default=(HTTPRouteRule(),), min_length=1, max_length=16)


class HTTPRoute(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "HTTPRoute"

    spec: HTTPRouteSpec = HTTPRouteSpec()
