"""The users of each XBackend, found before resolution (weir.translate.users), are exactly those the
resolver meets while resolving routes: the Gateways weir's entries in the XBackend's status name.
Otherwise the egress policy would be decided for other classes than the status shows."""

from __future__ import annotations

import pytest
from test_golden import CASES, SETTINGS, TESTDATA

from weir.api.meta import MAX_PARENTS, ObjectKey
from weir.loader import load_text
from weir.resources import Resources
from weir.translate import translate
from weir.translate.gateways import accepted_classes, gateway_contexts
from weir.translate.grpcroutes import kind_conflicts
from weir.translate.users import xbackend_users


def _resources(name: str) -> Resources:
    source = TESTDATA / f"{name}.in.yaml"
    loaded, _ = load_text(source.read_text(), source.name)
    return Resources.from_objects(item.object for item in loaded)


def _status_users(status: dict[str, object], controller: str) -> set[ObjectKey]:
    out = set()
    for list_key, ref_key in (("parents", "parentRef"), ("ancestors", "ancestorRef")):
        for entry in status.get(list_key, ()) or ():  # type: ignore[attr-defined]
            if entry.get("controllerName") == controller:
                ref = entry[ref_key]
                out.add(ObjectKey("Gateway", ref["namespace"], ref["name"]))
    return out


@pytest.mark.parametrize("name", CASES)
def test_users_found_first_are_the_users_resolution_meets(name: str) -> None:
    resources = _resources(name)
    classes, _ = accepted_classes(resources, SETTINGS)
    gateways = gateway_contexts(resources, SETTINGS, classes)
    users, _ = xbackend_users(resources, gateways, kind_conflicts(resources, gateways))
    statuses = translate(resources, SETTINGS).statuses
    for key, status in statuses.items():
        if key.kind == "XBackend":
            shown, found = _status_users(status, SETTINGS.controller_name), users.get(key, set())
            if len(found) > MAX_PARENTS:  # a status holds at most that many (xbackend-status-cap)
                assert shown < found, key
            else:
                assert shown == found, key


def test_some_cases_have_users() -> None:
    found = 0
    for name in CASES:
        resources = _resources(name)
        classes, _ = accepted_classes(resources, SETTINGS)
        gateways = gateway_contexts(resources, SETTINGS, classes)
        found += bool(xbackend_users(resources, gateways, kind_conflicts(resources, gateways))[0])
    assert found >= 10
