"""Kubernetes Events (``events.k8s.io/v1``) for the condition changes weir writes.

``kubectl describe gateway NAME`` lists an object's Events: weir reports one
each time a condition it writes changes its ``status`` or ``reason`` (an
Envoy NACK included: it is the Gateway's ``Programmed=False`` with Envoy's
error as message). Only the leader writes status, so only the leader reports.

* ``type`` is ``Warning`` for a condition that is not as it should be
  (``False``, or ``True`` for ``Conflicted``), else ``Normal``; ``reason`` is
  the condition's reason, ``note`` ``Type=Status: message``; ``action`` is
  ``StatusChanged``; ``reportingController`` weir's controller name;
  ``reportingInstance`` this replica's identity (the Lease's).
* **Rate-limited**: a token bucket (``burst`` Events, then one every
  ``interval_s``); an Event over the limit is dropped and counted
  (``weir_kubernetes_events_total{result="dropped"}``), never queued, so a
  change of thousands of objects costs the API server a bounded number of
  writes. Events are sent in the background, one at a time.
* A cluster-scoped object's (GatewayClass) Events go to the ``default``
  namespace, as the API server requires.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
import time
from collections.abc import Iterator
from typing import Any

from weir.providers.kubernetes.api import KubeApi, WatchedKind, describe
from weir.providers.kubernetes.metrics import KubeMetrics, error_code

__all__ = ["EVENT", "EventRecorder", "condition_changes"]

log = logging.getLogger("weir.kubernetes.events")

EVENT = WatchedKind("events.k8s.io", "v1", "Event", "events", True)
#: Conditions for which True is the bad news.
_NEGATIVE = frozenset({"Conflicted"})
_NOTE_MAX = 1024


def condition_changes(
    before: dict[str, Any] | None, after: dict[str, Any], controller_name: str
) -> Iterator[dict[str, Any]]:
    """The conditions in ``after`` (weir's own: top level, ``listeners[]``, weir's ``parents[]``
    and ``ancestors[]`` entries) whose ``status`` or ``reason`` is not what ``before`` said."""

    def table(conditions: Any) -> dict[Any, tuple[Any, Any]]:
        return {
            c.get("type"): (c.get("status"), c.get("reason")) for c in conditions or [] if isinstance(c, dict)
        }

    def changed(new: Any, old: Any) -> Iterator[dict[str, Any]]:
        known = table(old)
        for cond in new or []:
            if isinstance(cond, dict) and known.get(cond.get("type")) != (
                cond.get("status"),
                cond.get("reason"),
            ):
                yield cond

    before = before or {}
    yield from changed(after.get("conditions"), before.get("conditions"))
    old_listeners = {x.get("name"): x for x in before.get("listeners") or [] if isinstance(x, dict)}
    for listener in after.get("listeners") or []:
        yield from changed(
            listener.get("conditions"), (old_listeners.get(listener.get("name")) or {}).get("conditions")
        )
    for key, ref in (("parents", "parentRef"), ("ancestors", "ancestorRef")):
        old_entries = {
            repr(e.get(ref)): e
            for e in before.get(key) or []
            if isinstance(e, dict) and e.get("controllerName") == controller_name
        }
        for entry in after.get(key) or []:
            if isinstance(entry, dict) and entry.get("controllerName") == controller_name:
                yield from changed(
                    entry.get("conditions"), (old_entries.get(repr(entry.get(ref))) or {}).get("conditions")
                )


class EventRecorder:
    """Reports condition changes as Events (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        controller_name: str,
        instance: str,
        metrics: KubeMetrics,
        *,
        burst: int = 25,
        interval_s: float = 2.0,
    ) -> None:
        self._api = api
        self._controller = controller_name
        self._instance = instance[:128]
        self._metrics = metrics
        self._burst = burst
        self._interval = interval_s
        self._tokens = float(burst)
        self._refilled = time.monotonic()
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._failing: str | None = None

    def written(self, kind: WatchedKind, before: dict[str, Any] | None, obj: dict[str, Any]) -> None:
        """A status was written: ``before`` is what the object said, ``obj`` the object now."""
        after = obj.get("status") or {}
        for cond in condition_changes(before, after, self._controller):
            if not self._take():
                self._metrics.events.inc("dropped")
                continue
            self._queue.put_nowait(self._event(kind, obj, cond))

    def report(
        self, kind: WatchedKind, obj: dict[str, Any], reason: str, note: str, *, warning: bool = True
    ) -> None:
        """An Event about ``obj`` (its ``metadata`` suffices) that is not a condition change: a
        failure to create or update what weir keeps for it (same rate limit, action ``Reconcile``)."""
        if not self._take():
            self._metrics.events.inc("dropped")
            return
        event = self._event(kind, obj, {"type": None, "reason": reason, "message": note})
        event["action"] = "Reconcile"
        event["note"] = note[:_NOTE_MAX]
        event["type"] = "Warning" if warning else "Normal"
        self._queue.put_nowait(event)

    def _take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled) / self._interval)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def _event(self, kind: WatchedKind, obj: dict[str, Any], cond: dict[str, Any]) -> dict[str, Any]:
        metadata = obj.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        status, kind_of = cond.get("status"), cond.get("type")
        warning = (status == "True") if kind_of in _NEGATIVE else (status == "False")
        note = f"{kind_of}={status}: {(cond.get('message') or '').strip()}".rstrip(": ")
        return {
            "apiVersion": EVENT.api_version,
            "kind": EVENT.kind,
            "metadata": {"name": f"{metadata.get('name')}.{secrets.token_hex(8)}", "namespace": namespace},
            "eventTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": "StatusChanged",
            "reason": str(cond.get("reason") or kind_of)[:128],
            "note": note[:_NOTE_MAX],
            "type": "Warning" if warning else "Normal",
            "regarding": {
                "apiVersion": kind.api_version,
                "kind": kind.kind,
                "name": metadata.get("name"),
                "namespace": metadata.get("namespace") or None,
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
        }

    async def run(self) -> None:
        """Send queued Events until cancelled; a failure is logged once per kind of failure."""
        while True:
            event = await self._queue.get()
            try:
                await self._api.create(EVENT, event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._metrics.events.inc("failed")
                self._metrics.api_errors.inc(error_code(exc))
                if describe(exc) != self._failing:
                    log.warning("could not report an Event: %s", describe(exc))
                    self._failing = describe(exc)
            else:
                self._metrics.events.inc("created")
                self._failing = None
