"""weir's CRDs on a real API server: every kind weir reads installs, and the API server enforces
the models' CEL rules and constraints with the models' own messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from envtest import ApiError, Cluster
from kube_world import Objects

XB = "gateway.networking.x-k8s.io/v1alpha1"
GW = "gateway.networking.k8s.io/v1"


def xbackend(namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": XB,
        "kind": "XBackend",
        "metadata": {"name": "api", "namespace": namespace},
        "spec": spec,
    }


VALID = {
    "type": "ExternalHostname",
    "externalHostname": {"hostname": "api.example.com"},
    "port": {"port": 443},
}


def test_every_kind_weir_reads_is_served(cluster: Cluster) -> None:
    from weir.providers.kubernetes.provider import WATCHED

    for kind in WATCHED:
        listing = cluster.admin.list(kind.api_version, kind.kind)
        assert listing["kind"] == f"{kind.kind}List", kind


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"externalHostname": None},
            "externalHostname must be set when type is ExternalHostname and must be unset otherwise",
        ),
        (
            {"externalHostname": {"hostname": "db.default.svc.cluster.local"}},
            "hostname must not be an IP address or end with .cluster.local",
        ),
        ({"port": {"port": 0}}, "should be greater than or equal to 1"),
    ],
)
def test_the_api_server_enforces_the_models_rules(
    objects: Objects, change: dict[str, Any], message: str
) -> None:
    spec = copy.deepcopy(VALID)
    for key, value in change.items():
        if value is None:
            spec.pop(key)
        else:
            spec[key] = value
    with pytest.raises(ApiError) as refused:
        objects.apply(xbackend(objects.namespace, spec))
    assert refused.value.code == 422
    assert message in refused.value.body["message"]
    objects.apply(xbackend(objects.namespace, VALID))  # and the valid one is accepted
