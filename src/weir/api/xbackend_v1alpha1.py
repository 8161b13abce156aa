"""Gateway API experimental ``gateway.networking.x-k8s.io/v1alpha1``: XBackend, in two shapes.

* ``v1.6``: the released shape (Gateway API v1.6 experimental channel, from
  GEP-4894): ``spec.port.port``, optional ``spec.port.name``, type
  ``ExternalHostname``, six protocols, ``status.parents[].parentRef``.
* ``main``: upstream's main branch since (unreleased): ``spec.port.number``
  (no ``name``; ``port`` needs a property), type ``EndpointSelector`` with
  ``spec.endpointSelector.matchLabels``, protocols ``GRPC`` and ``WSS``,
  three protocol/TLS rules on ``spec``, ``status.ancestors[].ancestorRef``.

One apiVersion and kind carry both, so the object's keys say which it is
(:func:`shape_of`): ``spec.port.number`` or ``spec.endpointSelector`` make it
``main``, anything else is ``v1.6``. A ``main`` object that also uses a
``v1.6`` key (``spec.port.port``, ``spec.port.name``) is refused as the API
server with main's CRD refuses it: ``field not declared in schema``. Each
shape is validated with its own CRD's constraints: the OpenAPI ones as
pydantic constraints, the CEL rules as :class:`~weir.api.cel.CelRule` with the
upstream rule text and message (evaluated by a CEL engine, and emitted into
the CRD by ``weir crds``). Where upstream's rule text has a bug, weir follows
its intent and says so at the rule. See ``docs/xbackend.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from weir.api.cel import CelChecked, CelModel, CelRule
from weir.api.gateway_v1 import ParentReference, SecretObjectReference
from weir.api.meta import (
    MAX_PARENTS,
    Condition,
    GatewayController,
    Hostname,
    KubeObject,
    LabelValue,
    LocalObjectReference,
    Model,
    PreciseHostname,
)

GROUP = "gateway.networking.x-k8s.io"
API_VERSION = f"{GROUP}/v1alpha1"

_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}


#: Which XBackend CRD an object is written for: the released one, or upstream main's.
Shape = Literal["v1.6", "main"]
SHAPES: tuple[Shape, ...] = ("v1.6", "main")

#: The error of a key the object's shape does not have (see :func:`shape_of`), in the API server's words.
NOT_DECLARED = "field_not_declared"
#: The error of an object with fewer properties than its schema's ``minProperties``.
TOO_FEW_PROPERTIES = "too_few_properties"


def _not_declared(value: Any) -> Any:
    raise PydanticCustomError(NOT_DECLARED, "field not declared in schema")


class BackendPort(Model):
    """``spec.port`` of the v1.6 shape: the number is ``port``, with an optional ``name``."""

    port: int = Field(ge=1, le=65535, strict=True, json_schema_extra={"format": "int32"})
    name: (
        Annotated[
            str,
            Field(max_length=63),
            CelRule(
                "size(self) == 0 || format.dns1123Label().validate(self) == null",
                "Name must be a valid DNS label",
            ),
        ]
        | None
    ) = None

    @property
    def number(self) -> int:
        """The port number, under main's name."""
        return self.port


class BackendPortMain(Model):
    """``spec.port`` of the main shape: ``number``, optional in the schema but ``port`` needs one property.

    ``port`` and ``name`` (the v1.6 keys) are refused when written, and are not in the CRD.
    """

    model_config = {"json_schema_extra": {"minProperties": 1}}

    number: int | None = Field(
        default=None, ge=1, le=65535, strict=True, json_schema_extra={"format": "int32"}
    )
    v16_port: SkipJsonSchema[Any] = Field(default=None, alias="port")
    v16_name: SkipJsonSchema[Any] = Field(default=None, alias="name")

    _refuse_v16_keys = field_validator("v16_port", "v16_name", mode="before")(_not_declared)

    @model_validator(mode="before")
    @classmethod
    def _has_a_property(cls, data: Any) -> Any:
        if isinstance(data, dict) and all(v is None for v in data.values()):  # null is pruned
            raise PydanticCustomError(TOO_FEW_PROPERTIES, "should have at least {min} properties", {"min": 1})
        return data

    @property
    def name(self) -> None:
        """main has no port name."""
        return None


class ExternalHostname(Model):
    hostname: Annotated[
        PreciseHostname,
        CelRule(
            "!self.endsWith('.cluster.local')",
            "hostname must not be an IP address or end with .cluster.local",
        ),
    ]


#: A ``caCertificateRefs`` entry is a Gateway API ``LocalObjectReference`` (one model for both).
CACertificateRef = LocalObjectReference


#: Gateway API ``AbsoluteURI``.
AbsoluteURI = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=r"^(([^:/?#]+):)(//([^/?#]*))([^?#]*)(\?([^#]*))?(#(.*))?"),
]


class SubjectAltName(CelModel):
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            '!(self.type == "Hostname" && (!has(self.hostname) || self.hostname == ""))',
            "SubjectAltName element must contain Hostname, if Type is set to Hostname",
        ),
        CelRule(
            '!(self.type != "Hostname" && has(self.hostname) && self.hostname != "")',
            "SubjectAltName element must not contain Hostname, if Type is not set to Hostname",
        ),
        CelRule(
            '!(self.type == "URI" && (!has(self.uri) || self.uri == ""))',
            "SubjectAltName element must contain URI, if Type is set to URI",
        ),
        CelRule(
            '!(self.type != "URI" && has(self.uri) && self.uri != "")',
            "SubjectAltName element must not contain URI, if Type is not set to URI",
        ),
    )

    type: Literal["Hostname", "URI"]
    hostname: Hostname | None = None
    uri: AbsoluteURI | None = None


#: Gateway API ``WellKnownCACertificatesType``: ``System`` or a prefixed, implementation-specific name.
WellKnownCACertificates = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        pattern=r"^(System|([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
        r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]))$",
    ),
]


class TLSValidation(CelModel):
    """The ``validation`` block shared with BackendTLSPolicy."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!(has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 && "
            'has(self.wellKnownCACertificates) && self.wellKnownCACertificates != "")',
            "must not contain both CACertificateRefs and WellKnownCACertificates",
        ),
        CelRule(
            "(has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 || "
            'has(self.wellKnownCACertificates) && self.wellKnownCACertificates != "")',
            "must specify either CACertificateRefs or WellKnownCACertificates",
        ),
    )

    ca_certificate_refs: tuple[CACertificateRef, ...] = Field(
        default=(), max_length=8, json_schema_extra=_ATOMIC
    )
    #: ``System``, or an implementation's own set as ``domain/name`` (weir has none: status says so).
    well_known_ca_certificates: WellKnownCACertificates | None = Field(
        default=None, alias="wellKnownCACertificates"
    )
    hostname: PreciseHostname
    subject_alt_names: tuple[SubjectAltName, ...] = Field(default=(), max_length=5, json_schema_extra=_ATOMIC)


#: A ``clientCertificateRef`` is a Gateway API ``SecretObjectReference`` (one model for both).
ClientCertificateRef = SecretObjectReference


class BackendTLS(CelModel):
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "self.mode == 'ClientAndServer' ? "
            "has(self.clientCertificateRef) : !has(self.clientCertificateRef)",
            "clientCertificateRef must be set if and only if mode is ClientAndServer",
        ),
    )

    mode: Literal["None", "ServerOnly", "ClientAndServer"]
    client_certificate_ref: ClientCertificateRef | None = None
    validation: TLSValidation | None = None


Protocol = Literal["TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP"]
#: main adds gRPC and WebSocket over TLS.
ProtocolMain = Literal["TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP", "GRPC", "WSS"]

_EXTERNAL_HOSTNAME_IFF = CelRule(
    "self.type == 'ExternalHostname' ? has(self.externalHostname) : !has(self.externalHostname)",
    "externalHostname must be set when type is ExternalHostname and must be unset otherwise",
)


class XBackendSpec(CelModel):
    """``spec`` of the v1.6 shape."""

    SHAPE: ClassVar[Shape] = "v1.6"
    cel_rules: ClassVar[tuple[CelRule, ...]] = (_EXTERNAL_HOSTNAME_IFF,)

    type: Literal["ExternalHostname"]
    port: BackendPort
    external_hostname: ExternalHostname | None = None
    protocol: Protocol | None = None
    tls: BackendTLS | None = None

    @property
    def endpoint_selector(self) -> None:
        """v1.6 has no EndpointSelector type."""
        return None

    @property
    def port_number(self) -> int:
        return self.port.port


class EndpointSelector(Model):
    """``spec.endpointSelector`` (main): the Pods of the XBackend's namespace with all these labels.

    Upstream's CRD also lists ``""`` as required here (controller-gen's
    reading of an inlined, required struct); weir follows the intent.
    """

    match_labels: dict[str, LabelValue] = Field(min_length=1, max_length=64)


class XBackendSpecMain(CelModel):
    """``spec`` of the main shape.

    Upstream's three protocol rules read ``self.protocol`` without ``has()``,
    so a real API server refuses every XBackend without ``spec.protocol``
    (``no such key: protocol``), an upstream bug in unreleased code. weir's
    rules say what upstream's mean, guarded by ``!has(self.protocol) ||``,
    with upstream's messages; ``weir crds --xbackend main`` emits them so.
    ``tls.mode: None`` counts as having ``tls``, as on the real server.
    """

    SHAPE: ClassVar[Shape] = "main"
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        _EXTERNAL_HOSTNAME_IFF,
        CelRule(
            "self.type == 'EndpointSelector' ? has(self.endpointSelector) : !has(self.endpointSelector)",
            "endpointSelector must be set when type is EndpointSelector and must be unset otherwise",
        ),
        CelRule(
            "!has(self.protocol) || self.protocol != 'H2C' || !has(self.tls)",
            "tls must be unset when protocol is H2C, use protocol HTTP2 for HTTP/2 with tls",
        ),
        CelRule(
            "!has(self.protocol) || self.protocol != 'HTTP2' || has(self.tls)",
            "tls must be set when protocol is HTTP2, use protocol H2C for HTTP/2 without tls",
        ),
        CelRule(
            "!has(self.protocol) || self.protocol != 'WSS' || has(self.tls)",
            "tls must be set when protocol is WSS",
        ),
    )

    type: Literal["ExternalHostname", "EndpointSelector"]
    port: BackendPortMain
    external_hostname: ExternalHostname | None = None
    endpoint_selector: EndpointSelector | None = None
    protocol: ProtocolMain | None = None
    tls: BackendTLS | None = None

    @property
    def port_number(self) -> int:
        # ``port`` has a property, and ``number`` is its only one (others are refused).
        assert self.port.number is not None
        return self.port.number


def shape_of(spec: Any) -> Shape:
    """The shape an XBackend's ``spec`` (raw or parsed) is written in; see the module doc."""
    if isinstance(spec, XBackendSpec | XBackendSpecMain):
        return spec.SHAPE
    if isinstance(spec, dict):
        port = spec.get("port")
        if "endpointSelector" in spec or (isinstance(port, dict) and "number" in port):
            return "main"
    return "v1.6"


class BackendParentStatus(Model):
    """One entry of ``status.parents`` (v1.6; Go: ``BackendAncestorStatus``)."""

    controller_name: GatewayController
    parent_ref: ParentReference
    conditions: tuple[Condition, ...] = Field(
        default=(),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class BackendStatus(Model):
    """``status`` of the v1.6 shape. Read only for the CRD: status is kept as data."""

    parents: tuple[BackendParentStatus, ...] = Field(default=(), max_length=32, json_schema_extra=_ATOMIC)


class BackendAncestorStatus(Model):
    """One entry of ``status.ancestors`` (main)."""

    controller_name: GatewayController
    ancestor_ref: ParentReference
    conditions: tuple[Condition, ...] = Field(
        default=(),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class BackendStatusMain(Model):
    """``status`` of the main shape."""

    ancestors: tuple[BackendAncestorStatus, ...] = Field(default=(), max_length=32, json_schema_extra=_ATOMIC)


@dataclass(frozen=True)
class ShapeSchema:
    """What differs between the shapes: the ``spec`` and ``status`` models, and status's key names."""

    spec: type[XBackendSpec] | type[XBackendSpecMain]
    status: type[BackendStatus] | type[BackendStatusMain]
    #: ``status.<list>[].<ref>``
    status_list: str
    status_ref: str


SCHEMAS: dict[Shape, ShapeSchema] = {
    "v1.6": ShapeSchema(XBackendSpec, BackendStatus, "parents", "parentRef"),
    "main": ShapeSchema(XBackendSpecMain, BackendStatusMain, "ancestors", "ancestorRef"),
}


#: The label that ties a Service to the EndpointSelector XBackend it serves (value: the XBackend's
#: name): in a cluster, the headless Service made for the XBackend (its EndpointSlices carry it
#: too). Read by translation (the XBackend's endpoints) and written by the Kubernetes provider.
SELECTOR_LABEL = "weir.dev/xbackend"
_LABEL_VALUE_MAX = 63
#: What a Service name made from ``generateName: <name>-`` needs of ``<name>`` (DNS-1035 label).
_SERVICE_NAME_START = re.compile(r"^[a-z][-a-z0-9]*$")


class XBackend(CelChecked, KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "XBackend"
    #: The schema of ``status`` in the CRD (of the v1.6 shape; see :data:`SCHEMAS`).
    STATUS: ClassVar[type[Model]] = BackendStatus

    spec: Annotated[
        Annotated[XBackendSpec, Tag("XBackendSpec")] | Annotated[XBackendSpecMain, Tag("XBackendSpecMain")],
        Discriminator(lambda spec: SCHEMAS[shape_of(spec)].spec.__name__),
    ]

    @property
    def shape(self) -> Shape:
        return self.spec.SHAPE

    def warnings(self) -> tuple[tuple[str, str], ...]:
        """What is valid here but will fail elsewhere.

        * A v1.6 ``port.name``: weir accepts a valid DNS label, as the field's
          rule means, but that rule makes an API server with the released
          v1.6.x CRD refuse every non-empty name.
        * An EndpointSelector XBackend whose name the headless Service weir
          creates for it in a cluster cannot carry (``docs/xbackend.md``): that
          Service is labelled ``weir.dev/xbackend: <name>`` (a label value: at
          most 63 characters) and named from ``generateName: <name>-`` (a
          Service name is a DNS-1035 label: no dots, a letter first). weir
          skips a name too long for the label, and the API server refuses the
          other; either way the backend gets no endpoints there. The files
          provider creates no Service and serves it.
        """
        found: list[tuple[str, str]] = []
        if isinstance(self.spec, XBackendSpec) and self.spec.port.name:
            found.append(
                (
                    "spec.port.name",
                    "accepted, but a cluster with the released v1.6.x XBackend CRD refuses every "
                    "non-empty name (its rule is wrong upstream; upstream main removed the field): "
                    "omit it for such clusters",
                )
            )
        if self.spec.endpoint_selector is not None:
            name = self.name
            why = []
            if len(name) > _LABEL_VALUE_MAX:
                why.append(
                    f"it is {len(name)} characters long and the Service's label {SELECTOR_LABEL} holds "
                    f"at most {_LABEL_VALUE_MAX}"
                )
            if not _SERVICE_NAME_START.match(name):
                why.append(
                    "a Service name (made from generateName: <name>-) must start with a letter and hold "
                    "only lowercase letters, digits and '-'"
                )
            if why:
                found.append(
                    (
                        "metadata.name",
                        "in a Kubernetes cluster weir serves an EndpointSelector XBackend through a headless "
                        "Service it creates, and no such Service can be made for this name ("
                        + "; ".join(why)
                        + "), so the backend gets no endpoints there: rename the XBackend to a DNS label "
                        f"of at most {_LABEL_VALUE_MAX} characters",
                    )
                )
        return tuple(found)


#: An XBackend's status list and reference keys in each shape of its CRD (v1.6, upstream main).
XBACKEND_STATUS_KEYS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {shape: (schema.status_list, schema.status_ref) for shape, schema in SCHEMAS.items()}
)


def reshape_xbackend_status(status: Mapping[str, Any], shape: str) -> dict[str, Any]:
    """An XBackend ``status`` (as translation writes it, in the object's shape) in ``shape``'s keys.

    For a provider whose installed CRD has the other shape than the object
    as read (Kubernetes discovers it from the CRD's schema): a server with
    main's CRD silently drops ``status.parents``, one with v1.6's drops
    ``status.ancestors``. The result has only ``shape``'s list, never both.
    """
    to_list, to_ref = XBACKEND_STATUS_KEYS[shape]
    out = {k: v for k, v in status.items() if k not in ("parents", "ancestors")}
    entries: list[Any] = []
    for from_list, from_ref in XBACKEND_STATUS_KEYS.values():
        for entry in status.get(from_list) or ():
            if isinstance(entry, dict) and from_ref in entry:
                entry = {(to_ref if k == from_ref else k): v for k, v in entry.items()}
            entries.append(entry)
    out[to_list] = entries[:MAX_PARENTS]
    return out
