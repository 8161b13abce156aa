"""BackendCredentialPolicy's OAuth2 and SigV4 fields on a real API server: the CRD weir emits takes a
valid policy of each kind and refuses what the models refuse, with the models' messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from envtest import ApiError
from kube_world import Objects

TARGET = [{"group": "gateway.networking.x-k8s.io", "kind": "XBackend", "name": "llm"}]
OAUTH2 = {
    "targetRefs": TARGET,
    "oauth2": {
        "tokenEndpoint": {"backendRef": {"name": "idp"}, "path": "/oauth2/token"},
        "clientIDRef": {"name": "idp", "key": "client-id"},
        "clientSecretRef": {"name": "idp", "key": "client-secret"},
        "scopes": ["https://cognitiveservices.azure.com/.default"],
    },
}
SIGV4 = {
    "targetRefs": TARGET,
    "awsSigV4": {"region": "us-east-1", "service": "bedrock", "credentialsRef": {"name": "aws"}},
}


def policy(namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "BackendCredentialPolicy",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": spec,
    }


def test_a_policy_of_each_kind_is_accepted(objects: Objects) -> None:
    objects.apply(policy(objects.namespace, OAUTH2))
    objects.apply(policy(objects.namespace, SIGV4))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {**SIGV4, "oauth2": OAUTH2["oauth2"]},
            "set exactly one of secretRef (a static credential), oauth2 or awsSigV4",
        ),
        ({"targetRefs": TARGET}, "set exactly one of secretRef (a static credential), oauth2 or awsSigV4"),
        ({**OAUTH2, "header": {"name": "X-Api-Key"}}, "header applies to secretRef only"),
        ({**SIGV4, "overwrite": False}, "overwrite: false cannot apply to awsSigV4"),
    ],
)
def test_the_api_server_refuses_what_the_models_refuse(
    objects: Objects, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError) as refused:
        objects.apply(policy(objects.namespace, copy.deepcopy(spec)))
    assert refused.value.code == 422
    assert message in refused.value.body["message"]
