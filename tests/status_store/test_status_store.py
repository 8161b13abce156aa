"""weir.status_store: statuses are values, kept by reference; stamping as the deep-copying store did.

``test_status.py`` covers what ``lastTransitionTime`` means; this file holds
the store to the contract that makes an unchanged status free (an identity
check, no copy), and checks over random sequences of publishes that the
result is exactly what the previous implementation (deep copies, stamping
in place; :class:`ReferenceStore` below) gave.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.api.meta import ObjectKey
from weir.status_store import StatusStore

OURS = "weir.dev/gateway-controller"
GW = ObjectKey("Gateway", "default", "gw")
ROUTE = ObjectKey("HTTPRoute", "default", "r")


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def tick(self) -> None:
        self.now += dt.timedelta(minutes=1)


# ---------------------------------------------------------------- the previous implementation


class ReferenceStore:
    """weir.status_store as it was before statuses were kept by reference (commit f7f3cb2)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.current: dict[ObjectKey, dict[str, Any]] = {}
        self._given: dict[ObjectKey, dict[str, Any]] = {}

    def publish(self, statuses: Mapping[ObjectKey, dict[str, Any]]) -> set[ObjectKey]:
        now = self._clock().replace(microsecond=0).isoformat().replace("+00:00", "Z")
        new: dict[ObjectKey, dict[str, Any]] = {}
        given: dict[ObjectKey, dict[str, Any]] = {}
        changed: set[ObjectKey] = set()
        for key, status in statuses.items():
            previous = self.current.get(key)
            before = self._given.get(key)
            if previous is not None and before is not None and before == status:
                new[key], given[key] = previous, before
                continue
            given[key] = copy.deepcopy(status)
            stamped = copy.deepcopy(status)
            _reference_stamp(stamped, previous, now)
            new[key] = stamped
            if stamped != previous:
                changed.add(key)
        changed.update(set(self.current) - set(new))
        self.current = new
        self._given = given
        return changed


def _reference_stamp(node: Any, previous: Any, now: str) -> None:
    if not isinstance(node, dict):
        return
    for field, value in node.items():
        before = previous.get(field) if isinstance(previous, dict) else None
        if field == "conditions" and isinstance(value, list):
            old = {c.get("type"): c for c in before or [] if isinstance(c, dict)}
            for cond in value:
                if "lastTransitionTime" in cond:
                    continue
                prior = old.get(cond.get("type"))
                same = (
                    prior is not None
                    and prior.get("status") == cond.get("status")
                    and prior.get("reason") == cond.get("reason")
                    and "lastTransitionTime" in prior
                )
                cond["lastTransitionTime"] = prior["lastTransitionTime"] if same and prior else now
        elif isinstance(value, list):
            olds = {_reference_identity(item): item for item in before or [] if isinstance(item, dict)}
            for item in value:
                if isinstance(item, dict):
                    _reference_stamp(item, olds.get(_reference_identity(item)), now)
        elif isinstance(value, dict):
            _reference_stamp(value, before, now)


def _reference_identity(item: dict[str, Any]) -> str:
    if "parentRef" in item or "ancestorRef" in item:
        ref = item.get("parentRef", item.get("ancestorRef"))
        return json.dumps([ref, item.get("controllerName")], sort_keys=True)
    return json.dumps(item.get("name"))


# ---------------------------------------------------------------- random statuses


def condition(kind: str, ok: bool, reason: str, time: str | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": f"{kind} {reason}",
        "observedGeneration": 1,
    }
    if time is not None:
        cond["lastTransitionTime"] = time
    return cond


conditions = st.lists(
    st.builds(
        condition,
        st.sampled_from(["Accepted", "ResolvedRefs", "Programmed"]),
        st.booleans(),
        st.sampled_from(["Accepted", "Pending", "Invalid"]),
    ),
    max_size=3,
    unique_by=lambda c: c["type"],
)

parent = st.builds(
    lambda name, theirs, conds: {
        "parentRef": {"name": name},
        "controllerName": "example.com/other" if theirs else OURS,
        # Another controller's entries carry their own times, which the store must leave alone.
        "conditions": [{**c, "lastTransitionTime": "2025-01-01T00:00:00Z"} for c in conds]
        if theirs
        else conds,
    },
    st.sampled_from(["gw", "other"]),
    st.booleans(),
    conditions,
)

route_status = st.builds(lambda parents: {"parents": parents}, st.lists(parent, max_size=3))

gateway_status = st.builds(
    lambda conds, listeners, addresses: {
        "conditions": conds,
        "listeners": [{"name": n, "attachedRoutes": 1, "conditions": c} for n, c in listeners],
        "addresses": [{"type": "IPAddress", "value": a} for a in addresses],
    },
    conditions,
    st.lists(st.tuples(st.sampled_from(["http", "https"]), conditions), max_size=2, unique_by=lambda t: t[0]),
    st.lists(st.sampled_from(["127.0.0.1", "127.0.0.2"]), max_size=2),
)

KEYS = [GW, ROUTE, ObjectKey("HTTPRoute", "default", "r2"), ObjectKey("XBackend", "default", "x")]

#: What to give for a key at one publish: a new status, the very dict given last time, an equal copy
#: of it, or nothing (the object is gone).
step = st.fixed_dictionaries(
    {
        key: st.one_of(
            gateway_status if key.kind == "Gateway" else route_status,
            st.sampled_from(["same", "copy", "gone"]),
        )
        for key in KEYS
    }
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=8))
def test_publishing_gives_what_the_deep_copying_store_gave(steps: list[dict[ObjectKey, Any]]) -> None:
    clock = Clock()
    store, reference = StatusStore(clock), ReferenceStore(clock)
    last: dict[ObjectKey, dict[str, Any]] = {}
    for plan in steps:
        statuses: dict[ObjectKey, dict[str, Any]] = {}
        for key, what in plan.items():
            if what == "gone" or (isinstance(what, str) and key not in last):
                continue
            statuses[key] = (
                last[key] if what == "same" else copy.deepcopy(last[key]) if what == "copy" else what
            )
        as_given = {key: copy.deepcopy(status) for key, status in statuses.items()}
        assert store.publish(statuses) == reference.publish(statuses)
        assert store.current == reference.current
        assert statuses == as_given, "publishing modified a status it was given"
        last = statuses
        clock.tick()


# ---------------------------------------------------------------- by reference


class NotComparable(dict[str, Any]):
    """A status that must never be compared: the same dict given again is recognised by identity."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        raise AssertionError("compared a status given again as the same dict")

    def __ne__(self, other: object) -> bool:
        raise AssertionError("compared a status given again as the same dict")


def test_the_same_dict_again_is_not_compared_and_keeps_its_stamped_status() -> None:
    clock = Clock()
    store = StatusStore(clock)
    status = NotComparable(route_status_of("Accepted"))
    assert store.publish({ROUTE: status}) == {ROUTE}
    stamped = store.current[ROUTE]
    clock.tick()
    assert store.publish({ROUTE: status}) == set()
    assert store.current[ROUTE] is stamped, "an unchanged status must stay the very same dict"


def test_an_equal_status_keeps_the_stamped_dict_and_its_times() -> None:
    clock = Clock()
    store = StatusStore(clock)
    first = {"conditions": [condition("Accepted", True, "Accepted")]}
    store.publish({GW: first})
    stamped = store.current[GW]
    clock.tick()
    assert store.publish({GW: copy.deepcopy(first)}) == set()
    assert store.current[GW] is stamped
    assert stamped["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_what_is_given_is_not_modified_and_what_is_published_is_stamped() -> None:
    store = StatusStore(Clock())
    status = {
        "conditions": [condition("Accepted", True, "Accepted")],
        "listeners": [{"name": "http", "conditions": [condition("Programmed", False, "Pending")]}],
    }
    as_given = copy.deepcopy(status)
    store.publish({GW: status})
    assert status == as_given
    published = store.current[GW]
    assert published["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert published["listeners"][0]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def route_status_of(reason: str) -> dict[str, Any]:
    accepted = condition("Accepted", reason == "Accepted", reason)
    return {"parents": [{"parentRef": {"name": "gw"}, "controllerName": OURS, "conditions": [accepted]}]}


def test_only_the_status_that_changed_is_stamped_again() -> None:
    clock = Clock()
    store = StatusStore(clock)
    routes = {ObjectKey("HTTPRoute", "default", f"r{i}"): route_status_of("Accepted") for i in range(50)}
    store.publish(routes)
    before = dict(store.current)
    clock.tick()
    one = ObjectKey("HTTPRoute", "default", "r7")
    assert store.publish({**routes, one: route_status_of("NotAllowedByListeners")}) == {one}
    assert [key for key in routes if store.current[key] is not before[key]] == [one]
    [cond] = store.current[one]["parents"][0]["conditions"]
    assert (cond["reason"], cond["lastTransitionTime"]) == ("NotAllowedByListeners", "2026-01-01T00:01:00Z")


def test_equal_stamped_parts_of_one_publish_are_one_object() -> None:
    """Memory: 2,500 routes accepted on one listener hold one status, not 2,500 equal copies."""
    clock = Clock()
    store = StatusStore(clock)
    routes = {ObjectKey("HTTPRoute", "default", f"r{i}"): route_status_of("Accepted") for i in range(50)}
    other = ObjectKey("HTTPRoute", "default", "refused")
    store.publish({**routes, other: route_status_of("NotAllowedByListeners")})
    published = [store.current[key] for key in routes]
    assert all(status is published[0] for status in published)
    refused = store.current[other]["parents"][0]
    assert refused is not published[0]["parents"][0]
    assert refused["parentRef"] is published[0]["parents"][0]["parentRef"]
    # A later publish stamps what changed at its own time: equal content, but not the same time.
    clock.tick()
    one = ObjectKey("HTTPRoute", "default", "r7")
    store.publish({**routes, other: route_status_of("Accepted"), one: route_status_of("Invalid")})
    assert store.current[other] is not published[0]
    assert store.current[other]["parents"][0]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:01:00Z"
    assert store.current[ObjectKey("HTTPRoute", "default", "r8")] is published[0]
