"""Gateway API experimental ``gateway.networking.x-k8s.io/v1alpha1``: XBackend.

The released shape (Gateway API v1.6 experimental channel, from GEP-4894),
with the upstream CRD's constraints: the OpenAPI ones as pydantic
constraints, the CEL rules as :class:`~weir.api.cel.CelRule` with the
upstream rule text and message (evaluated by a CEL engine, and emitted into
the CRD by ``weir crds``). See ``../shared/reference/xbackend.md`` for the
table this follows.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from weir.api.cel import CelChecked, CelModel, CelRule
from weir.api.gateway_v1 import ParentReference
from weir.api.meta import (
    Condition,
    GatewayController,
    Group,
    Hostname,
    Kind,
    KubeObject,
    Model,
    Namespace,
    ObjectName,
    PreciseHostname,
)

GROUP = "gateway.networking.x-k8s.io"
API_VERSION = f"{GROUP}/v1alpha1"

_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}


class BackendPort(Model):
    """``spec.port``. The released schema calls the number ``port``; a newer draft ``number``."""

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

    @model_validator(mode="before")
    @classmethod
    def _accept_number(cls, data: Any) -> Any:
        if isinstance(data, dict) and "port" not in data and "number" in data:
            data = {**data, "port": data["number"]}
            del data["number"]
        return data


class ExternalHostname(Model):
    hostname: Annotated[
        PreciseHostname,
        CelRule(
            "!self.endsWith('.cluster.local')",
            "hostname must not be an IP address or end with .cluster.local",
        ),
    ]


class CACertificateRef(Model):
    """Gateway API ``LocalObjectReference``."""

    group: Group
    kind: Kind
    name: ObjectName


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
    #: Upstream's enum is ``System``; weir also reads other values and reports them in status.
    well_known_ca_certificates: str | None = Field(default=None, alias="wellKnownCACertificates")
    hostname: PreciseHostname
    subject_alt_names: tuple[SubjectAltName, ...] = Field(default=(), max_length=5, json_schema_extra=_ATOMIC)


class ClientCertificateRef(Model):
    """Gateway API ``SecretObjectReference``."""

    group: Group = ""
    kind: Kind = "Secret"
    name: ObjectName
    namespace: Namespace | None = None


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


class XBackendSpec(CelModel):
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "self.type == 'ExternalHostname' ? has(self.externalHostname) : !has(self.externalHostname)",
            "externalHostname must be set when type is ExternalHostname and must be unset otherwise",
        ),
    )

    type: Literal["ExternalHostname"]
    port: BackendPort
    external_hostname: ExternalHostname | None = None
    protocol: Protocol | None = None
    tls: BackendTLS | None = None


class BackendParentStatus(Model):
    """One entry of ``status.parents`` (Go: ``BackendAncestorStatus``)."""

    controller_name: GatewayController
    parent_ref: ParentReference
    conditions: tuple[Condition, ...] = Field(
        default=(),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class BackendStatus(Model):
    """``status`` as weir writes it (the released shape). Read only for the CRD: status is kept as data."""

    parents: tuple[BackendParentStatus, ...] = Field(default=(), max_length=32, json_schema_extra=_ATOMIC)


class XBackend(CelChecked, KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "XBackend"
    #: The schema of ``status`` in the CRD.
    STATUS: ClassVar[type[Model]] = BackendStatus

    spec: XBackendSpec
