"""The headless Services of EndpointSelector XBackends: created and deleted by the leader.

weir does not watch Pods. For each XBackend of type ``EndpointSelector`` the
leader keeps one headless Service (:func:`~weir.providers.kubernetes.xbackend.headless_service`:
``generateName``, owned by the XBackend, selecting its ``matchLabels``,
labelled ``weir.dev/xbackend: <name>``); Kubernetes' EndpointSlice controller
keeps its EndpointSlices, which translation reads
(:func:`weir.translate.backends.selected_endpoints`). See ``docs/xbackend.md``.

:class:`SelectorServices` compares what the XBackends want with the Services
that carry the label *and* an ownerReference to an XBackend (only those are
weir's: a Service without that reference is never touched), then:

* creates the Service an XBackend lacks (a changed selector or port is a new
  Service, created before the old one is deleted, so the old one's endpoints
  serve until the new one's exist);
* deletes a weir Service whose XBackend is gone, changed type, or no longer
  matches it (the ownerReference would have the garbage collector delete it
  with its XBackend too, but not on a change of type or selector).

It works from a label-selected list of Services (the API server's, not the
cache's: the cache keeps no ownerReferences), made only when what the
XBackends want or the labelled Services in the snapshot changed, and only on
the leader (checked before each request); on becoming leader it compares again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from weir.api.core_v1 import Service
from weir.api.xbackend_v1alpha1 import SELECTOR_LABEL, XBackend
from weir.providers.kubernetes.api import KubeApi, WatchedKind, describe
from weir.providers.kubernetes.watch import Backoff
from weir.providers.kubernetes.xbackend import headless_service
from weir.resources import Resources

__all__ = ["SelectorServices", "plan"]

log = logging.getLogger("weir.kubernetes.selector")

SERVICE = WatchedKind.of(Service)
#: Label values are at most 63 characters: a longer XBackend name cannot be put on its Service.
MAX_LABEL_VALUE = 63

#: ``(namespace, XBackend name)``
Owner = tuple[str, str]


def wanted_services(xbackends: Iterable[XBackend]) -> dict[Owner, dict[str, Any]]:
    """The Service each EndpointSelector XBackend should have (those with a ``uid``: from a cluster)."""
    out: dict[Owner, dict[str, Any]] = {}
    for xb in xbackends:
        svc = headless_service(xb)
        if svc is None or not xb.metadata.uid or len(xb.name) > MAX_LABEL_VALUE:
            continue
        out[xb.namespace, xb.name] = svc
    return out


def _owner_uid(raw: Mapping[str, Any]) -> str | None:
    """The uid of the XBackend controlling ``raw`` (a Service), if one does."""
    for ref in (raw.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("kind") == XBackend.KIND and ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return None


def _matches(raw: Mapping[str, Any], svc: Mapping[str, Any]) -> bool:
    """Whether an existing Service is the one ``svc`` describes (owner, selector, ports, headless)."""
    spec = raw.get("spec") or {}
    want = svc["spec"]
    ports = [(p.get("port"), p.get("targetPort"), p.get("protocol", "TCP")) for p in spec.get("ports") or ()]
    return (
        _owner_uid(raw) == svc["metadata"]["ownerReferences"][0]["uid"]
        and spec.get("clusterIP") == "None"
        and (spec.get("selector") or {}) == want["selector"]
        and ports == [(p["port"], p["targetPort"], p["protocol"]) for p in want["ports"]]
    )


def plan(
    wanted: Mapping[Owner, dict[str, Any]], existing: Iterable[Mapping[str, Any]], xbackends_served: bool
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """``(to_create, to_delete)``: Services to create, then ``(namespace, name)`` of weir's to delete.

    ``existing``: the Services labelled ``weir.dev/xbackend``. Only those with
    an XBackend ownerReference are weir's. While XBackends are not served (the
    CRD missing) the wanted set is unknown, so nothing is deleted.
    """
    kept: set[Owner] = set()
    delete: list[tuple[str, str]] = []
    for raw in sorted(existing, key=lambda r: str((r.get("metadata") or {}).get("name"))):
        meta = raw.get("metadata") or {}
        if _owner_uid(raw) is None:
            continue  # not weir's
        owner = (str(meta.get("namespace")), str((meta.get("labels") or {}).get(SELECTOR_LABEL)))
        svc = wanted.get(owner)
        if svc is not None and owner not in kept and _matches(raw, svc):
            kept.add(owner)
        elif svc is not None or xbackends_served:
            delete.append((owner[0], str(meta.get("name"))))
    create = [svc for owner, svc in sorted(wanted.items()) if owner not in kept]
    return create, delete


class SelectorServices:
    """Keeps the headless Services of EndpointSelector XBackends (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        namespaces: tuple[str, ...],
        is_leader: Callable[[], bool],
        backoff: Backoff,
    ) -> None:
        self._api = api
        self._namespaces = namespaces
        self._is_leader = is_leader
        self._backoff = backoff
        self._wanted: dict[Owner, dict[str, Any]] = {}
        self._served = False
        self._seen: object = None
        self._dirty = False
        self._wake = asyncio.Event()
        #: Services created and deleted (for logs and tests).
        self.created = 0
        self.deleted = 0

    def submit(self, resources: Resources) -> None:
        """What a snapshot says: compared again only if the XBackends' wishes or the labelled
        Services changed."""
        xbackends_served = XBackend.KIND not in resources.unserved
        wanted = wanted_services(resources.all(XBackend))
        labelled = sorted(
            (s.namespace, s.name, s.metadata.resource_version or "")
            for s in resources.all(Service)
            if SELECTOR_LABEL in s.metadata.labels
        )
        seen = (sorted((k, repr(v)) for k, v in wanted.items()), labelled, xbackends_served)
        if seen == self._seen:
            return
        self._seen = seen
        self._wanted = wanted
        self._served = xbackends_served
        self._dirty = True
        self._wake.set()

    def resync(self) -> None:
        """Compare again (on becoming leader)."""
        self._dirty = True
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._dirty or not self._is_leader():
                continue
            self._dirty = False
            try:
                await self._reconcile()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("the Services of EndpointSelector XBackends: %s; retrying", describe(exc))
                self._dirty = True
                await self._backoff.wait()
                self._wake.set()
            else:
                self._backoff.reset()

    async def _reconcile(self) -> None:
        selector = {SELECTOR_LABEL: None}  # lightkube: the label exists
        existing: list[dict[str, Any]] = []
        for namespace in self._namespaces or (None,):
            items, _ = await self._api.list(SERVICE, namespace, labels=selector)
            existing += items
        create, delete = plan(self._wanted, existing, self._served)
        for svc in create:
            if not self._is_leader():
                return
            made = await self._api.create(SERVICE, svc)
            self.created += 1
            log.info(
                "created Service %s/%s for XBackend %s",
                svc["metadata"]["namespace"],
                (made.get("metadata") or {}).get("name"),
                svc["metadata"]["labels"][SELECTOR_LABEL],
            )
        for namespace, name in delete:
            if not self._is_leader():
                return
            await self._api.delete(SERVICE, namespace, name)
            self.deleted += 1
            log.info("deleted Service %s/%s (its XBackend changed or is gone)", namespace, name)
