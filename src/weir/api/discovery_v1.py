"""Kubernetes ``discovery.k8s.io/v1``: EndpointSlice."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from weir.api.meta import KubeObject, Model

API_VERSION = "discovery.k8s.io/v1"

#: The label that ties a slice to its Service.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


class EndpointConditions(Model):
    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class Endpoint(Model):
    addresses: tuple[str, ...] = Field(min_length=1, max_length=100)
    conditions: EndpointConditions = EndpointConditions()
    hostname: str | None = None

    @property
    def is_ready(self) -> bool:
        """Kubernetes: a nil ``ready`` means ready ("unknown state ... interpreted as ready").

        The EndpointSlice controller never marks a terminating endpoint ready
        (unless the Service publishes not-ready addresses).
        """
        return self.conditions.ready is not False

    @property
    def is_serving(self) -> bool:
        """Passes its readiness checks, terminating or not; as for ``ready``, nil means serving."""
        return self.conditions.serving is not False

    @property
    def is_terminating(self) -> bool:
        """Being shut down; nil means not terminating."""
        return self.conditions.terminating is True


class EndpointPort(Model):
    name: str | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    port: int | None = Field(default=None, ge=1, le=65535, strict=True)
    app_protocol: str | None = None


class EndpointSlice(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "EndpointSlice"

    address_type: Literal["IPv4", "IPv6", "FQDN"]
    endpoints: tuple[Endpoint, ...] = Field(default=(), max_length=1000)
    ports: tuple[EndpointPort, ...] = Field(default=(), max_length=100)

    @property
    def service_name(self) -> str | None:
        return self.metadata.labels.get(SERVICE_NAME_LABEL)
