"""Open watches: what each one selects, and how a change looks to it.

A :class:`Watcher` belongs to the event loop that serves its HTTP stream;
the store hands it changes from any thread through :meth:`Watcher.push`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from dataclasses import dataclass
from typing import Any

from apiserver_double.kinds import KindInfo
from apiserver_double.selectors import Selector

__all__ = ["Event", "Obj", "WatchItem", "Watcher", "meta_of", "render"]

Obj = dict[str, Any]

#: What a watch's queue carries: ``(type, object)`` with type ``ADDED``, ``MODIFIED``,
#: ``DELETED``, ``BOOKMARK`` or ``ERROR`` (object: a Status), or ``("END", None)``.
WatchItem = tuple[str, Obj | None]


def meta_of(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


@dataclass(frozen=True)
class Event:
    """One committed change, as history keeps it (``old``: the object before an update)."""

    rv: int
    type: str
    resource: tuple[str, str]
    obj: Obj
    old: Obj | None


class Watcher:
    """One open watch: which objects it wants, and the queue its events arrive on.

    Created by :meth:`Store.watch` on the thread of ``loop``; consumed there.
    """

    def __init__(
        self,
        info: KindInfo,
        namespace: str,
        labels: Selector,
        fields: Selector,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.info = info
        self.namespace = namespace
        self._labels = labels
        self._fields = fields
        self._loop = loop
        self.queue: asyncio.Queue[WatchItem] = asyncio.Queue()

    def matches(self, obj: Obj) -> bool:
        if self.namespace and meta_of(obj).get("namespace") != self.namespace:
            return False
        return self._labels(obj) and self._fields(obj)

    def view(self, event: Event) -> WatchItem | None:
        """The event as this watch sees it: an update that makes an object enter (leave) the
        selection is an ``ADDED`` (``DELETED``), as the API server reports it."""
        now = self.matches(event.obj)
        if event.type != "MODIFIED":
            return (event.type, self.render(event.obj)) if now else None
        before = event.old is not None and self.matches(event.old)
        if now:
            return ("MODIFIED" if before else "ADDED", self.render(event.obj))
        return ("DELETED", self.render(event.obj)) if before else None

    def render(self, obj: Obj) -> Obj:
        return render(self.info, obj)

    def push(self, item: WatchItem) -> None:
        """Queue ``item`` from any thread; a watch whose loop has closed is simply gone."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)


def render(info: KindInfo, obj: Obj, *, list_item: bool = False) -> Obj:
    """A copy of a stored object as served under ``info``'s version.

    Items of a built-in kind's list carry no ``apiVersion``/``kind`` (the
    real API server leaves them out); everything else carries both.
    """
    out = copy.deepcopy(obj)
    out.pop("apiVersion", None)
    out.pop("kind", None)
    if list_item and info.builtin:
        return out
    return {"apiVersion": info.api_version, "kind": info.kind, **out}
