"""Golden tests at the translate boundary: ``NAME.in.yaml`` → ``NAME.out.yaml`` (status + IR).

The IR is written without the fields at their defaults (:func:`weir.ir.to_data`'s ``omit_defaults``).

Regenerate with ``WEIR_UPDATE_GOLDEN=1 pytest tests/translate``; review the diff.
"""

from __future__ import annotations

import dataclasses
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
        # Fields at their defaults left out: a new IR field changes no golden until a case sets it.
        "ir": ir.to_data(result.ir, omit_defaults=True),
    }
    return yaml_text(data, width=100)


def _without_features(status: dict[str, Any]) -> dict[str, Any]:
    """A GatewayClass's ``supportedFeatures`` is the one constant list of :mod:`weir.features`
    (tests/features/test_features.py): left out here, so that each golden shows what its input decides."""
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


def test_goldens_leave_out_fields_at_their_defaults() -> None:
    upstream = ir.Upstream("service/default/web/80", ir.StaticEndpoints(()), ir.UpstreamProtocol.HTTP1)
    full = ir.to_data(upstream)
    short = ir.to_data(upstream, omit_defaults=True)
    assert set(short) < set(full) and "websocket" in full and "websocket" not in short
    assert short["name"] == "service/default/web/80"  # fields without a default always stay
    assert ir.to_data(dataclasses.replace(upstream, websocket=True), omit_defaults=True)["websocket"]
