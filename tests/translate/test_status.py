"""lastTransitionTime stability and the Programmed settlement from data-plane reports."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest

from unit_manifests import GATEWAY
from weir.api.meta import ObjectKey
from weir.loader import load_text
from weir.resources import Resources
from weir.status_store import StatusStore
from weir.translate import Settings, translate
from weir.translate import status as st
from weir.translate.status import DataPlaneState, apply_data_plane

GW = ObjectKey("Gateway", "default", "gw")


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def tick(self) -> None:
        self.now += dt.timedelta(minutes=1)


def gateway_status(programmed: bool = False) -> dict[str, Any]:
    return {
        "conditions": [
            st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "ok", 2).as_dict(),
            st.condition(
                st.PROGRAMMED, programmed, st.R_PROGRAMMED if programmed else st.R_PENDING, "m", 2
            ).as_dict(),
        ],
        "listeners": [
            {
                "name": "http",
                "conditions": [st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "ok", 2).as_dict()],
            },
        ],
    }


def route_status(reason: str) -> dict[str, Any]:
    return {
        "parents": [
            {
                "parentRef": {"name": "gw"},
                "controllerName": "weir.dev/gateway-controller",
                "conditions": [st.condition(st.ACCEPTED, reason == st.R_ACCEPTED, reason, "m", 1).as_dict()],
            }
        ]
    }


def times(status: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "lastTransitionTime":
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(status)
    return found


def test_times_stay_put_while_nothing_changes() -> None:
    clock = Clock()
    store = StatusStore(clock)
    store.publish({GW: gateway_status()})
    first = times(store.current[GW])
    assert first and set(first) == {"2026-01-01T00:00:00Z"}
    clock.tick()
    changed = store.publish({GW: gateway_status()})
    assert changed == set()
    assert times(store.current[GW]) == first


def test_only_the_changed_condition_gets_a_new_time() -> None:
    clock = Clock()
    store = StatusStore(clock)
    store.publish({GW: gateway_status(programmed=False)})
    clock.tick()
    assert store.publish({GW: gateway_status(programmed=True)}) == {GW}
    by_type = {c["type"]: c["lastTransitionTime"] for c in store.current[GW]["conditions"]}
    assert by_type == {"Accepted": "2026-01-01T00:00:00Z", "Programmed": "2026-01-01T00:01:00Z"}


def test_parent_entries_are_matched_by_reference_and_reason_changes_count() -> None:
    clock = Clock()
    store = StatusStore(clock)
    key = ObjectKey("HTTPRoute", "default", "r")
    store.publish({key: route_status(st.R_NO_MATCHING_PARENT)})
    clock.tick()
    store.publish({key: route_status(st.R_NOT_ALLOWED_BY_LISTENERS)})
    assert times(store.current[key]) == ["2026-01-01T00:01:00Z"]


def test_removed_objects_are_reported_as_changed() -> None:
    store = StatusStore(Clock())
    store.publish({GW: gateway_status()})
    assert store.publish({}) == {GW}


def sockets() -> dict[ObjectKey, dict[str, tuple[tuple[str, int], ...]]]:
    return {GW: {"http": (("127.0.0.1", 8080),)}}


def programmed_of(status: dict[str, Any]) -> tuple[str, str]:
    cond = next(c for c in status["conditions"] if c["type"] == "Programmed")
    return cond["status"], cond["reason"]


def test_programmed_needs_ack_and_bound_socket() -> None:
    statuses = {GW: gateway_status()}
    pending = apply_data_plane(statuses, sockets(), DataPlaneState(accepted=True))
    assert programmed_of(pending[GW]) == ("False", "Pending")
    done = apply_data_plane(
        statuses, sockets(), DataPlaneState(accepted=True, bound=frozenset({("127.0.0.1", 8080)}))
    )
    assert programmed_of(done[GW]) == ("True", "Programmed")
    listener = done[GW]["listeners"][0]
    assert programmed_of(listener) == ("True", "Programmed")
    assert statuses[GW] == gateway_status(), "the input must not be modified"


def test_a_nack_makes_programmed_false_with_envoys_words() -> None:
    result = apply_data_plane(
        {GW: gateway_status()}, sockets(), DataPlaneState(rejection="cannot bind 127.0.0.1:8080")
    )
    cond = next(c for c in result[GW]["conditions"] if c["type"] == "Programmed")
    assert (cond["status"], cond["reason"]) == ("False", "Invalid")
    assert "cannot bind 127.0.0.1:8080" in cond["message"]


def test_a_nack_naming_another_listener_leaves_this_gateway_programmed() -> None:
    state = DataPlaneState(
        rejection="Error adding/updating listener(s) 127.0.0.1:9999: cannot bind",
        rejected_sockets=frozenset({("127.0.0.1", 9999)}),
        bound=frozenset({("127.0.0.1", 8080)}),
    )
    result = apply_data_plane({GW: gateway_status()}, sockets(), state)
    assert programmed_of(result[GW]) == ("True", "Programmed")
    other = ObjectKey("Gateway", "default", "other")
    result = apply_data_plane({other: gateway_status()}, {other: {"http": (("127.0.0.1", 9999),)}}, state)
    assert programmed_of(result[other]) == ("False", "Invalid")


# ---------------------------------------------------------------- translate → StatusStore, end to end

CA_PEM = """\
-----BEGIN CERTIFICATE-----
MIIByTCCAW+gAwIBAgIUae74KTkJq+l/824xi9/iNeuJp5AwCgYIKoZIzj0EAwIw
QDEXMBUGA1UECgwOdHJ1c3RtZSB2MS4yLjExJTAjBgNVBAsMHFRlc3RpbmcgQ0Eg
I00wdGE2VmpyN2VCNGFrczEwIBcNMDAwMTAxMDAwMDAwWhgPMzAwMDAxMDEwMDAw
MDBaMEAxFzAVBgNVBAoMDnRydXN0bWUgdjEuMi4xMSUwIwYDVQQLDBxUZXN0aW5n
IENBICNNMHRhNlZqcjdlQjRha3MxMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE
AdIwphPuK0wfyQnfFGYENRiobbVV6cHWksHfAJIwcj79rIW+84KuzUVZMws6VGhQ
nWdAt7CW7v8NMO8NG6CRIKNFMEMwHQYDVR0OBBYEFDmQU0rSVrKXdG6gfMroESxJ
JoG6MBIGA1UdEwEB/wQIMAYBAf8CAQkwDgYDVR0PAQH/BAQDAgGGMAoGCCqGSM49
BAMCA0gAMEUCIQDOFeAsJDwCp04nbXDROm6h1FigiouiNQ1UJndi9lVZ6wIgB5Ba
2P16x6Ott2Vrs5XjcTW1rkMUufBvUmOfmzE49CA=
-----END CERTIFICATE-----
"""


def xbackend_manifests(one_ca: str = "ca") -> str:
    """A Gateway used by a route to two XBackends verified with a CA ConfigMap; ``one``'s CA is ``one_ca``."""
    head = (
        GATEWAY
        + """---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: apis, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /one}}]
    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: one}]
  - matches: [{path: {value: /two}}]
    backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: two}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ca, namespace: default}
data:
  ca.crt: |
"""
    )
    text = head + "".join(f"    {line}\n" for line in CA_PEM.splitlines())
    for name, ca in (("one", one_ca), ("two", "ca")):
        text += f"""\
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {{name: {name}, namespace: default}}
spec:
  type: ExternalHostname
  externalHostname: {{hostname: {name}.example.test}}
  port: {{port: 443}}
  tls:
    mode: ServerOnly
    validation:
      hostname: {name}.example.test
      caCertificateRefs: [{{group: "", kind: ConfigMap, name: {ca}}}]
"""
    return text


def translated(text: str) -> Mapping[ObjectKey, dict[str, Any]]:
    loaded, problems = load_text(text, "test.yaml")
    assert not [p for p in problems if p.severity == "error"], [str(p) for p in problems]
    return translate(Resources.from_objects(item.object for item in loaded), Settings()).statuses


def condition_times(statuses: Mapping[ObjectKey, dict[str, Any]]) -> dict[tuple[str, ...], str]:
    """Every condition's ``lastTransitionTime``, by object and place (entry, condition type)."""
    found: dict[tuple[str, ...], str] = {}

    def walk(key: str, where: tuple[str, ...], node: Any) -> None:
        if isinstance(node, dict):
            if "lastTransitionTime" in node and "type" in node:
                found[(key, *where, node["type"])] = node["lastTransitionTime"]
            for field, value in node.items():
                walk(key, (*where, field), value)
        elif isinstance(node, list):
            for item in node:
                place = str(item.get("name") or item.get("parentRef") or "") if isinstance(item, dict) else ""
                walk(key, (*where, place), item)

    for key, status in statuses.items():
        walk(str(key), (), status)
    return found


def test_translate_twice_then_break_one_ca_moves_only_that_xbackends_times() -> None:
    clock = Clock()
    store = StatusStore(clock)
    store.publish(translated(xbackend_manifests()))
    first = condition_times(store.current)
    keys = {key.kind for key in store.current}
    assert {"GatewayClass", "Gateway", "HTTPRoute", "XBackend"} <= keys
    assert first and set(first.values()) == {"2026-01-01T00:00:00Z"}

    clock.tick()
    assert store.publish(translated(xbackend_manifests())) == set(), "an unchanged reconcile changed status"
    assert condition_times(store.current) == first

    clock.tick()
    one = ObjectKey("XBackend", "default", "one")
    # The route's rule to it has no usable backend left: the route says so too (ResolvedRefs).
    route = ObjectKey("HTTPRoute", "default", "apis")
    assert store.publish(translated(xbackend_manifests(one_ca="missing"))) == {one, route}
    after = condition_times(store.current)
    assert after.keys() == first.keys()
    moved = {place: time for place, time in after.items() if time != first[place]}
    assert moved, "the broken XBackend's conditions kept their times"
    assert {place[0] for place in moved} == {str(one), str(route)}
    assert {place[-1] for place in moved if place[0] == str(one)} == {"Accepted", "ResolvedRefs"}
    assert {place[-1] for place in moved if place[0] == str(route)} == {"ResolvedRefs"}
    assert set(moved.values()) == {"2026-01-01T00:02:00Z"}
    [parent] = store.current[one]["parents"]
    assert {c["type"]: (c["status"], c["reason"]) for c in parent["conditions"]} == {
        "Accepted": ("False", "NoValidCACertificate"),
        "ResolvedRefs": ("False", "InvalidCACertificateRef"),
    }


def test_other_controllers_entries_keep_their_times() -> None:
    theirs = {
        "parentRef": {"name": "gw"},
        "controllerName": "example.com/other-controller",
        "conditions": [
            {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "theirs",
             "lastTransitionTime": "2025-06-01T00:00:00Z"},
        ],
    }  # fmt: skip
    key = ObjectKey("XBackend", "default", "api")
    store = StatusStore(Clock())
    store.publish({key: {"parents": [theirs, *route_status(st.R_ACCEPTED)["parents"]]}})
    assert store.current[key]["parents"][0] == theirs


# ---------------------------------------------------------------- static addresses Envoy cannot bind

UNUSABLE_NACK = (
    "Error adding/updating listener(s) 192.0.2.10:8080: cannot bind '192.0.2.10:8080': Cannot assign "
    "requested address, 127.0.0.1:9999: cannot bind '127.0.0.1:9999': Address already in use"
)
LISTENER_NAMES = {
    "192.0.2.10:8080": ("192.0.2.10", 8080),
    "127.0.0.2:8080": ("127.0.0.2", 8080),
    "127.0.0.1:9999": ("127.0.0.1", 9999),
}


def addressed_status(*addresses: str) -> dict[str, Any]:
    status = gateway_status()
    status["addresses"] = [{"type": "IPAddress", "value": a} for a in addresses]
    return status


def test_a_nack_is_attributed_per_socket_and_an_address_not_of_this_host_is_unusable() -> None:
    named, unusable = st.attribute_rejection(UNUSABLE_NACK, LISTENER_NAMES)
    assert named == {("192.0.2.10", 8080), ("127.0.0.1", 9999)}
    assert unusable == {("192.0.2.10", 8080)}, "only the address that is none of the host's"
    assert st.attribute_rejection(None, LISTENER_NAMES) == (frozenset(), frozenset())


def test_a_static_address_that_cannot_be_bound_is_address_not_usable_and_left_out() -> None:
    named, unusable = st.attribute_rejection(UNUSABLE_NACK, LISTENER_NAMES)
    state = DataPlaneState(
        rejection=UNUSABLE_NACK,
        rejected_sockets=named,
        unusable_sockets=unusable,
        bound=frozenset({("127.0.0.2", 8080)}),
    )
    both = {GW: {"http": (("192.0.2.10", 8080), ("127.0.0.2", 8080))}}
    result = apply_data_plane({GW: addressed_status("192.0.2.10", "127.0.0.2")}, both, state)
    cond = next(c for c in result[GW]["conditions"] if c["type"] == "Programmed")
    assert (cond["status"], cond["reason"]) == ("False", "AddressNotUsable")
    assert "192.0.2.10" in cond["message"] and "spec.addresses" in cond["message"]
    assert result[GW]["addresses"] == [{"type": "IPAddress", "value": "127.0.0.2"}]

    # A socket refused for another reason (a port in use) keeps the reason it had: Invalid.
    other = ObjectKey("Gateway", "default", "other")
    result = apply_data_plane(
        {other: addressed_status("127.0.0.1")}, {other: {"http": (("127.0.0.1", 9999),)}}, state
    )
    assert programmed_of(result[other]) == ("False", "Invalid")
    assert result[other]["addresses"] == [{"type": "IPAddress", "value": "127.0.0.1"}]
    # Both at once on one Gateway: the address is still left out, but Invalid says more.
    mixed = {GW: {"http": (("192.0.2.10", 8080),), "admin": (("127.0.0.1", 9999),)}}
    status = addressed_status("192.0.2.10", "127.0.0.1")
    status["listeners"].append({"name": "admin", "conditions": status["listeners"][0]["conditions"]})
    result = apply_data_plane({GW: status}, mixed, state)
    assert programmed_of(result[GW]) == ("False", "Invalid")
    assert result[GW]["addresses"] == [{"type": "IPAddress", "value": "127.0.0.1"}]


SHARING_WORLD = (
    GATEWAY
    + "".join(
        f"""---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{backendRefs: [{{group: gateway.networking.x-k8s.io, kind: XBackend, name: {backend}}}]}}]
"""
        for i, backend in enumerate(["x", "x", "x", "missing"])
    )
    + """---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: x, namespace: default}
spec: {type: ExternalHostname, externalHostname: {hostname: api.example.com}, port: {port: 443}}
"""
)


def _route_statuses() -> list[dict[str, Any]]:
    loaded, problems = load_text(SHARING_WORLD, "world.yaml")
    assert not problems
    result = translate(Resources.from_objects(item.object for item in loaded), Settings())
    return [result.statuses[ObjectKey("HTTPRoute", "default", f"r{i}")] for i in range(4)]


def test_equal_route_statuses_are_one_object() -> None:
    """Memory: the routes of one listener with equal conditions share their status, not copies."""
    r0, r1, r2, refused = _route_statuses()
    assert r0 is r1 is r2
    assert refused != r0
    assert refused["parents"][0]["parentRef"] is r0["parents"][0]["parentRef"]
    assert refused["parents"][0]["conditions"][0] is r0["parents"][0]["conditions"][0]  # Accepted


def test_two_translations_share_nothing() -> None:
    """The interner belongs to one pass: a second translation makes its own, equal statuses."""
    first, second = _route_statuses(), _route_statuses()
    assert first == second
    assert first[0] is not second[0]
    assert first[0]["parents"][0]["conditions"][0] is not second[0]["parents"][0]["conditions"][0]


def test_conditions_are_frozen_values() -> None:
    cond = st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "ok", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cond.message = "changed"  # type: ignore[misc]
    assert cond.as_dict() == {
        "type": "Accepted",
        "status": "True",
        "reason": "Accepted",
        "message": "ok",
        "observedGeneration": 3,
    }
    entry = st.AncestorStatus(st.ref_of({"kind": "Gateway", "name": "gw"}), "c", (cond,))
    assert st.entry_data(entry) == {
        "ancestorRef": {"kind": "Gateway", "name": "gw"},
        "controllerName": "c",
        "conditions": [cond.as_dict()],
    }
    assert entry != st.ParentStatus(entry.ref, "c", (cond,))  # the two forms are never confused


# ------------------------------------------------------------------ XBackend status in each CRD shape


def test_xbackend_status_reshaped_for_the_installed_crd() -> None:
    """A provider whose CRD has the other shape writes the status in the CRD's keys, never both."""
    from weir.api.xbackend_v1alpha1 import reshape_xbackend_status

    ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "n", "name": "gw"}
    ours = {"controllerName": "weir.dev/gateway", "parentRef": ref, "conditions": []}
    v16 = {"parents": [ours]}
    main = reshape_xbackend_status(v16, "main")
    assert main == {
        "ancestors": [{"controllerName": "weir.dev/gateway", "ancestorRef": ref, "conditions": []}]
    }
    assert reshape_xbackend_status(main, "v1.6") == v16
    assert reshape_xbackend_status(v16, "v1.6") == v16
    mixed = {"parents": [ours], "ancestors": [{**ours, "parentRef": None, "ancestorRef": ref}]}
    assert set(reshape_xbackend_status(mixed, "main")) == {"ancestors"}
