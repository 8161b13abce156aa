"""Gateway API experimental ``gateway.networking.x-k8s.io/v1alpha1``: XBackend.

The released shape (Gateway API v1.6 experimental channel, from GEP-4894).
The CRD's CEL rules are checked here with the API server's messages; see
``../shared/reference/xbackend.md`` for the table this follows.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from weir.api.meta import (
    DNS1123_LABEL,
    Group,
    Kind,
    KubeObject,
    Model,
    Namespace,
    ObjectName,
    PreciseHostname,
)

GROUP = "gateway.networking.x-k8s.io"
API_VERSION = f"{GROUP}/v1alpha1"


class BackendPort(Model):
    """``spec.port``. The released schema calls the number ``port``; a newer draft ``number``."""

    port: int = Field(ge=1, le=65535, strict=True)
    name: str | None = Field(default=None, max_length=63, pattern=r"^$|" + DNS1123_LABEL)

    @model_validator(mode="before")
    @classmethod
    def _accept_number(cls, data: Any) -> Any:
        if isinstance(data, dict) and "port" not in data and "number" in data:
            data = {**data, "port": data["number"]}
            del data["number"]
        return data


class ExternalHostname(Model):
    hostname: PreciseHostname

    @model_validator(mode="after")
    def _not_cluster_local(self) -> ExternalHostname:
        if self.hostname.endswith(".cluster.local"):
            raise ValueError("hostname must not be an IP address or end with .cluster.local")
        return self


class CACertificateRef(Model):
    group: Group
    kind: Kind
    name: ObjectName


class SubjectAltName(Model):
    type: Literal["Hostname", "URI"]
    hostname: str | None = Field(default=None, max_length=253)
    uri: str | None = Field(
        default=None,
        max_length=253,
        pattern=r"^(([^:/?#]+):)(//([^/?#]*))([^?#]*)(\?([^#]*))?(#(.*))?",
    )

    @model_validator(mode="after")
    def _one_of(self) -> SubjectAltName:
        if self.type == "Hostname" and not self.hostname:
            raise ValueError("SubjectAltName element must contain Hostname, if Type is set to Hostname")
        if self.type != "Hostname" and self.hostname:
            raise ValueError(
                "SubjectAltName element must not contain Hostname, if Type is not set to Hostname"
            )
        if self.type == "URI" and not self.uri:
            raise ValueError("SubjectAltName element must contain URI, if Type is set to URI")
        if self.type != "URI" and self.uri:
            raise ValueError("SubjectAltName element must not contain URI, if Type is not set to URI")
        return self


class TLSValidation(Model):
    """The ``validation`` block shared with BackendTLSPolicy."""

    ca_certificate_refs: tuple[CACertificateRef, ...] = Field(default=(), max_length=8)
    well_known_ca_certificates: str | None = Field(default=None, alias="wellKnownCACertificates")
    hostname: PreciseHostname
    subject_alt_names: tuple[SubjectAltName, ...] = Field(default=(), max_length=5)

    @model_validator(mode="after")
    def _exactly_one_trust_source(self) -> TLSValidation:
        if self.ca_certificate_refs and self.well_known_ca_certificates:
            raise ValueError("must not contain both CACertificateRefs and WellKnownCACertificates")
        if not self.ca_certificate_refs and not self.well_known_ca_certificates:
            raise ValueError("must specify either CACertificateRefs or WellKnownCACertificates")
        return self


class ClientCertificateRef(Model):
    group: Group = ""
    kind: Kind = "Secret"
    name: ObjectName
    namespace: Namespace | None = None


class BackendTLS(Model):
    mode: Literal["None", "ServerOnly", "ClientAndServer"]
    client_certificate_ref: ClientCertificateRef | None = None
    validation: TLSValidation | None = None

    @model_validator(mode="after")
    def _client_cert_iff_mutual(self) -> BackendTLS:
        if (self.mode == "ClientAndServer") != (self.client_certificate_ref is not None):
            raise ValueError("clientCertificateRef must be set if and only if mode is ClientAndServer")
        return self


Protocol = Literal["TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP"]


class XBackendSpec(Model):
    type: Literal["ExternalHostname"]
    port: BackendPort
    external_hostname: ExternalHostname | None = None
    protocol: Protocol | None = None
    tls: BackendTLS | None = None

    @model_validator(mode="after")
    def _hostname_iff_type(self) -> XBackendSpec:
        if (self.type == "ExternalHostname") != (self.external_hostname is not None):
            raise ValueError(
                "externalHostname must be set when type is ExternalHostname and must be unset otherwise"
            )
        return self


class XBackend(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "XBackend"

    spec: XBackendSpec
