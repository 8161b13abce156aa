"""The per-Gateway Services of ``--gateway-services``: kept by the leader (opt-in).

What the Service is, and how translation reads it, is in
:mod:`weir.infrastructure`. This module keeps them in the cluster:

* **Which Gateways**: those of weir's GatewayClasses (``controllerName``), with
  a ``uid`` (read from a cluster).
* **The Service** (``<gateway>-weir`` in the Gateway's namespace): selectorless,
  of the configured type, ports = the listener ports, labelled
  ``gateway.networking.k8s.io/gateway-name`` (and class, and
  ``weir.dev/gateway-uid``), owned by the Gateway (``controller: true``), with
  the Gateway's ``spec.infrastructure`` labels and annotations. Those keys are
  recorded in the annotation ``weir.dev/infrastructure-keys``, so that a key
  removed from the Gateway is removed from the Service while keys that users
  or other controllers added are never touched. Changes are merge patches
  guarded by ``resourceVersion`` (a 409 compares again).
* **Its EndpointSlices** (``<service>-ipv4`` / ``-ipv6``), managed by
  ``gateway-services.weir.dev`` and owned by the Service: the endpoints (addresses
  and conditions) of the ``--publish-service`` Service's slices, which
  Kubernetes keeps for weir's pods, with the Gateway Service's ports. A
  Service selects pods only in its own namespace; weir's pods are in weir's.
* **Deleted** by weir itself when the Gateway is deleted or leaves weir's
  classes (the ownerReference lets a cluster's garbage collector do it too,
  but weir does not rely on one), slices with their Service.
* **Never taken over**: a Service of that name without weir's uid label *and*
  an ownerReference to the Gateway is someone else's: weir leaves it, reports
  a Warning Event on the Gateway, and translation says so in ``Accepted``'s
  message (:func:`weir.infrastructure.foreign_service`).

It works from label-selected lists of the API server (the cache keeps no
ownerReferences), only when what a snapshot says changed, only on the leader
(checked before each request); on becoming leader it compares again. A
failure for one Gateway is reported (Event, log) and does not stop the others;
a transient one is retried with backoff.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from weir.api.core_v1 import Service
from weir.api.discovery_v1 import SERVICE_NAME_LABEL, EndpointSlice
from weir.api.gateway_v1 import API_VERSION as GATEWAY_API_VERSION
from weir.api.gateway_v1 import Gateway
from weir.infrastructure import (
    GATEWAY_UID_LABEL,
    MANAGED_BY,
    TRACKED_ANNOTATION,
    ServiceType,
    infrastructure_metadata,
    service_name,
    service_ports,
    tracked_keys,
    weir_labels,
)
from weir.providers.kubernetes.api import KubeApi, WatchedKind, describe, is_transient, status_code
from weir.providers.kubernetes.watch import Backoff
from weir.resources import Resources

__all__ = ["GatewayServices", "desired_service", "desired_slices", "service_patch"]

log = logging.getLogger("weir.kubernetes.gateway_services")

SERVICE = WatchedKind.of(Service)
ENDPOINT_SLICE = WatchedKind.of(EndpointSlice)
GATEWAY = WatchedKind.of(Gateway)
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
#: Reporter of a failure about a Gateway: ``(gateway, reason, message)``.
Report = Callable[[Gateway, str, str], None]


def _owner(kind: str, api_version: str, name: str, uid: str) -> dict[str, Any]:
    # No blockOwnerDeletion: setting it needs update on the owner's finalizers, and nothing
    # needs the owner's deletion to wait.
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


def _tracked(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    return json.dumps({"annotations": sorted(annotations), "labels": sorted(labels)}, separators=(",", ":"))


def desired_service(gw: Gateway, service_type: ServiceType) -> dict[str, Any]:
    """The Service to create for ``gw`` (see the module docstring)."""
    labels, annotations = infrastructure_metadata(gw)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(gw.name),
            "namespace": gw.namespace,
            "labels": {**labels, **weir_labels(gw)},
            "annotations": {**annotations, TRACKED_ANNOTATION: _tracked(labels, annotations)},
            "ownerReferences": [_owner("Gateway", GATEWAY_API_VERSION, gw.name, gw.metadata.uid or "")],
        },
        "spec": {"type": service_type, "ports": service_ports(gw)},
    }


def owned_by(raw: Mapping[str, Any], uid: str) -> bool:
    """Whether ``raw`` (a Service) is weir's for the Gateway of ``uid``: the label and a controlling
    ownerReference to that Gateway."""
    meta = raw.get("metadata") or {}
    if (meta.get("labels") or {}).get(GATEWAY_UID_LABEL) != uid:
        return False
    return any(
        ref.get("kind") == "Gateway" and ref.get("uid") == uid and ref.get("controller")
        for ref in meta.get("ownerReferences") or ()
    )


def service_patch(raw: Mapping[str, Any], gw: Gateway, service_type: ServiceType) -> dict[str, Any] | None:
    """The merge patch that brings an existing Service of weir's to what ``gw`` asks, or ``None``.

    Infrastructure keys weir put there before (its tracking annotation) and
    the Gateway no longer has are removed (``null``); other keys are kept.
    """
    meta = raw.get("metadata") or {}
    have_labels: Mapping[str, str] = meta.get("labels") or {}
    have_notes: Mapping[str, str] = meta.get("annotations") or {}
    old_labels, old_notes = tracked_keys(have_notes)
    labels, notes = infrastructure_metadata(gw)
    want_labels = {**labels, **weir_labels(gw)}
    want_notes = {**notes, TRACKED_ANNOTATION: _tracked(labels, notes)}
    label_patch: dict[str, str | None] = {k: None for k in old_labels - set(want_labels) if k in have_labels}
    label_patch.update({k: v for k, v in want_labels.items() if have_labels.get(k) != v})
    note_patch: dict[str, str | None] = {k: None for k in old_notes - set(want_notes) if k in have_notes}
    note_patch.update({k: v for k, v in want_notes.items() if have_notes.get(k) != v})
    spec = raw.get("spec") or {}
    want_ports = service_ports(gw)
    have_ports = [
        {k: p.get(k) for k in ("name", "port", "targetPort", "protocol")} for p in spec.get("ports") or ()
    ]
    patch: dict[str, Any] = {}
    if label_patch or note_patch:
        patch["metadata"] = {"labels": label_patch or None, "annotations": note_patch or None}
        patch["metadata"] = {k: v for k, v in patch["metadata"].items() if v is not None}
    if have_ports != want_ports or spec.get("type") != service_type:
        patch["spec"] = {"type": service_type, "ports": want_ports}
    if not patch:
        return None
    patch.setdefault("metadata", {})["resourceVersion"] = meta.get("resourceVersion")
    return patch


def desired_slices(
    gw: Gateway, service: Mapping[str, Any], sources: Iterable[EndpointSlice]
) -> dict[str, dict[str, Any]]:
    """The EndpointSlices of ``gw``'s Service (``service``: as the API server holds it, for its uid),
    by name: the endpoints of ``sources`` (the publish Service's slices) per address type, with the
    Gateway Service's ports. Without any source, one IPv4 slice with no endpoints."""
    meta = service.get("metadata") or {}
    name = str(meta.get("name"))
    by_type: dict[str, dict[tuple[str, ...], dict[str, Any]]] = {}
    for source in sorted(sources, key=lambda s: s.name):
        if source.address_type == "FQDN":
            continue
        found = by_type.setdefault(source.address_type, {})
        for endpoint in source.endpoints:
            conditions = endpoint.conditions.model_dump(exclude_none=True)
            found.setdefault(
                endpoint.addresses, {"addresses": list(endpoint.addresses), "conditions": conditions}
            )
    if not by_type:
        by_type["IPv4"] = {}
    ports = [{"name": p["name"], "port": p["port"], "protocol": p["protocol"]} for p in service_ports(gw)]
    out: dict[str, dict[str, Any]] = {}
    for address_type, endpoints in sorted(by_type.items()):
        slice_name = f"{name}-{address_type.lower()}"
        out[slice_name] = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": slice_name,
                "namespace": gw.namespace,
                "labels": {
                    SERVICE_NAME_LABEL: name,
                    MANAGED_BY_LABEL: MANAGED_BY,
                    GATEWAY_UID_LABEL: gw.metadata.uid or "",
                },
                "ownerReferences": [_owner("Service", "v1", name, str(meta.get("uid") or ""))],
            },
            "addressType": address_type,
            "endpoints": [endpoints[k] for k in sorted(endpoints)][:1000],
            "ports": ports,
        }
    return out


def _slice_differs(raw: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    meta = raw.get("metadata") or {}
    have_labels = meta.get("labels") or {}
    if any(have_labels.get(k) != v for k, v in want["metadata"]["labels"].items()):
        return True
    owners = [(r.get("kind"), r.get("uid")) for r in meta.get("ownerReferences") or ()]
    if owners != [(r["kind"], r["uid"]) for r in want["metadata"]["ownerReferences"]]:
        return True  # a Service made again (a Gateway of the same name made again)
    endpoints = [
        {"addresses": list(e.get("addresses") or ()), "conditions": dict(e.get("conditions") or {})}
        for e in raw.get("endpoints") or ()
    ]
    ports = [{k: p.get(k) for k in ("name", "port", "protocol")} for p in raw.get("ports") or ()]
    return bool(endpoints != want["endpoints"] or ports != want["ports"])


@dataclass(frozen=True)
class _Wish:
    """A snapshot's facts for one reconcile."""

    gateways: tuple[Gateway, ...]
    sources: tuple[EndpointSlice, ...]
    gateways_served: bool
    #: ``(namespace, name)`` of Services that have a Gateway's Service's name and not its uid label
    #: (not weir's: left alone, without asking the API server to create them again each pass)
    foreign: frozenset[tuple[str, str]] = frozenset()


class GatewayServices:
    """Keeps the per-Gateway Services and their EndpointSlices (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        controller_name: str,
        service_type: ServiceType,
        publish_service: tuple[str, str],
        namespaces: tuple[str, ...],
        is_leader: Callable[[], bool],
        backoff: Backoff,
        report: Report | None = None,
    ) -> None:
        self._api = api
        self._controller = controller_name
        self._type: ServiceType = service_type
        self._publish = publish_service
        self._namespaces = namespaces
        self._is_leader = is_leader
        self._backoff = backoff
        self._report = report
        self._wish = _Wish((), (), False, frozenset())
        self._seen: object = None
        self._dirty = False
        self._wake = asyncio.Event()
        #: Gateway uid -> the problems reported while they last (reported again only once gone and back)
        self._reported: dict[str, set[str]] = {}
        self._now: set[str] = set()  # the problems of the Gateway being compared
        #: Writes made (for logs and tests).
        self.created = 0
        self.updated = 0
        self.deleted = 0

    def submit(self, resources: Resources) -> None:
        """What a snapshot says: compared again only if anything this depends on changed."""
        classes = {gc.name for gc in resources.gateway_classes if gc.spec.controller_name == self._controller}
        gateways = tuple(
            gw for gw in resources.all(Gateway) if gw.spec.gateway_class_name in classes and gw.metadata.uid
        )
        sources = resources.endpoint_slices(*self._publish)
        served = Gateway.KIND not in resources.unserved
        names = {(gw.namespace, service_name(gw.name)) for gw in gateways}
        services = sorted(
            (s.namespace, s.name, s.metadata.resource_version or "")
            for s in resources.all(Service)
            if GATEWAY_UID_LABEL in s.metadata.labels or (s.namespace, s.name) in names
        )
        slices = sorted(
            (s.namespace, s.name, s.metadata.resource_version or "")
            for s in resources.all(EndpointSlice)
            if s.metadata.labels.get(MANAGED_BY_LABEL) == MANAGED_BY
        )
        seen = (
            [(gw.namespace, gw.name, gw.metadata.uid, gw.metadata.resource_version) for gw in gateways],
            [(s.name, s.metadata.resource_version) for s in sources],
            services,
            slices,
            served,
        )
        if seen == self._seen:
            return
        self._seen = seen
        foreign = frozenset(
            (gw.namespace, service_name(gw.name))
            for gw in gateways
            if (svc := resources.service(gw.namespace, service_name(gw.name))) is not None
            and svc.metadata.labels.get(GATEWAY_UID_LABEL) is None
        )
        self._wish = _Wish(gateways, sources, served, foreign)
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
                retry = await self._reconcile(self._wish)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("the per-Gateway Services: %s; retrying", describe(exc))
                retry = True
            if retry:
                self._dirty = True
                await self._backoff.wait()
                self._wake.set()
            else:
                self._backoff.reset()

    async def _list(self, kind: WatchedKind, labels: dict[str, Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for namespace in self._namespaces or (None,):
            found, _ = await self._api.list(kind, namespace, labels=labels)
            items += found
        return items

    def _problem(self, gw: Gateway, reason: str, message: str) -> None:
        """Log and report (an Event) a problem of ``gw``'s Service, once per distinct problem."""
        self._now.add(message)
        if message in self._reported.get(gw.metadata.uid or "", set()):
            return
        log.warning("Gateway %s/%s: %s", gw.namespace, gw.name, message)
        if self._report is not None:
            self._report(gw, reason, message)

    async def _reconcile(self, wish: _Wish) -> bool:
        """One pass; whether to retry (a transient failure)."""
        services = await self._list(SERVICE, {GATEWAY_UID_LABEL: None})
        slices = await self._list(ENDPOINT_SLICE, {MANAGED_BY_LABEL: MANAGED_BY})
        by_name = {((s["metadata"].get("namespace")), s["metadata"].get("name")): s for s in services}
        retry = False
        kept: set[tuple[str, str]] = set()
        kept_slices: set[tuple[str, str]] = set()
        wanted_uids = {gw.metadata.uid or "" for gw in wish.gateways}
        for gw in wish.gateways:
            if not self._is_leader():
                return False
            key = (gw.namespace, service_name(gw.name))
            uid = gw.metadata.uid or ""
            self._now = set()
            try:
                if key in wish.foreign and key not in by_name:
                    self._foreign(gw, key[1])
                    svc = None
                else:
                    svc = await self._service(gw, by_name.get(key), wanted_uids)
                if svc is not None:
                    kept.add(key)
                    want = desired_slices(gw, svc, wish.sources)
                    kept_slices.update((gw.namespace, name) for name in want)
                    await self._slices(gw, want, slices)
                self._reported[uid] = self._now  # what is no longer a problem is forgotten
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Whatever failed, what this Gateway had is kept until a pass succeeds.
                kept.add(key)
                kept_slices.update(
                    (gw.namespace, str(raw["metadata"].get("name")))
                    for raw in slices
                    if raw["metadata"].get("namespace") == gw.namespace
                    and (raw["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == key[1]
                )
                if status_code(exc) == 409 or is_transient(exc):
                    retry = True  # changed meanwhile, or the API server away: compare again
                    log.info(
                        "Gateway %s/%s's Service: %s; comparing again", gw.namespace, gw.name, describe(exc)
                    )
                    continue
                self._problem(
                    gw,
                    "GatewayServiceFailed",
                    f"cannot create or update Service {key[0]}/{key[1]}: {describe(exc)}",
                )
                self._reported.setdefault(uid, set()).update(self._now)
        self._reported = {u: seen for u, seen in self._reported.items() if u in wanted_uids}
        if not wish.gateways_served:
            return retry  # the Gateways are unknown: delete nothing
        for raw in slices:
            meta = raw.get("metadata") or {}
            where = (str(meta.get("namespace")), str(meta.get("name")))
            if where not in kept_slices and self._is_leader():
                await self._api.delete(ENDPOINT_SLICE, *where)
                self.deleted += 1
        for raw in services:
            meta = raw.get("metadata") or {}
            owner = str((meta.get("labels") or {}).get(GATEWAY_UID_LABEL))
            where = (str(meta.get("namespace")), str(meta.get("name")))
            if where in kept or owner in wanted_uids or not owned_by(raw, owner) or not self._is_leader():
                continue
            await self._api.delete(SERVICE, *where)
            self.deleted += 1
            log.info("deleted Service %s/%s (its Gateway is gone or not weir's)", *where)
        return retry

    async def _service(
        self, gw: Gateway, raw: dict[str, Any] | None, wanted_uids: set[str]
    ) -> dict[str, Any] | None:
        """The Gateway's Service as the API server holds it after creating or updating it, or
        ``None`` when a Service of that name is not weir's (reported).

        ``raw``: the labelled Service of that name, if listed. One that weir
        made for an earlier Gateway of the same name (deleted, made again: a new
        uid) is deleted first.
        """
        uid = gw.metadata.uid or ""
        name = service_name(gw.name)
        if raw is not None and not owned_by(raw, uid):
            old = str(((raw.get("metadata") or {}).get("labels") or {}).get(GATEWAY_UID_LABEL))
            if old == uid or old in wanted_uids or not owned_by(raw, old):
                self._foreign(gw, name)
                return None
            await self._api.delete(SERVICE, gw.namespace, name)
            self.deleted += 1
            raw = None
        if raw is None:
            try:
                made = await self._api.create(SERVICE, desired_service(gw, self._type))
            except Exception as exc:
                if status_code(exc) != 409:
                    raise
                self._foreign(gw, name)
                return None
            self.created += 1
            log.info("created Service %s/%s for Gateway %s", gw.namespace, name, gw.name)
            return made
        patch = service_patch(raw, gw, self._type)
        if patch is None:
            return raw
        patched = await self._api.patch(SERVICE, gw.namespace, name, patch)
        self.updated += 1
        log.info("updated Service %s/%s for Gateway %s", gw.namespace, name, gw.name)
        return patched

    def _foreign(self, gw: Gateway, name: str) -> None:
        self._problem(
            gw,
            "GatewayServiceConflict",
            f"Service {gw.namespace}/{name} exists and is not weir's (no label "
            f"{GATEWAY_UID_LABEL}={gw.metadata.uid} with an ownerReference to this Gateway); weir leaves "
            "it alone and the Gateway has no Service of its own: delete or rename that Service",
        )

    async def _slices(
        self, gw: Gateway, want: Mapping[str, dict[str, Any]], existing: Iterable[Mapping[str, Any]]
    ) -> None:
        have = {
            (raw.get("metadata") or {}).get("name"): raw
            for raw in existing
            if (raw.get("metadata") or {}).get("namespace") == gw.namespace
        }
        for name, body in want.items():
            raw = have.get(name)
            if raw is None:
                try:
                    await self._api.create(ENDPOINT_SLICE, body)
                except Exception as exc:
                    if status_code(exc) != 409:
                        raise
                    # Not in the list of weir's slices, yet there: someone else's of that name.
                    self._problem(
                        gw,
                        "GatewayServiceFailed",
                        f"EndpointSlice {gw.namespace}/{name} exists and is not weir's (not managed by "
                        f"{MANAGED_BY}); the Gateway's Service lists no pods until it is deleted or renamed",
                    )
                    continue
                self.created += 1
            elif _slice_differs(raw, body):
                patch = {
                    "metadata": {
                        "labels": body["metadata"]["labels"],
                        "ownerReferences": body["metadata"]["ownerReferences"],
                        "resourceVersion": (raw.get("metadata") or {}).get("resourceVersion"),
                    },
                    "endpoints": body["endpoints"],
                    "ports": body["ports"],
                }
                await self._api.patch(ENDPOINT_SLICE, gw.namespace, name, patch)
                self.updated += 1
