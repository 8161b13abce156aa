"""The statuses weir last published, with ``lastTransitionTime`` kept honest.

Translation produces conditions without times. :class:`StatusStore` adds
``lastTransitionTime``: a condition keeps the time it had when its
``status`` and ``reason`` are unchanged, and gets the current time when
either changes or it is new. A condition that already carries a time (an entry
written by another controller, kept as it was) is left alone. Conditions are
matched by their place in the
status: the top-level list, a listener (by ``name``) or a parent/ancestor
entry (by reference and ``controllerName``).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

from weir.api.meta import ObjectKey

Clock = Callable[[], dt.datetime]


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class StatusStore:
    def __init__(self, clock: Clock = _utcnow) -> None:
        self._clock = clock
        self._current: dict[ObjectKey, dict[str, Any]] = {}
        # What was published last, per key, before stamping (a private copy). A status
        # given again unchanged keeps its stamped version as it is: stamping it again
        # would give the same result, after deep-copying every status of every object.
        self._given: dict[ObjectKey, dict[str, Any]] = {}

    @property
    def current(self) -> Mapping[ObjectKey, dict[str, Any]]:
        return self._current

    def publish(self, statuses: Mapping[ObjectKey, dict[str, Any]]) -> set[ObjectKey]:
        """Replace the stored statuses with ``statuses``, stamped; return the keys whose status changed."""
        now = self._clock().replace(microsecond=0).isoformat().replace("+00:00", "Z")
        new: dict[ObjectKey, dict[str, Any]] = {}
        given: dict[ObjectKey, dict[str, Any]] = {}
        changed: set[ObjectKey] = set()
        for key, status in statuses.items():
            previous = self._current.get(key)
            before = self._given.get(key)
            if previous is not None and before is not None and before == status:
                new[key], given[key] = previous, before
                continue
            given[key] = copy.deepcopy(status)
            stamped = copy.deepcopy(status)
            _stamp(stamped, previous, now)
            new[key] = stamped
            if stamped != previous:
                changed.add(key)
        changed.update(set(self._current) - set(new))
        self._current = new
        self._given = given
        return changed


def _stamp(node: Any, previous: Any, now: str) -> None:
    """Add ``lastTransitionTime`` to every condition list under ``node``."""
    if not isinstance(node, dict):
        return
    for field, value in node.items():
        before = previous.get(field) if isinstance(previous, dict) else None
        if field == "conditions" and isinstance(value, list):
            old = {c.get("type"): c for c in before or [] if isinstance(c, dict)}
            for cond in value:
                if "lastTransitionTime" in cond:
                    continue  # another controller's condition, carried through as it was written
                prior = old.get(cond.get("type"))
                same = (
                    prior is not None
                    and prior.get("status") == cond.get("status")
                    and prior.get("reason") == cond.get("reason")
                    and "lastTransitionTime" in prior
                )
                cond["lastTransitionTime"] = prior["lastTransitionTime"] if same and prior else now
        elif isinstance(value, list):
            olds = {_identity(item): item for item in before or [] if isinstance(item, dict)}
            for item in value:
                if isinstance(item, dict):
                    _stamp(item, olds.get(_identity(item)), now)
        elif isinstance(value, dict):
            _stamp(value, before, now)


def _identity(item: dict[str, Any]) -> str:
    """What makes a list entry the same entry across updates."""
    if "parentRef" in item or "ancestorRef" in item:
        ref = item.get("parentRef", item.get("ancestorRef"))
        return json.dumps([ref, item.get("controllerName")], sort_keys=True)
    return json.dumps(item.get("name"))
