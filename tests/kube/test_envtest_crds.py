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


def mcp_policy(namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    targets = [{"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "api"}]
    return {
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "BackendMCPPolicy",
        "metadata": {"name": "tools", "namespace": namespace},
        "spec": {"targetRefs": targets, **spec},
    }


PER_CALLER = {
    "jwt": {
        "issuer": "https://idp.example",
        "audiences": ["mcp"],
        "jwks": {"configMapRef": {"name": "idp", "key": "jwks.json"}},
    },
    "allowedTools": ["search"],
    "rules": [
        {
            "from": {"jwt": {"subjects": ["alice"], "claims": [{"name": "scope", "values": ["repo.admin"]}]}},
            "allowedTools": ["delete_repo"],
        },
        {
            "from": {"clientCertificate": {"subjectAltNames": ["spiffe://ci/runner"]}},
            "allowedTools": ["get_*"],
        },
    ],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"jwt": None}, "rules that match on jwt need spec.jwt"),
        (
            {
                "rules": [
                    {
                        "from": {"jwt": {}, "clientCertificate": {"subjectAltNames": ["a"]}},
                        "allowedTools": ["a"],
                    }
                ]
            },
            "set exactly one of jwt and clientCertificate",
        ),
        (
            {
                "rules": [
                    {"from": {"jwt": {"claims": [{"name": "sub", "values": ["a"]}]}}, "allowedTools": ["a"]}
                ]
            },
            "match the subject with subjects, not with a claim named sub",
        ),
        ({"jwt": {"issuer": "i", "jwks": {}}}, "set exactly one of configMapRef and secretRef"),
    ],
)
def test_the_api_server_enforces_the_per_caller_mcp_rules(
    objects: Objects, change: dict[str, Any], message: str
) -> None:
    spec = copy.deepcopy(PER_CALLER)
    for key, value in change.items():
        if value is None:
            spec.pop(key)
        else:
            spec[key] = value
    with pytest.raises(ApiError) as refused:
        objects.apply(mcp_policy(objects.namespace, spec))
    assert refused.value.code == 422
    assert message in refused.value.body["message"]
    objects.apply(mcp_policy(objects.namespace, PER_CALLER))  # and the valid one is accepted
