"""lastTransitionTime stability and the Programmed settlement from data-plane reports."""

from __future__ import annotations

import datetime as dt
from typing import Any

from weir.api.meta import ObjectKey
from weir.status_store import StatusStore
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
            st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "ok", 2),
            st.condition(st.PROGRAMMED, programmed, st.R_PROGRAMMED if programmed else st.R_PENDING, "m", 2),
        ],
        "listeners": [
            {"name": "http", "conditions": [st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "ok", 2)]},
        ],
    }


def route_status(reason: str) -> dict[str, Any]:
    return {
        "parents": [
            {
                "parentRef": {"name": "gw"},
                "controllerName": "weir.dev/gateway-controller",
                "conditions": [st.condition(st.ACCEPTED, reason == st.R_ACCEPTED, reason, "m", 1)],
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
