"""The feature list docs/kubernetes.md shows is weir.features' list (which GatewayClass status uses)."""

from __future__ import annotations

import re
from pathlib import Path

from weir.api.gateway_v1 import GatewayClass
from weir.features import SUPPORTED_FEATURES
from weir.resources import Resources
from weir.translate import Settings, translate

DOC = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"


def test_the_doc_lists_exactly_the_supported_features() -> None:
    text = DOC.read_text()
    block = text.split("<!-- supported-features -->")[1].split("<!-- /supported-features -->")[0]
    assert re.findall(r"`([A-Za-z0-9]+)`", block) == list(SUPPORTED_FEATURES)


def test_a_gateway_class_of_weirs_lists_them_in_its_status() -> None:
    gc = GatewayClass.model_validate(
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": "weir"},
            "spec": {"controllerName": "weir.dev/gateway-controller"},
        }
    )
    result = translate(Resources.from_objects([gc]), Settings())
    [status] = result.statuses.values()
    assert status["supportedFeatures"] == [{"name": name} for name in SUPPORTED_FEATURES]
