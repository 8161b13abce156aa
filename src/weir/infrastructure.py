"""The Service weir keeps for each Gateway when ``--gateway-services`` is on (the facts both
translation and the Kubernetes provider use, decided here once).

By default weir creates nothing per Gateway: every pod serves every Gateway
behind one Service (``docs/kubernetes.md``, "One address for all"). With the
mode on, the leader also keeps, in each Gateway's own namespace, a
**selectorless** Service named by :func:`service_name` whose ports are the
Gateway's listener ports, and EndpointSlices listing weir's ready pods (the
endpoints of the ``--publish-service`` Service): a Service selects pods of its
own namespace only, and weir's pods live in weir's. The Service carries the
Gateway's ``spec.infrastructure`` labels and annotations (the Gateway API's
``GatewayInfrastructurePropagation``), and the Gateway's ``status.addresses``
come from it.

A Service is weir's for a Gateway when it carries :data:`GATEWAY_UID_LABEL`
with the Gateway's uid (the provider checks the ownerReference too). A Service
of the same name without it belongs to someone else: weir never takes it over,
and the Gateway says so (:func:`foreign_service`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from weir.api.core_v1 import Service
from weir.api.gateway_v1 import Gateway
from weir.resources import Resources

__all__ = [
    "CLASS_LABEL",
    "GATEWAY_NAME_LABEL",
    "GATEWAY_UID_LABEL",
    "MANAGED_BY",
    "TRACKED_ANNOTATION",
    "ServiceType",
    "foreign_service",
    "infrastructure_metadata",
    "own_service",
    "service_name",
    "service_ports",
]

#: The label upstream conformance (``GatewayInfrastructure``) looks objects up by.
GATEWAY_NAME_LABEL = "gateway.networking.k8s.io/gateway-name"
#: The Gateway's class, for ``kubectl get svc -l``.
CLASS_LABEL = "gateway.networking.k8s.io/gateway-class-name"
#: weir's mark: the uid of the Gateway the Service or EndpointSlice is for.
GATEWAY_UID_LABEL = "weir.dev/gateway-uid"
#: ``endpointslice.kubernetes.io/managed-by`` of weir's EndpointSlices (a label value: no slash).
#: Kubernetes' own controllers leave slices managed by another name alone.
MANAGED_BY = "gateway-services.weir.dev"
#: The ``spec.infrastructure`` keys weir put on the Service (JSON ``{"labels": [...], "annotations":
#: [...]}``): removed from the Service when removed from the Gateway; other keys are never touched.
TRACKED_ANNOTATION = "weir.dev/infrastructure-keys"

ServiceType = Literal["ClusterIP", "LoadBalancer"]

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def service_name(gateway: str) -> str:
    """The Service of Gateway ``gateway``: ``<gateway>-weir`` when that is a valid Service name
    (a DNS-1035 label: at most 63 characters, a letter first, no dots), else
    ``weir-gw-<hash>`` of the Gateway's name, stable and unlikely to collide."""
    name = f"{gateway}-weir"
    if len(name) <= 63 and _DNS1035.match(name):
        return name
    return "weir-gw-" + hashlib.sha256(gateway.encode()).hexdigest()[:16]


def service_ports(gw: Gateway) -> list[dict[str, Any]]:
    """The Service's ports: one per distinct (listener port, protocol); UDP for ``UDP`` listeners,
    TCP for every other protocol. Envoy listens on the listener's port itself, so ``targetPort``
    is the same number (a selectorless Service takes it from its EndpointSlices' ports)."""
    seen: dict[tuple[int, str], None] = {}
    for listener in gw.spec.listeners:
        seen[(listener.port, "UDP" if listener.protocol == "UDP" else "TCP")] = None
    return [
        {"name": f"{proto.lower()}-{port}", "port": port, "targetPort": port, "protocol": proto}
        for port, proto in sorted(seen)
    ]


def infrastructure_metadata(gw: Gateway) -> tuple[dict[str, str], dict[str, str]]:
    """``(labels, annotations)`` of the Gateway's ``spec.infrastructure`` (empty when absent)."""
    infra = gw.spec.infrastructure
    if infra is None:
        return {}, {}
    return dict(infra.labels or {}), dict(infra.annotations or {})


def weir_labels(gw: Gateway) -> dict[str, str]:
    """The labels weir puts on a Gateway's Service and EndpointSlices besides the infrastructure ones
    (they win over an infrastructure label of the same key). ``gateway-name`` only when the name
    fits a label value (63 characters)."""
    labels = {GATEWAY_UID_LABEL: gw.metadata.uid or "", "app.kubernetes.io/managed-by": "weir"}
    if len(gw.name) <= 63:
        labels[GATEWAY_NAME_LABEL] = gw.name
    if len(gw.spec.gateway_class_name) <= 63:
        labels[CLASS_LABEL] = gw.spec.gateway_class_name
    return labels


def tracked_keys(annotations: Mapping[str, str]) -> tuple[set[str], set[str]]:
    """The infrastructure ``(labels, annotations)`` keys weir put on a Service, from its
    :data:`TRACKED_ANNOTATION` (nothing when absent or unreadable)."""
    try:
        data = json.loads(annotations.get(TRACKED_ANNOTATION) or "{}")
    except ValueError:
        return set(), set()
    if not isinstance(data, dict):
        return set(), set()
    labels = data.get("labels") if isinstance(data.get("labels"), list) else []
    notes = data.get("annotations") if isinstance(data.get("annotations"), list) else []
    return {str(k) for k in labels or ()}, {str(k) for k in notes or ()}


def own_service(resources: Resources, gw: Gateway) -> Service | None:
    """The Gateway's Service when it exists and is weir's (labelled with the Gateway's uid)."""
    svc = resources.service(gw.namespace, service_name(gw.name))
    if svc is None or not gw.metadata.uid:
        return None
    return svc if svc.metadata.labels.get(GATEWAY_UID_LABEL) == gw.metadata.uid else None


def foreign_service(resources: Resources, gw: Gateway) -> str | None:
    """Why the Gateway has no Service of its own, when one of its name exists and is not weir's."""
    name = service_name(gw.name)
    svc = resources.service(gw.namespace, name)
    if svc is None or own_service(resources, gw) is not None:
        return None
    return (
        f"Service {gw.namespace}/{name} exists and is not weir's (it lacks the label "
        f"{GATEWAY_UID_LABEL}={gw.metadata.uid}), so weir does not create this Gateway's Service "
        "and it has no address of its own; delete or rename that Service"
    )
