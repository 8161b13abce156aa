"""The feature list docs/kubernetes.md shows is weir.features' list (which GatewayClass status uses)."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

from weir.api.gateway_v1 import GatewayClass
from weir.features import OUTSIDE_PROFILES, PROFILES, SUPPORTED_FEATURES, feature_table
from weir.resources import Resources
from weir.translate import Settings, translate

DOC = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"


def test_the_doc_lists_exactly_the_supported_features() -> None:
    """docs/kubernetes.md's list is SUPPORTED_FEATURES; WEIR_UPDATE_GOLDEN=1 rewrites it."""
    text = DOC.read_text()
    head, rest = text.split("<!-- supported-features -->\n")
    block, tail = rest.split("<!-- /supported-features -->")
    if os.environ.get("WEIR_UPDATE_GOLDEN"):
        listed = ", ".join(f"`{name}`" for name in SUPPORTED_FEATURES)
        block = textwrap.fill(listed, width=79, break_on_hyphens=False) + "\n"
        DOC.write_text(f"{head}<!-- supported-features -->\n{block}<!-- /supported-features -->{tail}")
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


CONFORMANCE_DOC = DOC.parent / "conformance.md"


def test_the_conformance_doc_table_is_generated_from_weir_features() -> None:
    """docs/conformance.md's table is ``feature_table()``; WEIR_UPDATE_GOLDEN=1 rewrites it."""
    text = CONFORMANCE_DOC.read_text()
    before, rest = text.split("<!-- feature-table -->\n")
    table, after = rest.split("<!-- /feature-table -->")
    if os.environ.get("WEIR_UPDATE_GOLDEN") == "1":
        CONFORMANCE_DOC.write_text(
            f"{before}<!-- feature-table -->\n{feature_table()}<!-- /feature-table -->{after}"
        )
        return
    assert table == feature_table(), "docs/conformance.md's table is stale: run with WEIR_UPDATE_GOLDEN=1"


def test_every_claimed_feature_is_in_a_profile_of_the_table() -> None:
    """A claim outside the table would be a feature the docs do not show (or a misspelt name)."""
    listed = {name for core, extended in PROFILES.values() for name in (*core, *extended)}
    assert set(SUPPORTED_FEATURES) <= listed | set(OUTSIDE_PROFILES), set(SUPPORTED_FEATURES) - listed
    assert not listed & set(OUTSIDE_PROFILES), "a feature both in a profile and outside them"
    for core, extended in PROFILES.values():
        assert len(set(core + extended)) == len(core + extended), "a feature listed twice in a profile"


def test_the_profiles_are_upstream_v161s() -> None:
    """Counts of upstream v1.6.1's profiles (its conformance reports' supported + unsupported
    features): 38 extended in GATEWAY-HTTP, 10 in GATEWAY-GRPC, 12 in GATEWAY-TLS."""
    assert {name: len(extended) for name, (_, extended) in PROFILES.items()} == {
        "GATEWAY-HTTP": 38,
        "GATEWAY-GRPC": 10,
        "GATEWAY-TLS": 12,
        "GATEWAY-TCP": 0,
        "GATEWAY-UDP": 0,
    }
