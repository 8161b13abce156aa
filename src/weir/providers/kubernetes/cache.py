"""The Kubernetes provider's cache: objects as listed and watched, validated, ready to snapshot.

:class:`ObjectCache` holds, per object, the last *valid* version (what is
served) and what the API server last said about it (``resourceVersion`` and
``status``, what status writes compare with). Every object goes through the
same models and error wording as manifests in files (:mod:`weir.api`,
:func:`weir.api.errors.api_errors`); an invalid version is reported as a
:class:`~weir.loader.Problem` naming ``Kind ns/name`` and the field path, and
the previous valid version keeps serving (as the files provider does).

Memory: ``metadata.managedFields`` and the ``kubectl apply`` annotation are
dropped on arrival (in a cluster they are often most of an object's bytes).
Secrets and ConfigMaps keep their ``data`` only while some object references
them (certificate refs, CA refs, anything typed ``Secret``/``ConfigMap``, or a
field named for a secret): the rest are kept as metadata only, so that a
reference appearing later resolves at once to "exists", and
:meth:`ObjectCache.wanted` names the ones whose data must be fetched again.
Translation never reads an unreferenced Secret's data, so dropping it changes
nothing it decides.

The cache is synchronous and knows nothing of HTTP: the watchers feed it,
the provider snapshots it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from weir.api import registry
from weir.api.errors import api_errors
from weir.api.meta import KubeObject, ObjectKey
from weir.loader import Problem
from weir.providers.kubernetes.api import WatchedKind
from weir.resources import Resources

__all__ = ["SOURCE", "CacheStats", "KubeSnapshot", "ObjectCache", "references"]

log = logging.getLogger("weir.kubernetes")

#: What problems name as their "file": objects come from the API server.
SOURCE = "kubernetes"
#: Appended to an object's problems when its last valid version is still served.
KEPT_OBJECT = "kept the last valid version"

#: Kinds whose payload is kept only while something references them.
DATA_KINDS = frozenset({"Secret", "ConfigMap"})
_DATA_FIELDS = ("data", "stringData", "binaryData")
#: Kinds that reference no Secret or ConfigMap (not walked for references).
_NO_REFERENCES = frozenset({"Secret", "ConfigMap", "Service", "EndpointSlice", "Namespace"})
#: Written by ``kubectl apply``: a second copy of the whole object.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class KubeSnapshot:
    """What the cluster currently says, as served: the objects and what is wrong with them."""

    resources: Resources
    problems: tuple[Problem, ...]


@dataclass(frozen=True)
class CacheStats:
    """How much the cache holds: objects, Secrets/ConfigMaps held without data, payload bytes kept."""

    objects: int
    elided: int
    data_bytes: int


@dataclass
class _Entry:
    version: str  # metadata.resourceVersion, latest seen
    status: dict[str, Any] | None  # status, latest seen
    obj: KubeObject | None  # last valid version (None: never valid)
    problems: tuple[Problem, ...] = ()
    refs: frozenset[ObjectKey] = frozenset()
    elided: bool = False


@dataclass
class _Unserved:
    kind: WatchedKind
    namespaces: set[str | None] = field(default_factory=set)


def references(obj: KubeObject) -> frozenset[ObjectKey]:
    """The Secrets and ConfigMaps ``obj`` refers to (a superset of what translation reads).

    A reference is any part of the spec with a ``name`` and a core ``group``
    whose ``kind`` is ``Secret`` or ``ConfigMap``, or, without a ``kind``,
    held in a field whose name says secret or config map. Its namespace is
    its own ``namespace`` or the object's.
    """
    if obj.KIND in _NO_REFERENCES:
        return frozenset()
    found: set[ObjectKey] = set()

    def walk(node: Any, field_name: str) -> None:
        if isinstance(node, BaseModel):
            name = getattr(node, "name", None)
            if isinstance(name, str) and getattr(node, "group", "") in ("", None):
                kind = getattr(node, "kind", None)
                if kind is None:
                    lowered = field_name.lower()
                    kind = (
                        "Secret" if "secret" in lowered else "ConfigMap" if "config_map" in lowered else None
                    )
                if kind in DATA_KINDS:
                    namespace = getattr(node, "namespace", None) or obj.namespace
                    found.add(ObjectKey(kind, namespace, name))
            for child_name, value in node.__dict__.items():
                walk(value, child_name)
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item, field_name)
        elif isinstance(node, dict):
            for value in node.values():
                if not isinstance(value, str):
                    walk(value, field_name)

    for name, value in obj.__dict__.items():
        if name not in ("metadata", "status", "api_version", "kind"):
            walk(value, name)
    return frozenset(found)


def _trimmed(kind: WatchedKind, raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with its type set (list items may lack it) and the bookkeeping nobody reads dropped."""
    out = dict(raw)
    out["apiVersion"] = kind.api_version
    out["kind"] = kind.kind
    metadata = dict(out.get("metadata") or {})
    metadata.pop("managedFields", None)
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict) and LAST_APPLIED in annotations:
        metadata["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    out["metadata"] = metadata
    return out


def _without_data(obj: KubeObject) -> KubeObject:
    """A Secret or ConfigMap with its payload dropped."""
    update: dict[str, Any] = {
        name: {} for name in ("data", "string_data", "binary_data") if name in type(obj).model_fields
    }
    return obj.model_copy(update=update)


class ObjectCache:
    """Objects by key, fed by list and watch results; :meth:`snapshot` makes an immutable view.

    ``on_change`` is called after every change that a snapshot could show.
    """

    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self._on_change = on_change
        self._kinds: dict[str, dict[ObjectKey, _Entry]] = {}
        self._referenced: Counter[ObjectKey] = Counter()
        self._unserved: dict[str, _Unserved] = {}
        self._logged: set[tuple[str | None, str | None, str]] = set()

    # ------------------------------------------------------------------ feeding

    def replace(self, kind: WatchedKind, namespace: str | None, items: Iterable[Mapping[str, Any]]) -> None:
        """A fresh list of ``kind`` (in ``namespace``; ``None``: all): what it lacks was deleted."""
        seen = {self._upsert(kind, raw) for raw in items}
        entries = self._kinds.setdefault(kind.kind, {})
        for key in [k for k in entries if k not in seen and namespace in (None, k.namespace)]:
            self._remove(key)
        self._served(kind, namespace)
        self._on_change()

    def apply(self, kind: WatchedKind, event_type: str, raw: Mapping[str, Any]) -> None:
        """One watch event (``ADDED``, ``MODIFIED`` or ``DELETED``)."""
        if event_type == "DELETED":
            metadata = raw.get("metadata") or {}
            namespace = str(metadata.get("namespace") or "") if kind.namespaced else ""
            self._remove(ObjectKey(kind.kind, namespace, str(metadata.get("name") or "")))
        else:
            self._upsert(kind, raw)
        self._on_change()

    def fill(self, kind: WatchedKind, raw: Mapping[str, Any], expected_version: str) -> None:
        """A Secret or ConfigMap fetched again for its data, unless a newer event came meanwhile."""
        key = self._key(kind, raw)
        entry = self._kinds.get(kind.kind, {}).get(key)
        if entry is None or entry.version != expected_version:
            return  # deleted, or an event (with data, since it is referenced) came first
        self._upsert(kind, raw)
        self._on_change()

    def unserved(self, kind: WatchedKind, namespace: str | None) -> None:
        """The API server does not serve ``kind`` (its CRD is not installed): forget its objects."""
        entries = self._kinds.get(kind.kind, {})
        gone = [k for k in entries if namespace in (None, k.namespace)]
        for key in gone:
            self._remove(key)
        state = self._unserved.setdefault(kind.kind, _Unserved(kind))
        if gone or namespace not in state.namespaces:
            state.namespaces.add(namespace)
            self._on_change()  # probing again and finding it still absent changes nothing

    def _served(self, kind: WatchedKind, namespace: str | None) -> None:
        state = self._unserved.get(kind.kind)
        if state is not None:
            state.namespaces.discard(namespace)
            if not state.namespaces:
                del self._unserved[kind.kind]

    @staticmethod
    def _key(kind: WatchedKind, raw: Mapping[str, Any]) -> ObjectKey:
        metadata = raw.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "") if kind.namespaced else ""
        return ObjectKey(kind.kind, namespace, str(metadata.get("name") or ""))

    def _upsert(self, kind: WatchedKind, raw: Mapping[str, Any]) -> ObjectKey:
        data = _trimmed(kind, raw)
        key = self._key(kind, data)
        entries = self._kinds.setdefault(kind.kind, {})
        previous = entries.get(key)
        elided = kind.kind in DATA_KINDS and self._referenced[key] == 0
        if elided:
            for name in _DATA_FIELDS:
                data.pop(name, None)
        model = registry.lookup(kind.api_version, kind.kind)
        if model is None:  # WATCHED only names registered kinds
            raise LookupError(f"no model for {kind}")
        problems: tuple[Problem, ...] = ()
        try:
            obj: KubeObject | None = model.model_validate(data)
        except ValidationError as err:
            obj = previous.obj if previous is not None else None
            suffix = f": {KEPT_OBJECT}" if obj is not None else ""
            problems = tuple(
                Problem("error", SOURCE, None, str(key), path, message + suffix)
                for path, message in api_errors(model, err)
            )
            if previous is not None and previous.elided and obj is not None and not elided:
                obj = None  # the kept version has no data, and data is wanted: nothing usable
        refs = references(obj) if obj is not None else frozenset()
        metadata = data["metadata"]
        entries[key] = _Entry(
            version=str(metadata.get("resourceVersion") or ""),
            status=data.get("status") if isinstance(data.get("status"), dict) else None,
            obj=obj,
            problems=problems,
            refs=refs,
            elided=elided,
        )
        self._reference(previous.refs if previous is not None else frozenset(), refs)
        return key

    def _remove(self, key: ObjectKey) -> None:
        entry = self._kinds.get(key.kind, {}).pop(key, None)
        if entry is not None:
            self._reference(entry.refs, frozenset())

    def _reference(self, before: frozenset[ObjectKey], after: frozenset[ObjectKey]) -> None:
        """Count references; a Secret or ConfigMap nobody references any more drops its data."""
        if before == after:
            return
        for key in after - before:
            self._referenced[key] += 1
        for key in before - after:
            self._referenced[key] -= 1
            if self._referenced[key] <= 0:
                del self._referenced[key]
                entry = self._kinds.get(key.kind, {}).get(key)
                if entry is not None and not entry.elided:
                    entry.obj = _without_data(entry.obj) if entry.obj is not None else None
                    entry.elided = True

    # ------------------------------------------------------------------ reading

    def live(self, key: ObjectKey) -> tuple[str, dict[str, Any] | None] | None:
        """``(resourceVersion, status)`` as last seen, or ``None`` if the object is not known."""
        entry = self._kinds.get(key.kind, {}).get(key)
        return None if entry is None else (entry.version, entry.status)

    def wanted(self) -> dict[ObjectKey, str]:
        """Referenced Secrets and ConfigMaps held without their data, with their resourceVersion."""
        out: dict[ObjectKey, str] = {}
        for key in self._referenced:
            entry = self._kinds.get(key.kind, {}).get(key)
            if entry is not None and entry.elided:
                out[key] = entry.version
        return out

    def unserved_kinds(self) -> tuple[WatchedKind, ...]:
        return tuple(state.kind for _, state in sorted(self._unserved.items()))

    def stats(self) -> CacheStats:
        objects = elided = data_bytes = 0
        for entries in self._kinds.values():
            for entry in entries.values():
                objects += 1
                elided += entry.elided
                if entry.obj is not None and entry.obj.KIND in DATA_KINDS:
                    for name in ("data", "string_data", "binary_data"):
                        payload = getattr(entry.obj, name, None) or {}
                        data_bytes += sum(len(k) + len(v) for k, v in payload.items())
        return CacheStats(objects, elided, data_bytes)

    def snapshot(self) -> KubeSnapshot:
        """An immutable view of every valid object, and every standing problem (new ones are logged)."""
        objects = [e.obj for entries in self._kinds.values() for e in entries.values() if e.obj is not None]
        problems = [p for entries in self._kinds.values() for e in entries.values() for p in e.problems]
        problems.sort(key=lambda p: (p.object or "", p.field or ""))
        for kind in self.unserved_kinds():
            problems.append(Problem("warning", SOURCE, None, None, None, not_installed_message(kind)))
        self._log_new(problems)
        unserved = frozenset(kind.kind for kind in self.unserved_kinds())
        return KubeSnapshot(Resources.from_objects(objects, unserved=unserved), tuple(problems))

    def _log_new(self, problems: list[Problem]) -> None:
        standing = {(p.object, p.field, p.message) for p in problems}
        for problem in problems:
            if (problem.object, problem.field, problem.message) not in self._logged:
                text = ": ".join(part for part in (problem.object, problem.field, problem.message) if part)
                log.log(logging.ERROR if problem.severity == "error" else logging.WARNING, "%s", text)
        self._logged = standing


def not_installed_message(kind: WatchedKind) -> str:
    """The one line said about a kind the API server does not serve."""
    text = f"{kind} is not installed"
    if kind.kind == "XBackend":
        return (
            f"{text}; routes that reference it get ResolvedRefs=False/InvalidKind; install the "
            "experimental Gateway API CRDs to use it"
        )
    if kind.group == "weir.dev":
        return f"{text}; install weir's CRDs (`weir crds | kubectl apply -f -`) to use it"
    return f"{text}; objects of this kind are ignored until its CRD is installed"
