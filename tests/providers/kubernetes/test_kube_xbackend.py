"""The Kubernetes side of XBackend's two shapes: the installed CRD's shape, status in it, and the
headless Service of an EndpointSelector XBackend (pure functions of weir.providers.kubernetes.xbackend)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from weir.api.meta import ObjectKey
from weir.api.xbackend_v1alpha1 import XBackend
from weir.cli import app
from weir.providers.kubernetes.xbackend import crd_shape, headless_service, statuses_for_crd


def crd_of(shape: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["crds", "--xbackend", shape])
    assert result.exit_code == 0, result.output
    (crd,) = [
        d for d in yaml.safe_load_all(result.stdout) if d and d["metadata"]["name"].startswith("xbackends.")
    ]
    return crd  # type: ignore[no-any-return]


@pytest.mark.parametrize("shape", ["v1.6", "main"])
def test_the_shape_is_read_from_the_installed_crd(shape: str) -> None:
    assert crd_shape(crd_of(shape)) == shape


def test_a_crd_that_says_neither_shape_is_none() -> None:
    crd = crd_of("main")
    del crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert crd_shape(crd) is None
    assert crd_shape({}) is None


REF = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "n", "name": "gw"}
ENTRY = {"controllerName": "weir.dev/gateway-controller", "conditions": []}


def test_statuses_follow_the_crd_and_other_kinds_are_untouched() -> None:
    xb, route = ObjectKey("XBackend", "n", "api"), ObjectKey("HTTPRoute", "n", "r")
    statuses = {
        xb: {"parents": [{**ENTRY, "parentRef": REF}]},
        route: {"parents": [{**ENTRY, "parentRef": REF}]},
    }
    out = statuses_for_crd(statuses, "main")
    assert out[xb] == {"ancestors": [{**ENTRY, "ancestorRef": REF}]}
    assert out[route] is statuses[route]
    assert statuses_for_crd(statuses, "v1.6")[xb] is statuses[xb]
    assert statuses_for_crd(statuses, None) == statuses


def test_the_headless_service_of_an_endpoint_selector_xbackend() -> None:
    xb = XBackend.model_validate(
        {
            "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
            "kind": "XBackend",
            "metadata": {"name": "web", "namespace": "shop", "uid": "1234"},
            "spec": {
                "type": "EndpointSelector",
                "endpointSelector": {"matchLabels": {"app": "web"}},
                "port": {"number": 8080},
            },
        }
    )
    svc = headless_service(xb)
    assert svc is not None
    assert svc["metadata"]["generateName"] == "web-"
    assert svc["metadata"]["namespace"] == "shop"
    assert svc["metadata"]["labels"] == {"weir.dev/xbackend": "web"}
    [owner] = svc["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "XBackend",
        "web",
        "1234",
        True,
    )
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"app": "web"}
    assert svc["spec"]["ports"] == [{"name": "backend", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]


def test_an_external_hostname_xbackend_needs_no_service() -> None:
    xb = XBackend.model_validate(
        {
            "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
            "kind": "XBackend",
            "metadata": {"name": "api", "namespace": "n"},
            "spec": {
                "type": "ExternalHostname",
                "externalHostname": {"hostname": "a.example.com"},
                "port": {"number": 443},
            },
        }
    )
    assert headless_service(xb) is None
