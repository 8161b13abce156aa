"""weir claims a Gateway API feature (GatewayClass ``status.supportedFeatures``, weir.features)
only when a case of this suite shows it: each listed case must exist and not be pending."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

from weir.features import FEATURES, GATEWAY_SERVICES_FEATURES, SUPPORTED_FEATURES, supported_features

from .cases import Case

MODULES = ("test_gateway", "test_httproute", "test_grpcroute", "test_tlsroute", "test_referencegrant")
MODULES += ("test_backendtlspolicy", "test_listenerset", "test_tcproute", "test_udproute")


def all_cases() -> Iterator[Case]:
    for name in MODULES:
        module = importlib.import_module(f"{__package__}.{name}")
        for value in vars(module).values():
            for item in value if isinstance(value, list | tuple) else ():
                case = item if isinstance(item, Case) else getattr(item, "case", None)
                if isinstance(case, Case):
                    yield case


def shown_by_functions() -> set[str]:
    """The upstream test names the suite shows with a test function of its own (one that needs more
    than a table row: weights, mirrors, WebSocket, sessions): ``test_NAME``, or a parameter of one
    whose pytest id is ``NAME``. Such a test cannot be pending: it passes or fails."""
    names: set[str] = set()
    for name in MODULES:
        module = importlib.import_module(f"{__package__}.{name}")
        for attr, value in vars(module).items():
            if not attr.startswith("test_") or not callable(value):
                continue
            names.add(attr.removeprefix("test_"))
            for mark in getattr(value, "pytestmark", ()):
                if mark.name == "parametrize":
                    names.update(p.id for p in mark.args[1] if getattr(p, "id", None))
    return names


#: Cases that need a real API server (weir creates objects in the cluster), in tests/kube.
KUBE_CASES = Path(__file__).resolve().parents[1] / "kube" / "test_envtest_gateway_infrastructure.py"


def shown_on_a_real_api_server() -> set[str]:
    """Upstream test names shown by a ``test_NAME`` function of :data:`KUBE_CASES` (read, not
    imported: tests/kube's helpers import from its own folder)."""
    tree = ast.parse(KUBE_CASES.read_text())
    return {
        node.name.removeprefix("test_")
        for node in tree.body
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name.startswith("test_")
    }


def test_every_claimed_feature_is_shown_by_passing_cases() -> None:
    cases = {case.name: case for case in all_cases()}
    assert len(cases) > 50, "the suite's cases were not found"
    functions = shown_by_functions()
    kube = shown_on_a_real_api_server()
    assert "GatewayInfrastructure" in kube
    for feature, names in FEATURES.items():
        assert names, f"{feature}: no case shows it"
        for name in names:
            if name in functions or (feature in GATEWAY_SERVICES_FEATURES and name in kube):
                continue
            assert name in cases, f"{feature}: no case {name} in tests/conformance"
            assert cases[name].pending is None, f"{feature}: case {name} is pending ({cases[name].pending})"


def test_supported_features_are_sorted_and_named_as_upstream_names_them() -> None:
    assert list(SUPPORTED_FEATURES) == sorted(set(FEATURES) - GATEWAY_SERVICES_FEATURES)
    assert list(supported_features(gateway_services=True)) == sorted(FEATURES)
    assert set(FEATURES) >= GATEWAY_SERVICES_FEATURES
    assert all(name[0].isupper() and name.isalnum() for name in SUPPORTED_FEATURES)
