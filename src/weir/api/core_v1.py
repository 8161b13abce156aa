"""Kubernetes core ``v1``: Service, Secret, ConfigMap, Namespace, Pod (the fields weir reads)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import ipaddress
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from weir.api.meta import KubeObject, Model

API_VERSION = "v1"


class ServicePort(Model):
    name: str | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    app_protocol: str | None = None
    port: int = Field(ge=1, le=65535, strict=True)
    target_port: int | str | None = None


class ServiceSpec(Model):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"] = "ClusterIP"
    cluster_ip: str | None = Field(default=None, alias="clusterIP")
    ports: tuple[ServicePort, ...] = ()
    selector: dict[str, str] = Field(default_factory=dict)
    external_name: str | None = None

    @property
    def headless(self) -> bool:
        return self.cluster_ip == "None"


class Service(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Service"

    spec: ServiceSpec = ServiceSpec()


class Secret(KubeObject):
    """A Secret. ``data`` values are base64 in manifests; ``stringData`` is merged over them."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Secret"

    type: str = "Opaque"
    data: dict[str, str] = Field(default_factory=dict)
    string_data: dict[str, str] = Field(default_factory=dict)

    @field_validator("data")
    @classmethod
    def _base64(cls, value: dict[str, str]) -> dict[str, str]:
        for key, encoded in value.items():
            try:
                base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"data[{key}]: illegal base64 data") from None
        return value

    def value(self, key: str) -> bytes | None:
        """The decoded value of ``key``, ``stringData`` winning over ``data``."""
        if key in self.string_data:
            return self.string_data[key].encode()
        if key in self.data:
            return base64.b64decode(self.data[key])
        return None


class ConfigMap(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ConfigMap"

    data: dict[str, str] = Field(default_factory=dict)


class Namespace(KubeObject):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Namespace"
    NAMESPACED: ClassVar[bool] = False


class Pod(KubeObject):
    """A Pod, for XBackends of type ``EndpointSelector``: its labels, addresses and readiness.

    Read from files only: in a cluster weir does not watch Pods (see
    ``docs/xbackend.md``, "EndpointSelector"). Its ``status`` is the Pod's
    own (``phase``, ``podIP``/``podIPs``, ``conditions``), read by the
    properties below.
    """

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Pod"

    @property
    def ready(self) -> bool:
        """Running, with the ``Ready`` condition ``True`` (what an EndpointSlice calls ready)."""
        status = self.status or {}
        conditions = status.get("conditions")
        if not isinstance(conditions, list):  # status is plain data, unchecked: any shape may come
            conditions = []
        ready = any(
            isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
        )
        return status.get("phase") == "Running" and ready

    @property
    def addresses(self) -> tuple[str, ...]:
        """Its IPs: ``status.podIPs``, else ``status.podIP``; only valid IP addresses."""
        status = self.status or {}
        pod_ips = status.get("podIPs")
        ips = [p.get("ip") for p in (pod_ips if isinstance(pod_ips, list) else ()) if isinstance(p, dict)]
        if not ips and status.get("podIP"):
            ips = [status.get("podIP")]
        out = []
        for ip in ips:
            if isinstance(ip, str):
                with contextlib.suppress(ValueError):
                    out.append(str(ipaddress.ip_address(ip)))
        return tuple(out)
