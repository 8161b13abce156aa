"""Golden tests at the translate boundary: ``NAME.in.yaml`` → ``NAME.out.yaml`` (status + IR).

Regenerate with ``WEIR_UPDATE_GOLDEN=1 pytest tests/translate``; review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from weir import ir
from weir.cli import yaml_text
from weir.features import SUPPORTED_FEATURES
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import Settings, translate

TESTDATA = Path(__file__).parent / "testdata"
CASES = sorted(p.name.removesuffix(".in.yaml") for p in TESTDATA.glob("*.in.yaml"))
SETTINGS = Settings(
    dns_resolvers=(("127.0.0.1", 5353),), system_trust_file="/etc/ssl/certs/ca-certificates.crt"
)


def render(name: str) -> str:
    source = TESTDATA / f"{name}.in.yaml"
    loaded, problems = load_text(source.read_text(), str(source.name))
    assert not [p for p in problems if p.severity == "error"], [str(p) for p in problems]
    result = translate(Resources.from_objects(item.object for item in loaded), SETTINGS)
    data = {
        "status": {str(key): _without_features(value) for key, value in result.statuses.items()},
        "ir": ir.to_data(result.ir),
    }
    return yaml_text(data, width=100)


def _without_features(status: dict[str, Any]) -> dict[str, Any]:
    """A GatewayClass's ``supportedFeatures`` is the one constant list of :mod:`weir.features`
    (tests/unit/test_features.py): left out here, so that each golden shows what its input decides."""
    if status.get("supportedFeatures") == [{"name": n} for n in SUPPORTED_FEATURES]:
        return {k: v for k, v in status.items() if k != "supportedFeatures"}
    return status


@pytest.mark.parametrize("name", CASES)
def test_golden(name: str) -> None:
    out = TESTDATA / f"{name}.out.yaml"
    got = render(name)
    if os.environ.get("WEIR_UPDATE_GOLDEN") == "1":
        out.write_text(got)
    assert out.exists(), f"{out.name} missing: run with WEIR_UPDATE_GOLDEN=1 and review it"
    assert got == out.read_text()


@pytest.mark.parametrize("name", CASES)
def test_deterministic(name: str) -> None:
    assert render(name) == render(name)


def test_there_are_cases() -> None:
    assert len(CASES) >= 8
