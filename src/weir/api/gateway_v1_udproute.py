"""Gateway API UDPRoute: ``gateway.networking.k8s.io/v1``, and ``v1alpha2`` as older manifests write it.

Gateway API v1.6 moved UDPRoute to the standard channel as ``v1`` with the
schema of TCPRoute ``v1`` (exactly one rule of 1 to 16 ``backendRefs``);
``v1alpha2`` allows up to 16 rules and is read from files only, like
TCPRoute's (:mod:`weir.api.gateway_v1_tcproute`).
"""

from __future__ import annotations

from typing import ClassVar

from weir.api.cel import CelChecked
from weir.api.gateway_v1 import GROUP
from weir.api.gateway_v1_tcproute import TCPRouteSpec, TCPRouteSpecV1Alpha2
from weir.api.meta import KubeObject

API_VERSION = f"{GROUP}/v1"
API_VERSION_V1ALPHA2 = f"{GROUP}/v1alpha2"


class UDPRoute(CelChecked, KubeObject):
    """Forwards the datagrams a UDP listener receives to the backends of its rule."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "UDPRoute"

    spec: TCPRouteSpec


class UDPRouteV1Alpha2(UDPRoute):
    """A UDPRoute written as ``v1alpha2`` (up to 16 rules); one kind with :class:`UDPRoute`."""

    API_VERSION: ClassVar[str] = API_VERSION_V1ALPHA2

    spec: TCPRouteSpecV1Alpha2
