"""List, then watch, one kind: the loop that keeps the cache equal to the API server.

One :class:`KindWatcher` per kind (and per namespace when ``--namespace``
limits namespaced kinds) runs :meth:`KindWatcher.run` until cancelled:

1. **List** the kind; the list replaces the kind's objects in the cache (so
   an object deleted while weir was not watching disappears) and gives the
   ``resourceVersion`` to watch from.
2. **Watch** from that version, with bookmarks. Every event, a ``BOOKMARK``
   included, advances the version; ``ADDED``/``MODIFIED``/``DELETED`` go to
   the cache in order. The server closes the stream after a few minutes and
   the watch goes on from the last version: nothing is missed in between.
3. **410 Gone** (the version was compacted away, in an ``ERROR`` event or
   as the answer to a new watch): list again (step 1).
4. **The API server goes away** (connection refused or cut, a timeout, 5xx,
   429): wait (exponential backoff, capped, jittered), then watch again from
   the last version, which the server replays from its history, or answers
   410 and step 3 relists. No event is lost either way.
5. **404 on the list** (a CRD that is not installed, e.g. XBackend without
   the experimental channel): the cache marks the kind unserved (translation
   then refuses references to it with ``InvalidKind``, and the provider logs
   one line); the kind is probed again every ``reprobe_s`` until its CRD
   appears, then listed and watched like any other. A CRD removed while
   watched answers 404 to the next watch: same treatment.

A stream that stays silent (not even a bookmark) for longer than the
server's own timeout plus a margin is assumed dead and replaced, so a
half-open connection cannot stall a kind forever.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from weir.providers.kubernetes.api import KubeApi, WatchedKind, describe, is_transient, status_code
from weir.providers.kubernetes.cache import ObjectCache
from weir.providers.kubernetes.metrics import KubeMetrics, error_code

__all__ = ["Backoff", "KindWatcher", "Outage", "WatchTiming", "version_too_large"]

log = logging.getLogger("weir.kubernetes")


@dataclass(frozen=True)
class WatchTiming:
    """How often and how long: ``reprobe_s`` between probes of a kind that is not served;
    ``server_timeout_s`` asked of the server for each watch request (randomised up to twice, as
    client-go does, so that watches do not all reconnect together), and past it by
    ``silence_margin_s`` a silent stream is dead; backoff from
    ``backoff_initial_s`` doubling up to ``backoff_max_s``."""

    reprobe_s: float = 30.0
    server_timeout_s: int = 300
    #: How long after the server should have ended a watch (its timeout) a silent stream is
    #: taken for a dead connection.
    silence_margin_s: float = 30.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 10.0


class Backoff:
    """Exponential backoff with full jitter: each delay is uniform in [d/2, d], d doubling to ``cap``."""

    def __init__(self, initial: float, cap: float) -> None:
        self._initial = initial
        self._cap = cap
        self._next = initial

    def reset(self) -> None:
        self._next = self._initial

    def delay(self) -> float:
        current = self._next
        self._next = min(self._cap, self._next * 2)
        return random.uniform(current / 2, current)

    async def wait(self) -> None:
        await asyncio.sleep(self.delay())


class Outage:
    """Says once that the API server cannot be reached, and once that it can again, however many
    watchers (and writers) notice: an API server restart is two log lines, not two per kind."""

    def __init__(self) -> None:
        self._failing = 0
        self._since = 0.0

    def failed(self, what: str) -> None:
        """A call failed for a reason that retrying may fix (``what`` says which and what next)."""
        if self._failing == 0:
            self._since = time.monotonic()
            log.warning("cannot reach the API server: %s; every watch resumes when it is back", what)
        else:
            log.debug("%s", what)
        self._failing += 1

    def recovered(self) -> None:
        """A caller that had failed succeeded."""
        if self._failing > 0:
            log.info("the API server answers again (after %.1f s)", time.monotonic() - self._since)
        self._failing = 0


class _Gone(Exception):
    """The version to watch from is no longer available: list again."""


class _HistoryLost(Exception):
    """The API server has no such version (yet): its storage lost the history weir watched from."""


def version_too_large(exc: BaseException) -> bool:
    """Whether a watch failed because the server does not have the version asked for: it is
    newer than anything the server knows (``Too large resource version``, a 504 with the cause
    ``ResourceVersionTooLarge``). A server with intact storage never answers so to a version it
    sent; it does once etcd was restored from a backup or wiped, and then it will not send the
    changes in between: only a new list sees them."""
    if status_code(exc) != 504:
        return False
    status = getattr(exc, "status", None)
    details = getattr(status, "details", None)
    causes = getattr(details, "causes", None) or []
    if any(getattr(cause, "reason", None) == "ResourceVersionTooLarge" for cause in causes):
        return True
    return "too large resource version" in (getattr(status, "message", "") or "").lower()


class _NotServed(Exception):
    """The API server does not serve the kind (404)."""


class KindWatcher:
    """Keeps ``cache`` in step with one kind (in one namespace, or all)."""

    def __init__(
        self,
        api: KubeApi,
        cache: ObjectCache,
        kind: WatchedKind,
        namespace: str | None,
        timing: WatchTiming,
        outage: Outage | None = None,
        metrics: KubeMetrics | None = None,
    ) -> None:
        self.kind = kind
        self._outage = outage or Outage()
        self._metrics = metrics or KubeMetrics()
        self.namespace = namespace
        self._api = api
        self._cache = cache
        self._timing = timing
        self._backoff = Backoff(timing.backoff_initial_s, timing.backoff_max_s)
        #: Set once the kind was listed (or found not served) for the first time.
        self.synced = asyncio.Event()
        #: The version the cache is at for this kind ('' before the first list).
        self.version = ""
        self.lists = 0  # how many times the kind was listed (tests and logs)
        self._failing = False
        self._cycle: asyncio.Future[None] | None = None
        self._relist_asked = False

    @property
    def where(self) -> str:
        return str(self.kind) + (f" in namespace {self.namespace}" if self.namespace else "")

    def relist(self) -> None:
        """Drop the watch in progress and list the kind again.

        For a kind whose CRD was replaced: a watch open before goes on sending
        objects decoded with the old schema (fields of the new one pruned)
        until it ends, which can take its whole timeout (measured on
        kube-apiserver v1.32: an XBackend created with ``port.number`` after
        its CRD changed to upstream main's came through a watch opened before
        as ``port: {}``).
        """
        self._relist_asked = True
        if self._cycle is not None:
            self._cycle.cancel()

    async def run(self) -> None:
        """List and watch until cancelled (see the module docstring)."""
        while True:
            self._cycle = asyncio.ensure_future(self._step())
            try:
                await self._cycle
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not self._relist_asked or (task is not None and task.cancelling()):
                    raise
            finally:
                self._cycle = None
            if self._relist_asked:
                self._relist_asked = False
                log.info("%s: listing again (its CRD changed)", self.where)
                self._metrics.watch_restarts.inc(self.kind.kind, "relist")
                self.version = ""

    async def _step(self) -> None:
        """List if needed and watch once, or handle why that failed (one turn of :meth:`run`)."""
        try:
            if not self.version:
                await self._list()
            await self._watch()
        except _Gone:
            # Routine (history is compacted every few minutes): relisting is the cure.
            log.debug("%s: watch expired (410 Gone) at version %s; listing again", self.where, self.version)
            self._metrics.watch_restarts.inc(self.kind.kind, "expired")
            self.version = ""
        except _HistoryLost as lost:
            log.warning(
                "%s: the API server does not have version %s (%s): its storage was restored or "
                "wiped; listing again",
                self.where,
                self.version,
                lost,
            )
            self._metrics.watch_restarts.inc(self.kind.kind, "history_lost")
            self.version = ""
        except _NotServed:
            self.version = ""
            self._cache.unserved(self.kind, self.namespace)
            self.synced.set()
            await asyncio.sleep(self._timing.reprobe_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._report(exc)
            self._metrics.api_errors.inc(error_code(exc))
            self._metrics.watch_restarts.inc(self.kind.kind, "error")
            if not is_transient(exc):
                # Forbidden, say: retrying will not fix it soon, and weir should not wait for it
                # to start serving what it can read (the error is logged; the kind stays empty).
                self.synced.set()
            await self._backoff.wait()

    def _report(self, exc: BaseException) -> None:
        """Log a failed call: an outage once for all kinds (see :class:`Outage`), any other error
        once per series for this kind."""
        action = f"resuming from version {self.version}" if self.version else "listing again"
        if is_transient(exc):
            self._outage.failed(f"{self.where}: {describe(exc)}; retrying ({action})")
        else:
            level = logging.DEBUG if self._failing else logging.ERROR
            log.log(level, "%s: %s; retrying (%s)", self.where, describe(exc), action)
        self._failing = True

    def _recovered(self) -> None:
        if self._failing:
            self._outage.recovered()
        self._failing = False
        self._backoff.reset()

    async def _list(self) -> None:
        try:
            items, version = await self._api.list(self.kind, self.namespace)
        except Exception as exc:
            if status_code(exc) == 404:
                raise _NotServed from exc
            raise
        self._cache.replace(self.kind, self.namespace, items)
        self.version = version
        self.lists += 1
        self._metrics.lists.inc(self.kind.kind)
        self._recovered()
        log.debug("%s: listed %d object(s) at version %s", self.where, len(items), version)
        self.synced.set()

    async def _check_history(self) -> None:
        """After a failure, before watching again: raise :class:`_HistoryLost` if the server's
        storage is behind the version weir holds (etcd wiped, or restored from a backup).

        Such a server does not refuse a watch from the version weir holds: it serves it and sends
        nothing, as events older than the version asked for are never sent. resourceVersions are
        etcd's revisions, which only grow while the storage is intact; this is the one place weir
        compares two of them (client-go does not notice, and misses every change for good)."""
        current = await self._api.current_version(self.kind, self.namespace)
        if current.isdigit() and self.version.isdigit() and int(current) < int(self.version):
            raise _HistoryLost(f"its storage is at version {current}")
        self._recovered()

    async def _watch(self) -> None:
        if self._failing and self.version:
            await self._check_history()
        server_timeout = int(self._timing.server_timeout_s * random.uniform(1.0, 2.0))
        idle_limit = server_timeout + self._timing.silence_margin_s
        loop = asyncio.get_running_loop()
        stream = self._api.watch(self.kind, self.namespace, self.version, server_timeout)
        self._metrics.watches.inc(self.kind.kind)
        # asyncio.timeout, not wait_for around each event: on Python 3.11 wait_for swallows a
        # cancellation that arrives as an event does, and stopping would then hang.
        try:
            async with asyncio.timeout(idle_limit) as idle:
                async for event_type, obj in stream:
                    self._event(event_type, obj)
                    idle.reschedule(loop.time() + idle_limit)
        except TimeoutError:
            # The server ends every watch after its timeout, a quiet kind's included: a stream
            # still open and silent past it is a connection that died without closing.
            log.warning(
                "%s: the watch connection went silent and was not closed by the API server after its "
                "%d s timeout; watching again on a new connection",
                self.where,
                server_timeout,
            )
            self._metrics.watch_restarts.inc(self.kind.kind, "silent")
        except Exception as exc:
            code = status_code(exc)
            if code == 410:
                raise _Gone from exc
            if code == 404:
                raise _NotServed from exc
            if version_too_large(exc):
                raise _HistoryLost(describe(exc)) from exc
            raise
        finally:
            await stream.aclose()

    def _event(self, event_type: str, obj: dict[str, Any]) -> None:
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if event_type in ("ADDED", "MODIFIED", "DELETED"):
            self._cache.apply(self.kind, event_type, obj)
        if version:
            self.version = version
        if self._failing:
            self._recovered()
