"""Gateway API ``gateway.networking.k8s.io/v1``: GatewayClass, Gateway, HTTPRoute.

Field constraints and defaults follow the upstream CRDs (v1.6). Where the
upstream schema carries a CEL rule that weir already needs, it is expressed as
a model validator with the API server's message (HTTPRoute's filters,
timeouts and retry carry all of theirs: a rule on a list is an
``AfterValidator`` on that field, so the error names the list, as the API
server does).
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    Field,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from weir.api.cel import CelChecked, CelRule
from weir.api.listtypes import LIST_SET, ObjectError, list_map
from weir.api.meta import (
    AnnotationValue,
    Group,
    Hostname,
    Kind,
    KubeObject,
    LabelValue,
    LocalObjectReference,
    Model,
    Namespace,
    ObjectName,
    PortNumber,
    PreciseHostname,
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
    """A listener's ``tls`` (``ListenerTLSConfig`` upstream)."""

    mode: Literal["Terminate", "Passthrough"] = "Terminate"
    certificate_refs: tuple[SecretObjectReference, ...] = Field(default=(), max_length=64)
    options: dict[str, AnnotationValue] = Field(default_factory=dict, max_length=16)

    @model_validator(mode="after")
    def _terminate_needs_certificates(self) -> GatewayTLSConfig:
        if self.mode == "Terminate" and not self.certificate_refs and not self.options:
            raise ValueError("certificateRefs or options must be specified when mode is Terminate")
        return self


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
        # The upstream rules (v1.6 CRD), core protocol names compared case-insensitively as
        # the specification requires. HTTPS without tls passes them: translation refuses it.
        protocol = self.protocol.upper()
        if protocol in ("HTTP", "TCP", "UDP") and self.tls is not None:
            raise ValueError("tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']")
        if protocol == "HTTPS" and self.tls is not None and self.tls.mode != "Terminate":
            raise ValueError("tls mode must be Terminate for protocol HTTPS")
        if protocol == "TLS" and self.tls is None:
            raise ValueError("tls mode must be set for protocol TLS")
        if protocol in ("TCP", "UDP") and self.hostname is not None:
            # Only these two: a listener of an implementation-specific protocol may have one.
            raise ValueError("hostname must not be specified for protocols ['TCP', 'UDP']")
        return self


#: Gateway API ``AddressType``: a core type, or a domain-prefixed one. Upstream's pattern, as
#: written: its alternatives are not grouped, so ``^`` and ``$`` bind to the first and the last.
ADDRESS_TYPE_PATTERN = (
    r"^Hostname|IPAddress|NamedAddress|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$"
)
_HOSTNAME_VALUE = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def ip_format(value: str) -> str | None:
    """``ipv4`` or ``ipv6`` if ``value`` is one in the OpenAPI formats' sense, else ``None``.

    As the API server checks them (measured on kube-apiserver v1.32): IPv4 is
    a dotted quad whose parts may have leading zeros (``01.2.3.4`` passes,
    Kubernetes' "sloppy" parser); IPv6 has a ``:`` and no zone or prefix length.
    """
    parts = value.split(".")
    if len(parts) == 4 and all(p.isascii() and p.isdigit() and int(p) <= 255 for p in parts):
        return "ipv4"
    if ":" not in value or "%" in value or "/" in value:
        return None
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return None
    return "ipv6"


class GatewayAddress(Model):
    """``spec.addresses[]``: an ``IPAddress`` value is an IPv4 or IPv6 address (the CRD's
    ``oneOf``/``anyOf`` of formats); a ``Hostname`` value matches the hostname pattern (CEL)."""

    type: str = Field(default="IPAddress", min_length=1, max_length=253, pattern=ADDRESS_TYPE_PATTERN)
    #: May be left out: the implementation is to assign one (weir does not; see translation).
    value: str | None = Field(default=None, max_length=253)

    @field_validator("value", mode="after")
    @classmethod
    def _ip_by_type(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("type") == "IPAddress" and ip_format(value) is None:
            # The API server reports the first format of the anyOf that fails.
            raise PydanticCustomError("format", "must be of type ipv4: {shown}", {"shown": json.dumps(value)})
        return value

    @model_validator(mode="after")
    def _hostname_value(self) -> Self:
        if self.type == "Hostname" and self.value is not None and not _HOSTNAME_VALUE.match(self.value):
            raise ValueError(
                "Hostname value must be empty or contain only valid characters (matching "
                "^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$)"
            )
        return self


def _unique_addresses(addresses: tuple[GatewayAddress, ...]) -> list[str]:
    """The messages of ``spec.addresses``' two uniqueness rules that fail."""
    out = []
    for kind in ("IPAddress", "Hostname"):
        values = [a.value for a in addresses if a.type == kind and a.value is not None]
        if len(values) != len(set(values)):
            out.append(f"{kind} values must be unique")
    return out


_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?"
    r"[A-Za-z0-9]$"
)


def _key_rules(what: str) -> tuple[CelRule, CelRule]:
    """The two rules on the keys of ``spec.infrastructure.labels`` / ``annotations``."""
    return (
        CelRule(
            f'self.all(key, key.matches(r"""{_KEY_PATTERN}"""))',
            f"{what.capitalize()} keys must be in the form of an optional DNS subdomain prefix followed by "
            "a required name segment of up to 63 characters.",
        ),
        CelRule(
            'self.all(key, key.split("/")[0].size() < 253)',
            f"If specified, the {what} key's prefix must be a DNS subdomain not longer than 253 characters "
            "in total.",
        ),
    )


class LocalParametersReference(Model):
    group: Group
    kind: Kind
    name: str = Field(min_length=1, max_length=253)


class GatewayInfrastructure(Model):
    """``spec.infrastructure``, validated as the API server does: labels and annotations for what
    the implementation creates for the Gateway (with ``--gateway-services``, the Gateway's Service:
    :mod:`weir.infrastructure`; by default weir creates nothing per Gateway), and
    parameters of its own (weir reads none: see :mod:`weir.translate.gateways` for the
    ``InvalidParameters`` refusal)."""

    labels: Annotated[dict[str, LabelValue], Field(max_length=8), *_key_rules("label")] | None = None
    annotations: (
        Annotated[dict[str, AnnotationValue], Field(max_length=16), *_key_rules("annotation")] | None
    ) = None
    parameters_ref: LocalParametersReference | None = None


class ObjectReference(Model):
    """A reference to an object of any kind, in the referrer's namespace unless ``namespace`` says."""

    group: Group
    kind: Kind
    name: ObjectName
    namespace: Namespace | None = None


class FrontendTLSValidation(Model):
    """How client certificates are validated: trust anchors, and whether failing clients still get in."""

    ca_certificate_refs: tuple[ObjectReference, ...] = Field(
        min_length=1, max_length=8, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )
    mode: Literal["AllowValidOnly", "AllowInsecureFallback"] = "AllowValidOnly"


class FrontendTLSSettings(Model):
    """``TLSConfig`` upstream: what applies to the HTTPS listeners of a port (or of every port)."""

    validation: FrontendTLSValidation | None = None


class FrontendTLSPort(Model):
    """``TLSPortConfig`` upstream: the settings of the HTTPS listeners on ``port``."""

    port: PortNumber
    tls: FrontendTLSSettings


class FrontendTLSConfig(Model):
    """``spec.tls.frontend``: client certificate validation on HTTPS listeners, by port."""

    default: FrontendTLSSettings
    per_port: tuple[FrontendTLSPort, ...] = Field(default=(), max_length=64)

    @model_validator(mode="after")
    def _unique_ports(self) -> FrontendTLSConfig:
        ports = [p.port for p in self.per_port]
        if len(ports) != len(set(ports)):
            raise ValueError("Port for TLS configuration must be unique within the Gateway")
        return self

    def for_port(self, port: int) -> FrontendTLSSettings:
        """The settings of the HTTPS listeners on ``port``: its own entry, else the default."""
        for entry in self.per_port:
            if entry.port == port:
                return entry.tls
        return self.default


class GatewayBackendTLS(Model):
    """``spec.tls.backend``: the client certificate the Gateway presents when it connects to a
    backend over TLS (one a BackendTLSPolicy makes TLS)."""

    client_certificate_ref: SecretObjectReference | None = None


class GatewaySpecTLS(Model):
    """``spec.tls`` (``GatewayTLSConfig`` upstream)."""

    frontend: FrontendTLSConfig | None = None
    backend: GatewayBackendTLS | None = None


class ListenerNamespaces(Model):
    """``spec.allowedListeners.namespaces``: where ListenerSets may attach from (none by default)."""

    from_: Literal["All", "Selector", "Same", "None"] = Field(default="None", alias="from")
    selector: LabelSelector | None = None


class AllowedListeners(Model):
    """``spec.allowedListeners``: which ListenerSets may add listeners to the Gateway."""

    namespaces: ListenerNamespaces = ListenerNamespaces()


def unique_listeners(listeners: tuple[Listener, ...], *, fold_case: bool = False) -> tuple[Listener, ...]:
    """The upstream CRDs' uniqueness rules over a list of listeners (a list-map keyed by name);
    ``fold_case``: protocols compared case-insensitively (ListenerSet's rule does, the Gateway's
    does not)."""
    names = [listener.name for listener in listeners]
    if len(names) != len(set(names)):
        raise ValueError("Listener name must be unique within the Gateway")
    combos = [
        (lst.port, lst.protocol.lower() if fold_case else lst.protocol, lst.hostname) for lst in listeners
    ]
    if len(combos) != len(set(combos)):
        raise ValueError("Combination of port, protocol and hostname must be unique for each listener")
    return listeners


class GatewaySpec(Model):
    gateway_class_name: ObjectName
    listeners: Annotated[
        tuple[Listener, ...],
        Field(min_length=1, max_length=64, json_schema_extra=list_map("name")),
        AfterValidator(unique_listeners),
    ]
    addresses: tuple[GatewayAddress, ...] = Field(default=(), max_length=16)
    infrastructure: GatewayInfrastructure | None = None
    tls: GatewaySpecTLS | None = None
    allowed_listeners: AllowedListeners | None = None


class Gateway(CelChecked, KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Gateway"

    spec: GatewaySpec

    def object_errors(self) -> list[ObjectError]:
        # The uniqueness rules on spec.addresses (CEL on the list: both are reported).
        addresses = self.spec.addresses
        found = [(("spec", "addresses"), "cel", m, "array") for m in _unique_addresses(addresses)]
        return [*super().object_errors(), *found]


# ---------------------------------------------------------------- HTTPRoute


class ParentReference(Model):
    group: Group = GROUP
    kind: Kind = "Gateway"
    namespace: Namespace | None = None
    name: ObjectName
    section_name: SectionName | None = None
    port: PortNumber | None = None


#: ``CommonRouteSpec.parentRefs``: the same parent (group, kind, namespace, name; an unset and an
#: empty namespace are the same) may be named more than once only when every such reference sets
#: ``sectionName``, each to a value no other one repeats. These are the rules of the v1.6.1
#: standard-channel CRDs, word for word (read from upstream's CRD files of that release), although
#: ``port`` is a standard field there: two references told apart by ``port`` alone are refused.
#: The experimental channel's rules read "sectionName or port" and also accept those (and refuse
#: a ``port`` set on one reference to a parent but not on another); weir follows the standard
#: channel, the release's default install.
_SAME_PARENT = (
    "p1.group == p2.group && p1.kind == p2.kind && p1.name == p2.name && "
    "(((!has(p1.__namespace__) || p1.__namespace__ == '') && "
    "(!has(p2.__namespace__) || p2.__namespace__ == '')) "
    "|| (has(p1.__namespace__) && has(p2.__namespace__) && p1.__namespace__ == p2.__namespace__ ))"
)
ParentRefs = Annotated[
    tuple[ParentReference, ...],
    Field(max_length=32),
    CelRule(
        f"self.all(p1, self.all(p2, {_SAME_PARENT} ? "
        "((!has(p1.sectionName) || p1.sectionName == '') == "
        "(!has(p2.sectionName) || p2.sectionName == '')) : true))",
        "sectionName must be specified when parentRefs includes 2 or more references to the same parent",
    ),
    CelRule(
        f"self.all(p1, self.exists_one(p2, {_SAME_PARENT} && "
        "(((!has(p1.sectionName) || p1.sectionName == '') && (!has(p2.sectionName) || p2.sectionName == '')) "
        "|| (has(p1.sectionName) && has(p2.sectionName) && p1.sectionName == p2.sectionName))))",
        "sectionName must be unique when parentRefs includes 2 or more references to the same parent",
    ),
]


#: The characters a path of type Exact or PathPrefix may hold (RFC 3986 pchar, and '/').
_PATH_CHARACTERS = re.compile(r"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$")


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
            for end in ("/..", "/."):
                if self.value.endswith(end):
                    raise ValueError(f"must not end with '{end}' when type one of ['Exact', 'PathPrefix']")
            if not _PATH_CHARACTERS.match(self.value):
                raise ValueError(
                    f"must only contain valid characters (matching {_PATH_CHARACTERS.pattern}) "
                    "for types ['Exact', 'PathPrefix']"
                )
        return self


HeaderName = str
#: Gateway API ``HeaderName`` (header and query parameter names).
HEADER_NAME_PATTERN = r"^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$"


class HTTPHeaderMatch(Model):
    type: Literal["Exact", "RegularExpression"] = "Exact"
    name: str = Field(min_length=1, max_length=256, pattern=HEADER_NAME_PATTERN)
    value: str = Field(min_length=1, max_length=4096)


class HTTPQueryParamMatch(Model):
    type: Literal["Exact", "RegularExpression"] = "Exact"
    name: str = Field(min_length=1, max_length=256, pattern=HEADER_NAME_PATTERN)
    value: str = Field(min_length=1, max_length=1024)


HTTPMethod = Literal["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"]


class HTTPRouteMatch(Model):
    path: HTTPPathMatch = HTTPPathMatch()
    headers: tuple[HTTPHeaderMatch, ...] = Field(
        default=(), max_length=16, json_schema_extra=list_map("name")
    )
    query_params: tuple[HTTPQueryParamMatch, ...] = Field(
        default=(), max_length=16, json_schema_extra=list_map("name")
    )
    method: HTTPMethod | None = None


class HTTPHeader(Model):
    """A header name and value (``HTTPHeader``) for the header modifier filters."""

    name: str = Field(min_length=1, max_length=256, pattern=HEADER_NAME_PATTERN)
    value: str = Field(min_length=1, max_length=4096)


class HTTPHeaderFilter(Model):
    """``requestHeaderModifier`` / ``responseHeaderModifier``: set, add and remove headers.

    Only one action per header name (case-insensitive) is permitted; the API
    server does not check it across lists, translation does.
    """

    set: tuple[HTTPHeader, ...] = Field(default=(), max_length=16, json_schema_extra=list_map("name"))
    add: tuple[HTTPHeader, ...] = Field(default=(), max_length=16, json_schema_extra=list_map("name"))
    remove: tuple[str, ...] = Field(default=(), max_length=16, json_schema_extra=LIST_SET)


class HTTPPathModifier(Model):
    """A path redirect or rewrite: the whole path, or the part the rule's ``PathPrefix`` matched."""

    type: Literal["ReplaceFullPath", "ReplacePrefixMatch"]
    replace_full_path: str | None = Field(default=None, max_length=1024)
    replace_prefix_match: str | None = Field(default=None, max_length=1024)

    @model_validator(mode="after")
    def _value_by_type(self) -> Self:
        if self.type == "ReplaceFullPath" and self.replace_full_path is None:
            raise ValueError("replaceFullPath must be specified when type is set to 'ReplaceFullPath'")
        if self.replace_full_path is not None and self.type != "ReplaceFullPath":
            raise ValueError("type must be 'ReplaceFullPath' when replaceFullPath is set")
        if self.type == "ReplacePrefixMatch" and self.replace_prefix_match is None:
            raise ValueError("replacePrefixMatch must be specified when type is set to 'ReplacePrefixMatch'")
        if self.replace_prefix_match is not None and self.type != "ReplacePrefixMatch":
            raise ValueError("type must be 'ReplacePrefixMatch' when replacePrefixMatch is set")
        return self


class HTTPRequestRedirectFilter(Model):
    """``requestRedirect``: answer with a redirect; unset parts of ``Location`` come from the request."""

    scheme: Literal["http", "https"] | None = None
    hostname: PreciseHostname | None = None
    path: HTTPPathModifier | None = None
    port: PortNumber | None = None
    status_code: Literal[301, 302, 303, 307, 308] = 302


class HTTPURLRewriteFilter(Model):
    """``urlRewrite``: change the Host and/or the path of the request before it is forwarded."""

    hostname: PreciseHostname | None = None
    path: HTTPPathModifier | None = None


class Fraction(Model):
    numerator: int = Field(ge=0, strict=True)
    denominator: int = Field(default=100, ge=1, strict=True)

    @model_validator(mode="after")
    def _proper(self) -> Self:
        if self.numerator > self.denominator:
            raise ValueError("numerator must be less than or equal to denominator")
        return self


class BackendObjectReference(Model):
    """Gateway API ``BackendObjectReference``: an object requests can be sent to.

    ``port`` is required for Services (the upstream CRD's CEL rule, with its message).
    """

    group: Group = ""
    kind: Kind = "Service"
    name: ObjectName
    namespace: Namespace | None = None
    port: PortNumber | None = None

    @model_validator(mode="after")
    def _service_needs_port(self) -> Self:
        if self.group == "" and self.kind == "Service" and self.port is None:
            raise ValueError("Must have port for Service reference")
        return self


class HTTPRequestMirrorFilter(Model):
    """``requestMirror``: send a copy of a share of requests to ``backendRef``, ignore its answers."""

    backend_ref: BackendObjectReference
    percent: int | None = Field(default=None, ge=0, le=100, strict=True)
    fraction: Fraction | None = None

    @model_validator(mode="after")
    def _one_share(self) -> Self:
        if self.percent is not None and self.fraction is not None:
            raise ValueError("Only one of percent or fraction may be specified in HTTPRequestMirrorFilter")
        return self


#: ``CORSOrigin``: ``*``, or ``scheme://host[:port]`` where the host may hold ``*`` wildcards.
CORS_ORIGIN_PATTERN = r"(^\*$)|(^([a-zA-Z][a-zA-Z0-9+\-.]+):\/\/([^:/?#]+)(:([0-9]{1,5}))?$)"
CORSOrigin = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=CORS_ORIGIN_PATTERN)]
HTTPMethodWithWildcard = Literal[
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "*"
]
HTTPHeaderName = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=HEADER_NAME_PATTERN)]


def _alone(what: str, others: str) -> Any:
    """The upstream CEL rule ``!('*' in self && self.size() > 1)`` on a list, with its message."""

    def check(values: tuple[str, ...]) -> tuple[str, ...]:
        if "*" in values and len(values) > 1:
            raise ValueError(f"{what} cannot contain '*' alongside other {others}")
        return values

    return AfterValidator(check)


class HTTPCORSFilter(Model):
    """``cors``: answer CORS preflights and add CORS headers to responses (Gateway API v1.6)."""

    allow_origins: Annotated[tuple[CORSOrigin, ...], _alone("AllowOrigins", "origins")] = Field(
        default=(), max_length=64, json_schema_extra=LIST_SET
    )
    allow_credentials: bool | None = Field(default=None, strict=True)
    allow_methods: Annotated[tuple[HTTPMethodWithWildcard, ...], _alone("AllowMethods", "methods")] = Field(
        default=(), max_length=9, json_schema_extra=LIST_SET
    )
    # The upstream message says "methods" here too.
    allow_headers: Annotated[tuple[HTTPHeaderName, ...], _alone("AllowHeaders", "methods")] = Field(
        default=(), max_length=64, json_schema_extra=LIST_SET
    )
    expose_headers: tuple[HTTPHeaderName, ...] = Field(default=(), max_length=64, json_schema_extra=LIST_SET)
    max_age: int = Field(default=5, ge=1, strict=True)


class HTTPRouteFilter(Model):
    """A filter: ``type`` names it, and the field of that name (only that one) configures it.

    ``ExternalAuth`` is kept as written (weir does not implement it).
    """

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
    request_header_modifier: HTTPHeaderFilter | None = None
    response_header_modifier: HTTPHeaderFilter | None = None
    request_mirror: HTTPRequestMirrorFilter | None = None
    request_redirect: HTTPRequestRedirectFilter | None = None
    url_rewrite: HTTPURLRewriteFilter | None = None
    extension_ref: LocalObjectReference | None = None
    cors: HTTPCORSFilter | None = None
    external_auth: dict[str, Any] | None = None

    #: filter type -> (attribute, JSON name), in the order of the upstream CEL rules.
    FIELDS: ClassVar[dict[str, tuple[str, str]]] = {
        "CORS": ("cors", "cors"),
        "RequestHeaderModifier": ("request_header_modifier", "requestHeaderModifier"),
        "ResponseHeaderModifier": ("response_header_modifier", "responseHeaderModifier"),
        "RequestMirror": ("request_mirror", "requestMirror"),
        "RequestRedirect": ("request_redirect", "requestRedirect"),
        "URLRewrite": ("url_rewrite", "urlRewrite"),
        "ExternalAuth": ("external_auth", "externalAuth"),
        "ExtensionRef": ("extension_ref", "extensionRef"),
    }

    @model_validator(mode="after")
    def _config_matches_type(self) -> Self:
        for kind, (attr, json_name) in self.FIELDS.items():
            present = getattr(self, attr) is not None
            if present and self.type != kind:
                raise ValueError(f"filter.{json_name} must be nil if the filter.type is not {kind}")
            if not present and self.type == kind:
                raise ValueError(f"filter.{json_name} must be specified for {kind} filter.type")
        return self


def _check_filters(filters: tuple[HTTPRouteFilter, ...]) -> tuple[HTTPRouteFilter, ...]:
    """The upstream CEL rules on a ``filters`` list (of a rule or of a backendRef), with their messages."""
    types = [f.type for f in filters]
    if "RequestRedirect" in types and "URLRewrite" in types:
        raise ValueError(
            "May specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both"
        )
    for kind in ("CORS", "RequestHeaderModifier", "ResponseHeaderModifier", "RequestRedirect", "URLRewrite"):
        if types.count(kind) > 1:
            raise ValueError(f"{kind} filter cannot be repeated")
    return filters


HTTPRouteFilters = Annotated[tuple[HTTPRouteFilter, ...], AfterValidator(_check_filters)]


class BackendRef(BackendObjectReference):
    """Gateway API ``BackendRef``: an object to forward to, and its share of the traffic."""

    weight: int = Field(default=1, ge=0, le=1_000_000, strict=True)


class HTTPBackendRef(BackendRef):
    """A backend reference of an HTTPRoute rule, with the filters applied to its share of requests."""

    filters: HTTPRouteFilters = Field(default=(), max_length=16)


#: Gateway API ``Duration`` (GEP-2257): a strict subset of Go's ``time.ParseDuration``.
DURATION_PATTERN = r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"
Duration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN)]
_DURATION_PART = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_DURATION_MS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}


def duration_ms(value: str) -> int:
    """Milliseconds in a :data:`Duration` (already validated), e.g. ``1m30s`` → 90000."""
    return sum(int(number) * _DURATION_MS[unit] for number, unit in _DURATION_PART.findall(value))


class HTTPRouteTimeouts(Model):
    """``timeouts``: ``request`` bounds the whole exchange, ``backendRequest`` each try; ``0s``: none."""

    request: Duration | None = None
    backend_request: Duration | None = None

    @model_validator(mode="after")
    def _backend_within_request(self) -> Self:
        if self.request is None or self.backend_request is None:
            return self
        request = duration_ms(self.request)
        if request != 0 and duration_ms(self.backend_request) > request:
            raise ValueError("backendRequest timeout cannot be longer than request timeout")
        return self


class HTTPRouteRetry(Model):
    """``retry`` (Gateway API v1.6): which answers to retry, how many times, and the backoff."""

    codes: tuple[Annotated[int, Field(ge=400, le=599, strict=True)], ...] = Field(
        default=(), json_schema_extra=LIST_SET
    )
    attempts: int | None = Field(default=None, ge=1, strict=True)
    backoff: Duration | None = None


#: The upstream CEL messages of HTTPRouteRule for ReplacePrefixMatch, word for word:
#: (filter kind, in a backendRef's filters) -> message.
_PREFIX_MESSAGES = {
    ("RequestRedirect", False): "When using RequestRedirect filter with path.replacePrefixMatch, "
    "exactly one PathPrefix match must be specified",
    ("URLRewrite", False): "When using URLRewrite filter with path.replacePrefixMatch, "
    "exactly one PathPrefix match must be specified",
    ("RequestRedirect", True): "Within backendRefs, when using RequestRedirect filter with "
    "path.replacePrefixMatch, exactly one PathPrefix match must be specified",
    ("URLRewrite", True): "Within backendRefs, When using URLRewrite filter with "
    "path.replacePrefixMatch, exactly one PathPrefix match must be specified",
}


def _replaces_prefix(filters: tuple[HTTPRouteFilter, ...], kind: str) -> bool:
    """CEL ``filters.exists_one(f, f.<kind>.path.type == 'ReplacePrefixMatch' ...)``."""
    found = 0
    for f in filters:
        config = f.request_redirect if kind == "RequestRedirect" else f.url_rewrite
        if (
            config is not None
            and config.path is not None
            and config.path.type == "ReplacePrefixMatch"
            and config.path.replace_prefix_match is not None
        ):
            found += 1
    return found == 1


class CookieConfig(Model):
    """``sessionPersistence.cookieConfig``: a session cookie (gone with the browser) or a permanent one."""

    lifetime_type: Literal["Permanent", "Session"] = "Session"


class SessionPersistence(Model):
    """A rule's ``sessionPersistence``: requests of one session go to the endpoint that served the first.

    The session is carried in a cookie weir sets (``Cookie``) or in a header
    the backend hands out and clients send back (``Header``), named
    ``sessionName``. ``absoluteTimeout`` bounds a permanent cookie's life.
    """

    session_name: str | None = Field(default=None, max_length=128)
    absolute_timeout: Duration | None = None
    #: Not a field of Gateway API v1.6.1 (earlier experimental releases had it): an API server
    #: drops it, whatever it holds, so loading takes any value; translation reports it unsupported.
    idle_timeout: Annotated[object, WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True})] = None
    type: Literal["Cookie", "Header"] = "Cookie"
    cookie_config: CookieConfig | None = None

    @model_validator(mode="after")
    def _permanent_needs_timeout(self) -> Self:
        permanent = self.cookie_config is not None and self.cookie_config.lifetime_type == "Permanent"
        if permanent and self.absolute_timeout is None:
            raise ValueError("AbsoluteTimeout must be specified when cookie lifetimeType is Permanent")
        if self.cookie_config is not None and self.type != "Cookie":
            raise ValueError("cookieConfig can only be set with type Cookie")
        return self


class HTTPRouteRule(Model):
    name: SectionName | None = None
    matches: tuple[HTTPRouteMatch, ...] = Field(default=(HTTPRouteMatch(),), max_length=64)
    filters: HTTPRouteFilters = Field(default=(), max_length=16)
    backend_refs: tuple[HTTPBackendRef, ...] = Field(default=(), max_length=16)
    timeouts: HTTPRouteTimeouts | None = None
    retry: HTTPRouteRetry | None = None
    session_persistence: SessionPersistence | None = None

    @model_validator(mode="after")
    def _filters_fit_rule(self) -> Self:
        if self.backend_refs and any(f.request_redirect is not None for f in self.filters):
            raise ValueError("RequestRedirect filter must not be used together with backendRefs")
        one_prefix = len(self.matches) == 1 and self.matches[0].path.type == "PathPrefix"
        if one_prefix:
            return self
        for kind in ("RequestRedirect", "URLRewrite"):
            if _replaces_prefix(self.filters, kind):
                raise ValueError(_PREFIX_MESSAGES[(kind, False)])
        for kind in ("RequestRedirect", "URLRewrite"):
            if sum(1 for b in self.backend_refs if _replaces_prefix(b.filters, kind)) == 1:
                raise ValueError(_PREFIX_MESSAGES[(kind, True)])
        return self


def _check_rules(rules: tuple[HTTPRouteRule, ...]) -> tuple[HTTPRouteRule, ...]:
    # Repeated rule names are taken, as the standard channel's CRD takes them (the experimental
    # channel's refuses them, so such a cluster never holds one): weir names nothing after a
    # rule, so a repeat is ambiguous nowhere (GRPCRoute likewise).
    if sum(len(rule.matches) for rule in rules) > 128:
        raise ValueError(
            "While 16 rules and 64 matches per rule are allowed, the total number of matches "
            "across all rules in a route must be less than 128"
        )
    return rules


class HTTPRouteSpec(Model):
    parent_refs: ParentRefs = ()
    hostnames: tuple[Hostname, ...] = Field(default=(), max_length=16)
    rules: Annotated[tuple[HTTPRouteRule, ...], AfterValidator(_check_rules)] = Field(
        default=(HTTPRouteRule(),), min_length=1, max_length=16
    )


class HTTPRoute(CelChecked, KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "HTTPRoute"

    spec: HTTPRouteSpec  # required, as upstream's CRD has it
