"""Status writes to the API server: only what weir manages, only what changed, never someone else's.

The controller hands over the statuses it publishes (translation's
``statuses``: GatewayClasses with weir's ``controllerName`` and what attaches
to them; nothing else). :class:`StatusWriter` writes each through the
``status`` subresource when, and only when, it differs from the status the
API server last showed for the object:

* **Times.** A condition whose ``status`` and ``reason`` are what the object
  already says keeps the ``lastTransitionTime`` the object has (a new leader,
  or a restarted weir, does not move every time forward).
* **Other controllers.** In ``status.parents`` (routes, XBackends) and
  ``status.ancestors`` (policies), entries whose ``controllerName`` is not
  weir's are taken from the object as it is *now*, then weir's own follow
  (at most 32 parents, 16 ancestors of a policy, 32 of an XBackend of upstream
  main's shape, as the Gateway API caps them: :func:`status_limits`).
* **Optimistic concurrency.** The patch carries the ``resourceVersion`` the
  status was compared with; a ``409 Conflict`` means someone wrote in
  between: the object is read again, merged again, written again.
* **Convergence.** weir's own write comes back as a ``MODIFIED`` event,
  which translation turns into the same statuses: they equal the object's,
  and nothing is written. Until the event arrives, the status written is
  what the object is compared with.
* **Leadership.** Nothing is written unless ``is_leader()`` says so, checked
  before every request; statuses keep being collected, and on becoming
  leader every object is compared and written where it differs.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from weir.api.meta import MAX_ANCESTORS, MAX_PARENTS, ObjectKey
from weir.api.xbackend_v1alpha1 import XBackend
from weir.providers.kubernetes.api import KubeApi, WatchedKind, describe, is_transient, status_code
from weir.providers.kubernetes.cache import ObjectCache
from weir.providers.kubernetes.metrics import KubeMetrics, error_code
from weir.providers.kubernetes.watch import Backoff, Outage

__all__ = ["StatusWriter", "merged_status", "status_limits"]

log = logging.getLogger("weir.kubernetes.status")

#: Conflicts in a row on one object before giving up until the next change.
MAX_CONFLICTS = 5


@dataclass(frozen=True)
class _Written:
    cached_version: str  # the cache's version of the object when the write returned
    version: str  # the object's version after the write
    status: dict[str, Any]


def status_limits(kind: str) -> dict[str, int]:
    """The most entries ``kind``'s ``status.parents`` and ``status.ancestors`` may hold.

    ``ancestors`` is a policy's (``PolicyStatus``: 16), except in an XBackend
    of upstream main's shape, where it replaces ``parents`` and keeps its 32.
    """
    ancestors = MAX_PARENTS if kind == XBackend.KIND else MAX_ANCESTORS
    return {"parents": MAX_PARENTS, "ancestors": ancestors}


def merged_status(
    desired: Mapping[str, Any], current: Mapping[str, Any] | None, controller_name: str, kind: str
) -> dict[str, Any]:
    """The status to write for an object of ``kind``: ``desired`` with other controllers' entries
    and unchanged times from ``current`` (see the module docstring). Neither argument is modified."""
    out = copy.deepcopy(dict(desired))
    current = current or {}
    for key, limit in status_limits(kind).items():
        if key not in out:
            continue
        ours = [
            e for e in out[key] or [] if isinstance(e, dict) and e.get("controllerName") == controller_name
        ]
        others = [
            e
            for e in current.get(key) or []
            if isinstance(e, dict) and e.get("controllerName") != controller_name
        ]
        out[key] = copy.deepcopy(others) + ours
        out[key] = out[key][:limit]
    _carry_times(out, current)
    return out


def _carry_times(node: Any, previous: Any) -> None:
    """Give each condition under ``node`` the ``lastTransitionTime`` of the same condition in
    ``previous`` when its ``status`` and ``reason`` are unchanged."""
    if not isinstance(node, dict):
        return
    for name, value in node.items():
        before = previous.get(name) if isinstance(previous, dict) else None
        if name == "conditions" and isinstance(value, list):
            old = {c.get("type"): c for c in before or [] if isinstance(c, dict)}
            for cond in value:
                prior = old.get(cond.get("type")) if isinstance(cond, dict) else None
                if (
                    prior is not None
                    and "lastTransitionTime" in prior
                    and prior.get("status") == cond.get("status")
                    and prior.get("reason") == cond.get("reason")
                ):
                    cond["lastTransitionTime"] = prior["lastTransitionTime"]
        elif isinstance(value, list):
            olds = {_identity(item): item for item in before or [] if isinstance(item, dict)}
            for item in value:
                if isinstance(item, dict):
                    _carry_times(item, olds.get(_identity(item)))
        elif isinstance(value, dict):
            _carry_times(value, before)


def _identity(item: dict[str, Any]) -> str:
    """What makes a list entry the same entry (a listener by name, a parent by reference and controller)."""
    if "parentRef" in item or "ancestorRef" in item:
        return json.dumps(
            [item.get("parentRef", item.get("ancestorRef")), item.get("controllerName")], sort_keys=True
        )
    return json.dumps(item.get("name"))


class StatusWriter:
    """Writes submitted statuses in the background (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        cache: ObjectCache,
        kinds: Mapping[str, WatchedKind],
        controller_name: str,
        is_leader: Callable[[], bool],
        backoff: Backoff,
        outage: Outage | None = None,
        metrics: KubeMetrics | None = None,
        on_written: Callable[[WatchedKind, dict[str, Any] | None, dict[str, Any]], None] | None = None,
    ) -> None:
        """``on_written(kind, status_before, object_after)`` is called after each status written
        (for Events)."""
        self._metrics = metrics or KubeMetrics()
        self._on_written = on_written
        self._api = api
        self._cache = cache
        self._kinds = kinds
        self._controller_name = controller_name
        self._is_leader = is_leader
        self._backoff = backoff
        self._outage = outage or Outage()
        self._failing: set[ObjectKey] = set()
        self._desired: Mapping[ObjectKey, dict[str, Any]] = {}
        self._dirty: set[ObjectKey] = set()
        self._written: dict[ObjectKey, _Written] = {}
        # Per object, the status last found equal to the object's, and the object's version then: the
        # status store hands over the same dict while a status does not change, so most objects are
        # settled by an identity check instead of a merge and a comparison.
        self._confirmed: dict[ObjectKey, tuple[dict[str, Any], str]] = {}
        self._wake = asyncio.Event()
        #: Writes made and conflicts met (for logs and tests).
        self.writes = 0
        self.conflicts = 0

    def submit(self, statuses: Mapping[ObjectKey, dict[str, Any]]) -> None:
        """The statuses weir publishes now (the mapping is kept, not copied: do not modify it)."""
        self._desired = statuses
        self._dirty = set(statuses)
        for remembered in (self._written, self._confirmed):
            for key in [k for k in remembered if k not in statuses]:  # objects weir no longer reports on
                del remembered[key]
        self._failing &= self._dirty
        self._wake.set()

    def resync(self) -> None:
        """Compare every object again (on becoming leader)."""
        self._dirty = set(self._desired)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._is_leader():
                continue
            failed = False
            for key in sorted(self._dirty):
                if not self._is_leader():
                    break
                self._dirty.discard(key)
                try:
                    await self._write(key)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._dirty.add(key)
                    failed = True
                    self._metrics.api_errors.inc(error_code(exc))
                    self._metrics.status_writes.inc(key.kind, "error")
                    if is_transient(exc):  # the API server is away: try them all again later
                        self._outage.failed(f"status of {key} not written: {describe(exc)}; retrying")
                        break
                    level = logging.DEBUG if key in self._failing else logging.WARNING
                    log.log(level, "status of %s not written: %s; retrying", key, describe(exc))
                    self._failing.add(key)
                else:
                    self._failing.discard(key)
            if failed:
                await self._backoff.wait()
                self._wake.set()
            else:
                self._backoff.reset()
                self._outage.recovered()

    def _live(self, key: ObjectKey) -> tuple[str, dict[str, Any] | None] | None:
        cached = self._cache.live(key)
        if cached is None:
            self._written.pop(key, None)
            self._confirmed.pop(key, None)
            return None
        written = self._written.get(key)
        if written is not None:
            if written.cached_version == cached[0]:
                return written.version, written.status  # the watch has not brought our write back yet
            del self._written[key]
        return cached

    async def _write(self, key: ObjectKey) -> None:
        kind = self._kinds.get(key.kind)
        desired = self._desired.get(key)
        live = self._live(key)
        if kind is None or desired is None or live is None:
            return  # not a kind weir watches, or the object is gone
        confirmed = self._confirmed.get(key)
        if confirmed is not None and confirmed[0] is desired and confirmed[1] == live[0]:
            return  # this very status was found written at this version: no need to compare again
        for _ in range(MAX_CONFLICTS):
            version, current = live
            body = merged_status(desired, current, self._controller_name, key.kind)
            if body == (current or {}):
                self._confirmed[key] = (desired, version)
                return
            patch = {**{name: None for name in current or {} if name not in body}, **body}
            if not self._is_leader():
                return
            try:
                result = await self._api.patch_status(kind, key.namespace, key.name, version, patch)
            except Exception as exc:
                code = status_code(exc)
                if code == 404:
                    return
                if code != 409:
                    raise
                self.conflicts += 1
                self._metrics.status_writes.inc(key.kind, "conflict")
                fresh = await self._api.get(kind, key.namespace, key.name)
                if fresh is None:
                    return
                live = (str(fresh.get("metadata", {}).get("resourceVersion") or ""), fresh.get("status"))
                continue
            self.writes += 1
            self._metrics.status_writes.inc(key.kind, "written")
            if self._on_written is not None:
                self._on_written(kind, current, result)
            cached = self._cache.live(key)
            self._written[key] = _Written(
                cached[0] if cached else "",
                str((result.get("metadata") or {}).get("resourceVersion") or ""),
                result.get("status") or body,
            )
            log.debug("wrote the status of %s", key)
            return
        log.warning(
            "status of %s not written: %d conflicts in a row; trying again on the next change",
            key,
            MAX_CONFLICTS,
        )
