"""XBackend in a cluster: which shape its installed CRD has, status in that shape, and the
headless Service an EndpointSelector XBackend is served through.

Pure functions for the Kubernetes provider (no API calls here):

* :func:`crd_shape` reads the shape (``v1.6`` or upstream ``main``, see
  :mod:`weir.api.xbackend_v1alpha1`) from the installed CRD's schema: its
  ``status`` has ``parents`` or ``ancestors``. Translation writes an
  XBackend's status in the shape the object was read in, which in a cluster
  is normally the CRD's; :func:`statuses_for_crd` converts the XBackend
  statuses of a publish to the CRD's shape when they differ (an API server
  with main's CRD silently drops a ``status.parents`` patch).
* :func:`headless_service` is the Service made for an EndpointSelector
  XBackend (``docs/xbackend.md``, "Two shapes"): headless, named by
  ``generateName``, owned by the XBackend, selecting its ``matchLabels``,
  labelled so that translation finds its EndpointSlices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from weir.api.meta import ObjectKey
from weir.api.xbackend_v1alpha1 import (
    API_VERSION,
    SCHEMAS,
    SELECTOR_LABEL,
    Shape,
    XBackend,
    reshape_xbackend_status,
)

__all__ = ["CRD_NAME", "crd_shape", "headless_service", "statuses_for_crd"]

#: The name of XBackend's CRD (``<plural>.<group>``), the one CRD weir reads (RBAC: ``get`` on it only).
CRD_NAME = f"xbackends.{API_VERSION.rpartition('/')[0]}"


def crd_shape(crd: Mapping[str, Any]) -> Shape | None:
    """The shape of an installed ``xbackends.gateway.networking.x-k8s.io`` CRD (its ``v1alpha1``
    schema's ``status``), or ``None`` when the schema says neither (then keep what translation wrote)."""
    version = API_VERSION.rpartition("/")[2]
    for served in (crd.get("spec") or {}).get("versions") or ():
        if not isinstance(served, Mapping) or served.get("name") != version:
            continue
        schema = ((served.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}
        status = ((schema.get("status") or {}).get("properties")) or {}
        found = [shape for shape, s in SCHEMAS.items() if s.status_list in status]
        return found[0] if len(found) == 1 else None
    return None


def statuses_for_crd(
    statuses: Mapping[ObjectKey, dict[str, Any]], shape: Shape | None
) -> dict[ObjectKey, dict[str, Any]]:
    """``statuses`` with every XBackend's in ``shape``'s keys (unchanged when ``shape`` is None)."""
    if shape is None:
        return dict(statuses)
    wanted = SCHEMAS[shape].status_list
    return {
        key: (
            reshape_xbackend_status(status, shape)
            if key.kind == XBackend.KIND and wanted not in status
            else status
        )
        for key, status in statuses.items()
    }


def headless_service(xb: XBackend) -> dict[str, Any] | None:
    """The Service to create for ``xb`` when it is of type EndpointSelector, else ``None``.

    Its EndpointSlices (made by Kubernetes) are what translation serves; the
    ownerReference deletes it with the XBackend; ``generateName`` keeps its
    DNS name from becoming something users rely on. No ``blockOwnerDeletion``:
    where the OwnerReferencesPermissionEnforcement admission plugin is on,
    setting it needs ``update`` on ``xbackends/finalizers``, and nothing needs
    an XBackend's deletion to wait for its Service.
    """
    selector = xb.spec.endpoint_selector
    if selector is None:
        return None
    owner: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": XBackend.KIND,
        "name": xb.name,
        "controller": True,
    }
    if xb.metadata.uid:
        owner["uid"] = xb.metadata.uid
    port = xb.spec.port_number
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "generateName": f"{xb.name[:57]}-",
            "namespace": xb.namespace,
            "labels": {SELECTOR_LABEL: xb.name},
            "ownerReferences": [owner],
        },
        "spec": {
            "clusterIP": "None",
            "selector": dict(selector.match_labels),
            "ports": [{"name": "backend", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
