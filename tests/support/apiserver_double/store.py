"""The API-server double's storage: objects, the resourceVersion counter, event history, watches.

Thread-safe: every method takes one lock, so the HTTP side (the server's
event-loop thread) and a test's direct manipulation (any thread) see one
order of changes. A change bumps the global resourceVersion, is recorded
in the bounded history and is handed, while the lock is still held, to the
queue of every open watch it concerns — through the watch's event loop
(``call_soon_threadsafe``), so each watch receives changes in commit order,
with nothing lost between its replay of history and its live events.

The store knows nothing about HTTP: it takes and returns plain JSON trees
and raises :class:`~apiserver_double.errors.ApiStatusError`.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
import threading
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from apiserver_double import errors
from apiserver_double.errors import ApiStatusError
from apiserver_double.kinds import KindInfo
from apiserver_double.patches import (
    APPLY,
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    apply_json_patch,
    decode_patch,
    merge_patch,
)
from apiserver_double.selectors import parse_field_selector, parse_label_selector
from apiserver_double.watchers import Event, Obj, Watcher, meta_of, render

__all__ = ["Store"]

#: Metadata only the server sets; whatever a request says about them is ignored.
_SERVER_OWNED = (
    "uid",
    "creationTimestamp",
    "generation",
    "resourceVersion",
    "managedFields",
    "deletionTimestamp",
    "selfLink",
)

_NAMESPACES = KindInfo("", "v1", "Namespace", "namespaces", False, True, builtin=True)

_STRATEGIC_ON_CRD = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


def _name_mismatch(sent: object, name: str) -> ApiStatusError:
    return errors.bad_request(f"the name of the object ({sent}) does not match the name on the URL ({name})")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fields_v1(tree: Any) -> Obj:
    """The ``FieldsV1`` set of a JSON tree: every object key as ``f:key``; lists and scalars are leaves."""
    if not isinstance(tree, dict):
        return {}
    return {f"f:{key}": _fields_v1(value) for key, value in tree.items()}


@dataclass
class _Page:
    rv: int
    items: list[Obj]


@dataclass
class Store:
    """Objects of every served resource, one global resourceVersion, bounded history, open watches."""

    kinds: Iterable[KindInfo]
    history_limit: int = 1000
    #: Refuse objects in a namespace that does not exist (the NamespaceLifecycle admission plugin).
    enforce_namespaces: bool = False
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False)
    _kinds: dict[tuple[str, str, str], KindInfo] = field(default_factory=dict, init=False)
    _objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = field(default_factory=dict, init=False)
    _rv: int = field(default=0, init=False)
    _history: deque[Event] = field(default_factory=deque, init=False)
    #: A watch or a continued list from a resourceVersion below this gets 410 Gone.
    _oldest: int = field(default=0, init=False)
    _watchers: set[Watcher] = field(default_factory=set, init=False)
    _pages: dict[str, tuple[_Page, int]] = field(default_factory=dict, init=False)
    _expired_pages: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        if self.history_limit < 1:
            raise ValueError(f"history_limit must be at least 1, not {self.history_limit}")
        for info in self.kinds:
            self.install(info)

    # -- kinds --------------------------------------------------------------------

    def install(self, info: KindInfo) -> None:
        """Serve ``info`` (from now on; objects of its resource, if any, become visible)."""
        with self._lock:
            self._kinds[(info.group, info.version, info.plural)] = info
            self._objects.setdefault(info.resource, {})

    def uninstall(self, group: str, version: str, plural: str) -> KindInfo | None:
        """Stop serving one version. The last version of a resource takes its objects with it:
        each gets a DELETED event (as when a CRD is deleted), then that resource's watches end."""
        with self._lock:
            info = self._kinds.pop((group, version, plural), None)
            if info is None:
                return None
            if not any(k.resource == info.resource for k in self._kinds.values()):
                for (namespace, name), _ in sorted(self._objects.get(info.resource, {}).items()):
                    self._delete_locked(info, namespace, name)
                self._objects.pop(info.resource, None)
                gone = [w for w in self._watchers if w.info.resource == info.resource]
            else:
                gone = [w for w in self._watchers if w.info == info]
            for watcher in gone:
                self._watchers.discard(watcher)
                watcher.push(("END", None))
            return info

    def kind_at(self, group: str, version: str, plural: str) -> KindInfo | None:
        """The kind served at ``/apis/group/version/plural``, or None."""
        with self._lock:
            return self._kinds.get((group, version, plural))

    def kind_of(self, api_version: str, kind: str) -> KindInfo:
        """The served kind for ``apiVersion``/``kind``.

        Raises:
            ApiStatusError: 404 "the server could not find the requested resource".
        """
        group, _, version = api_version.rpartition("/")
        with self._lock:
            for info in self._kinds.values():
                if info.group == group and info.version == version and info.kind == kind:
                    return info
        raise errors.resource_not_found()

    def served(self) -> list[KindInfo]:
        with self._lock:
            return sorted(self._kinds.values(), key=lambda k: (k.group, k.version, k.plural))

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    # -- reads --------------------------------------------------------------------

    def get(self, info: KindInfo, namespace: str, name: str) -> Obj:
        """Raises: ApiStatusError: 404 NotFound."""
        with self._lock:
            return render(info, self._stored(info, namespace, name))

    def list(
        self,
        info: KindInfo,
        namespace: str,
        *,
        labels: str | None = None,
        fields: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> Obj:
        """A ``KindList``; ``namespace`` "" lists every namespace. ``limit``/``continue`` page
        through one consistent snapshot, as the API server does."""
        select_labels, select_fields = parse_label_selector(labels), parse_field_selector(fields)
        with self._lock:
            if continue_token:
                page, offset = self._page(continue_token)
            else:
                bucket = self._objects.get(info.resource, {})
                items = [
                    render(info, obj, list_item=True)
                    for (ns, _), obj in sorted(bucket.items())
                    if (not namespace or ns == namespace) and select_labels(obj) and select_fields(obj)
                ]
                page, offset = _Page(self._rv, items), 0
            end = offset + limit if limit > 0 else len(page.items)
            metadata: Obj = {"resourceVersion": str(page.rv)}
            if end < len(page.items):
                token = secrets.token_urlsafe(12)
                self._pages[token] = (page, end)
                metadata["continue"] = token
                metadata["remainingItemCount"] = len(page.items) - end
            return {
                "kind": f"{info.kind}List",
                "apiVersion": info.api_version,
                "metadata": metadata,
                "items": copy.deepcopy(page.items[offset:end]),
            }

    def _page(self, token: str) -> tuple[_Page, int]:
        if token in self._expired_pages:
            raise errors.expired(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter."
            )
        found = self._pages.get(token)
        if found is None:
            raise errors.bad_request("continue key is not valid: unknown continue token")
        return found

    def _stored(self, info: KindInfo, namespace: str, name: str) -> Obj:
        obj = self._objects.get(info.resource, {}).get((namespace, name))
        if obj is None:
            raise errors.not_found(info, name)
        return obj

    # -- writes -------------------------------------------------------------------

    def create(
        self, info: KindInfo, namespace: str, body: Any, *, manager: str, dry_run: bool = False
    ) -> Obj:
        """POST: a new object. Raises ApiStatusError: 409 AlreadyExists, 422 (no name), 400, 404."""
        return self._create(info, namespace, body, manager=manager, operation="Update", dry_run=dry_run)

    def _create(
        self, info: KindInfo, namespace: str, body: Any, *, manager: str, operation: str, dry_run: bool
    ) -> Obj:
        obj = self._checked_body(info, namespace, body)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise ApiStatusError(500, "resourceVersion should not be set on objects to be created")
        with self._lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{secrets.token_hex(3)[:5]}"
            name = meta.get("name")
            if not name:
                raise errors.invalid(
                    info,
                    "",
                    "metadata.name",
                    "FieldValueRequired",
                    "Required value: name or generateName is required",
                )
            if (
                self.enforce_namespaces
                and info.namespaced
                and ("", namespace) not in self._objects.get(_NAMESPACES.resource, {})
            ):
                raise errors.not_found(_NAMESPACES, namespace)
            if (namespace, name) in self._objects[info.resource]:
                raise errors.already_exists(info, name)
            for key in _SERVER_OWNED:
                meta.pop(key, None)
            if info.status_subresource:
                obj.pop("status", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta["generation"] = 1
            self._manage(info, obj, manager, operation, subresource=None)
            if dry_run:
                meta["resourceVersion"] = str(self._rv)
                return render(info, obj)
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self._objects[info.resource][(namespace, name)] = obj
            self._record("ADDED", info, obj, None)
            return render(info, obj)

    def update(
        self,
        info: KindInfo,
        namespace: str,
        name: str,
        body: Any,
        *,
        manager: str,
        subresource: str | None = None,
        require_resource_version: bool | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """PUT: replace an object (or, with ``subresource="status"``, its status).

        ``metadata.resourceVersion`` in the body must be the stored one (409
        Conflict otherwise); a body without it is an unconditional update for
        built-in kinds and 422 Invalid for CRDs (``require_resource_version``
        overrides that).
        """
        obj = self._checked_body(info, namespace, body, name=name)
        with self._lock:
            old = self._stored(info, namespace, name)
            sent = obj["metadata"].get("resourceVersion")
            if not sent:
                required = not info.builtin if require_resource_version is None else require_resource_version
                if required:
                    raise errors.invalid(
                        info,
                        name,
                        "metadata.resourceVersion",
                        "FieldValueInvalid",
                        "Invalid value: 0x0: must be specified for an update",
                    )
            elif sent != meta_of(old).get("resourceVersion"):
                raise errors.conflict(info, name)
            return self._commit(info, old, obj, manager, "Update", subresource, dry_run)

    def patch(
        self,
        info: KindInfo,
        namespace: str,
        name: str,
        content_type: str,
        body: bytes,
        *,
        manager: str,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """PATCH in any of the four media types (see :mod:`apiserver_double.patches`).

        An apply to an object that does not exist creates it (not through
        ``/status``). A ``metadata.resourceVersion`` the patch sets must be
        the stored one (409 Conflict otherwise).
        """
        if content_type not in (MERGE, STRATEGIC, JSON_PATCH, APPLY) or (
            content_type == STRATEGIC and not info.builtin
        ):
            raise ApiStatusError(415, _STRATEGIC_ON_CRD, "UnsupportedMediaType")
        patch = decode_patch(content_type, body)
        if content_type in (MERGE, STRATEGIC, APPLY) and not isinstance(patch, dict):
            raise errors.bad_request(f"a {content_type} body must be an object")
        with self._lock:
            old = self._objects.get(info.resource, {}).get((namespace, name))
            if old is None:
                if content_type == APPLY and subresource is None:
                    self._check_apply(info, name, patch)
                    return self._create(
                        info, namespace, patch, manager=manager, operation="Apply", dry_run=dry_run
                    )
                raise errors.not_found(info, name)
            if content_type == APPLY:
                self._check_apply(info, name, patch)
            new = apply_json_patch(old, patch) if content_type == JSON_PATCH else merge_patch(old, patch)
            new = self._checked_body(info, namespace, {**new, "apiVersion": info.api_version}, name=name)
            sent = new["metadata"].get("resourceVersion")
            if sent and sent != meta_of(old).get("resourceVersion"):
                raise errors.conflict(info, name)
            operation = "Apply" if content_type == APPLY else "Update"
            return self._commit(info, old, new, manager, operation, subresource, dry_run)

    @staticmethod
    def _check_apply(info: KindInfo, name: str, patch: Obj) -> None:
        if patch.get("apiVersion") != info.api_version or patch.get("kind") != info.kind:
            raise errors.bad_request(
                f"apply patches must set apiVersion {info.api_version!r} and kind {info.kind!r}"
            )
        sent = meta_of(patch).get("name")
        if sent != name:
            raise _name_mismatch(sent, name)

    def delete(
        self,
        info: KindInfo,
        namespace: str,
        name: str,
        *,
        preconditions: Obj | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """DELETE, at once (no finalizers, no grace period); returns the object as deleted.

        ``preconditions`` (``uid``, ``resourceVersion``) that do not hold give 409 Conflict.
        """
        with self._lock:
            old = self._stored(info, namespace, name)
            for key in ("uid", "resourceVersion"):
                wanted = (preconditions or {}).get(key)
                if wanted and wanted != meta_of(old).get(key):
                    raise ApiStatusError(
                        409,
                        f'Operation cannot be fulfilled on {info.qualified} "{name}": Precondition failed: '
                        f"{key}: {wanted}, {key} in object meta: {meta_of(old).get(key)}",
                        "Conflict",
                        {"name": name, "group": info.group, "kind": info.plural},
                    )
            if dry_run:
                return render(info, old)
            return render(info, self._delete_locked(info, namespace, name))

    def _delete_locked(self, info: KindInfo, namespace: str, name: str) -> Obj:
        old = self._objects[info.resource].pop((namespace, name))
        gone = copy.deepcopy(old)
        self._rv += 1
        gone["metadata"]["resourceVersion"] = str(self._rv)
        self._record("DELETED", info, gone, old)
        return gone

    def _checked_body(self, info: KindInfo, namespace: str, body: Any, name: str | None = None) -> Obj:
        """A copy of a request body, with its type, name and namespace checked against the request's."""
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        obj: Obj = copy.deepcopy(body)
        if obj.get("apiVersion") and obj["apiVersion"] != info.api_version:
            raise errors.bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match the expected "
                f"API version ({info.api_version})"
            )
        if obj.get("kind") and obj["kind"] != info.kind:
            raise errors.bad_request(
                f"the kind in the data ({obj['kind']}) does not match the expected kind ({info.kind})"
            )
        obj["apiVersion"], obj["kind"] = info.api_version, info.kind
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if info.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name") != name:
            raise _name_mismatch(meta.get("name"), name)
        return obj

    def _commit(
        self,
        info: KindInfo,
        old: Obj,
        new: Obj,
        manager: str,
        operation: str,
        subresource: str | None,
        dry_run: bool,
    ) -> Obj:
        """Store ``new`` in place of ``old`` under the rules of the endpoint written to.

        ``/status`` takes only ``status``; the main endpoint of a kind with a
        status subresource leaves ``status`` as it was. Server-owned
        metadata is kept. ``generation`` counts changes outside metadata
        (and status, where it has its own endpoint). A write that changes
        nothing is not a change: no new resourceVersion, no event.
        """
        if subresource == "status":
            result = copy.deepcopy(old)
            if "status" in new:
                result["status"] = copy.deepcopy(new["status"])
            else:
                result.pop("status", None)
        else:
            result = new
            result["apiVersion"], result["kind"] = old.get("apiVersion"), old.get("kind")
            if info.status_subresource:
                result.pop("status", None)
                if "status" in old:
                    result["status"] = copy.deepcopy(old["status"])
            meta, old_meta = result["metadata"], meta_of(old)
            for key in _SERVER_OWNED:
                meta.pop(key, None)
                if key in old_meta:
                    meta[key] = old_meta[key]
            if self._spec(info, result) != self._spec(info, old):
                meta["generation"] = int(old_meta.get("generation", 0)) + 1
        if result == old:
            return render(info, old)
        self._manage(info, result, manager, operation, subresource)
        if dry_run:
            return render(info, result)
        self._rv += 1
        result["metadata"]["resourceVersion"] = str(self._rv)
        meta = meta_of(old)
        self._objects[info.resource][(meta.get("namespace", ""), meta["name"])] = result
        self._record("MODIFIED", info, result, old)
        return render(info, result)

    @staticmethod
    def _spec(info: KindInfo, obj: Obj) -> Obj:
        skip = {"apiVersion", "kind", "metadata", *(["status"] if info.status_subresource else [])}
        return {k: v for k, v in obj.items() if k not in skip}

    @staticmethod
    def _manage(info: KindInfo, obj: Obj, manager: str, operation: str, subresource: str | None) -> None:
        """Record (simplified) ``managedFields``: one entry per manager, operation and subresource,
        holding the field set of what that write covers."""
        if subresource == "status":
            written: Obj = {"status": obj.get("status", {})}
        else:
            owned = ("labels", "annotations", "ownerReferences")
            meta = {k: v for k, v in meta_of(obj).items() if k in owned}
            written = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
            if not info.status_subresource and "status" in obj:
                written["status"] = obj["status"]
            if meta:
                written["metadata"] = meta
        entry: Obj = {
            "manager": manager,
            "operation": operation,
            "apiVersion": info.api_version,
            "time": _now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(written),
        }
        if subresource:
            entry["subresource"] = subresource
        meta_all = obj["metadata"]
        kept = [
            e
            for e in meta_all.get("managedFields", [])
            if (e.get("manager"), e.get("operation"), e.get("subresource"))
            != (manager, operation, subresource)
        ]
        meta_all["managedFields"] = [*kept, entry]

    # -- history and watches ------------------------------------------------------

    def _record(self, type_: str, info: KindInfo, obj: Obj, old: Obj | None) -> None:
        event = Event(self._rv, type_, info.resource, copy.deepcopy(obj), old)
        self._history.append(event)
        while len(self._history) > self.history_limit:
            self._oldest = self._history.popleft().rv
        for watcher in self._watchers:
            if watcher.info.resource == info.resource:
                item = watcher.view(event)
                if item is not None:
                    watcher.push(item)

    def watch(
        self,
        info: KindInfo,
        namespace: str,
        *,
        labels: str | None,
        fields: str | None,
        resource_version: str | None,
        loop: asyncio.AbstractEventLoop,
    ) -> Watcher:
        """Open a watch; its queue already holds what it must see first.

        ``resource_version`` absent or "0": an ``ADDED`` for each current
        object. Otherwise every change after it, from history — or, if
        history no longer reaches back that far, an ``ERROR`` with a 410
        Expired Status, then the end. Live changes follow in commit order.
        """
        watcher = Watcher(info, namespace, parse_label_selector(labels), parse_field_selector(fields), loop)
        since: int | None = None
        if resource_version not in (None, "", "0"):
            try:
                since = int(str(resource_version))
            except ValueError:
                raise errors.bad_request(
                    f'resourceVersion: Invalid value: "{resource_version}": must be an integer'
                ) from None
        with self._lock:
            if since is None:
                for _, obj in sorted(self._objects.get(info.resource, {}).items()):
                    if watcher.matches(obj):
                        watcher.queue.put_nowait(("ADDED", watcher.render(obj)))
            elif since < self._oldest:
                gone = errors.expired(f"too old resource version: {since} ({self._oldest})")
                watcher.queue.put_nowait(("ERROR", gone.status))
                watcher.queue.put_nowait(("END", None))
                return watcher
            else:
                for event in self._history:
                    if event.rv > since and event.resource == info.resource:
                        item = watcher.view(event)
                        if item is not None:
                            watcher.queue.put_nowait(item)
            self._watchers.add(watcher)
        return watcher

    def bookmark(self, watcher: Watcher) -> None:
        """Queue a BOOKMARK at the current resourceVersion, behind every change already queued."""
        with self._lock:
            if watcher in self._watchers:
                meta = {"resourceVersion": str(self._rv), "creationTimestamp": None}
                info = watcher.info
                watcher.push(
                    ("BOOKMARK", {"kind": info.kind, "apiVersion": info.api_version, "metadata": meta})
                )

    @property
    def watch_count(self) -> int:
        """How many watches are open."""
        with self._lock:
            return len(self._watchers)

    def unwatch(self, watcher: Watcher) -> None:
        with self._lock:
            self._watchers.discard(watcher)

    def end_all_watches(self) -> None:
        """Forget every open watch (the server is going away with their connections)."""
        with self._lock:
            self._watchers.clear()

    def compact(self) -> None:
        """Forget all history, as etcd compaction does: resuming from any earlier resourceVersion
        (a watch, or a list's continue token) gets 410 Gone; open watches get an ERROR 410 and end."""
        with self._lock:
            self._history.clear()
            self._oldest = self._rv
            self._expired_pages.update(self._pages)
            self._pages.clear()
            gone = errors.expired("The resourceVersion for the provided watch is too old.")
            for watcher in self._watchers:
                watcher.push(("ERROR", gone.status))
                watcher.push(("END", None))
            self._watchers.clear()
