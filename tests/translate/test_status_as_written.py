"""``status`` as written in manifests: whatever its shape, translation ignores what it cannot use.

``status`` is carried as plain data (weir keeps other controllers' entries
and reads a published Service's load balancer): ``status: {parents: 5}`` on
a route or XBackend, or ``{ancestors: 5}`` on a policy, passed validation
and made translation raise ``TypeError``; ``weir run`` then applied no
further change. Every golden input, with every object's status replaced by
each malformed shape, must translate exactly as with no status at all.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from weir import ir
from weir.api.core_v1 import Service
from weir.api.meta import KubeObject
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import Settings, translate

TESTDATA = Path(__file__).parent / "testdata"
CASES = sorted(p.name.removesuffix(".in.yaml") for p in TESTDATA.glob("*.in.yaml"))

_BAD_ENTRIES: list[Any] = [
    5,
    "x",
    None,
    [1],
    {"controllerName": 7, "parentRef": {"name": "gw"}},
    {"controllerName": "other.example/x", "parentRef": 5},
    {"controllerName": "other.example/x", "ancestorRef": "gw"},
    {"controllerName": "other.example/x", "parentRef": {"name": "gw"}, "conditions": 5},
    {"controllerName": "other.example/x", "ancestorRef": {"name": "gw"}, "conditions": [5]},
    {"controllerName": "other.example/x", "parentRef": {"name": b"gw"}},
    {"controllerName": "other.example/x", "parentRef": {1: "gw", "a": 2}},
    {"controllerName": "other.example/x", "parentRef": {"name": float("nan")}},
]
MALFORMED: list[dict[str, Any]] = [
    {"parents": 5},
    {"ancestors": 5},
    {"parents": "abc", "ancestors": {"a": 1}},
    {"parents": _BAD_ENTRIES, "ancestors": _BAD_ENTRIES},
    {"loadBalancer": 5},
    {"loadBalancer": {"ingress": 5}},
    {"loadBalancer": {"ingress": [5, {"ip": 5}, {"hostname": []}, "x"]}},
    {"conditions": 5, "addresses": 5, "listeners": 5},
]


def translated(objects: list[KubeObject], settings: Settings) -> tuple[Any, Any]:
    result = translate(Resources.from_objects(objects), settings)
    return {str(key): value for key, value in result.statuses.items()}, ir.to_data(result.ir)


@pytest.mark.parametrize("name", CASES)
def test_malformed_status_is_ignored_as_if_absent(name: str) -> None:
    source = TESTDATA / f"{name}.in.yaml"
    loaded, _ = load_text(source.read_text(), source.name)
    objects = [item.object.model_copy(update={"status": None}) for item in loaded]
    services = [obj for obj in objects if isinstance(obj, Service)]
    settings = Settings(
        dns_resolvers=(("127.0.0.1", 5353),), system_trust_file="/etc/ssl/certs/ca-certificates.crt"
    )
    if services:  # a published Service's status.loadBalancer is read too
        settings = dataclasses.replace(settings, publish_service=(services[0].namespace, services[0].name))
    expected = translated(objects, settings)
    for status in MALFORMED:
        mutated = [obj.model_copy(update={"status": status}) for obj in objects]
        assert translated(mutated, settings) == expected, status
