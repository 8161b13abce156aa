"""The few API-server calls weir makes, over the ``lightkube`` asyncio client.

Every kind is used as a *generic* resource (plain JSON objects, no typed
models): weir parses objects with its own models (:mod:`weir.api`), exactly
as it parses files, so decoding them twice would only cost time and memory.

:class:`KubeApi` offers: list (with the collection's ``resourceVersion``),
watch from a ``resourceVersion`` with bookmarks, get, a merge patch of the
``status`` subresource guarded by ``metadata.resourceVersion`` (so a stale
write is refused with ``409 Conflict`` instead of overwriting someone
else's), create/replace for Leases, create/delete for the Services of
EndpointSelector XBackends, and create/patch/delete for the per-Gateway Services
and EndpointSlices of ``--gateway-services``. Errors keep lightkube's exceptions;
:func:`status_code` and :func:`is_transient` classify them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient, KubeConfig, NotReadyError
from lightkube.core.generic_client import WatchDriver
from lightkube.core.resource import ApiInfo
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericGlobalStatus,
    GenericNamespacedResource,
    GenericNamespacedStatus,
    create_api_info,
)
from lightkube.types import PatchType

from weir.api.meta import KubeObject

__all__ = [
    "CRD",
    "LEASE",
    "SERVICE_ACCOUNT_DIR",
    "KubeApi",
    "WatchedKind",
    "is_transient",
    "load_config",
    "status_code",
]

#: Where a pod finds its service account token, CA and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class WatchedKind:
    """A resource weir reads from the API server: its group, version, kind, plural and scope."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        """``XBackend (gateway.networking.x-k8s.io/v1alpha1)``, as log lines name it."""
        return f"{self.kind} ({self.api_version})"

    @classmethod
    def of(cls, model: type[KubeObject]) -> WatchedKind:
        """The resource a model of :mod:`weir.api` reads (its ``API_VERSION``)."""
        group, _, version = model.API_VERSION.rpartition("/")
        return cls(group, version, model.KIND, plural(model.KIND), model.NAMESPACED)


def plural(kind: str) -> str:
    """The resource name of ``kind`` as the API server spells it (English rules its kinds follow)."""
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    return lower + "s"


#: The Lease of leader election (``coordination.k8s.io/v1``).
LEASE = WatchedKind("coordination.k8s.io", "v1", "Lease", "leases", True)

#: CustomResourceDefinitions: weir reads one, XBackend's, for the shape of its status
#: (:mod:`~weir.providers.kubernetes.xbackend`).
CRD = WatchedKind(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False
)


def load_config(kubeconfig: str | os.PathLike[str] | None) -> KubeConfig:
    """The client configuration: ``kubeconfig`` if given; else in-cluster when running in a pod
    (``KUBERNETES_SERVICE_HOST`` set); else ``$KUBECONFIG``, else ``~/.kube/config``."""
    if kubeconfig is not None:
        return KubeConfig.from_file(kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return KubeConfig.from_service_account(SERVICE_ACCOUNT_DIR)
    return KubeConfig.from_file(os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser())


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a failed call (from a ``Status`` body or the response), if it got one."""
    if isinstance(exc, ApiError) and exc.status is not None and exc.status.code:
        return int(exc.status.code)
    if isinstance(exc, httpx2.HTTPStatusError):
        return exc.response.status_code
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same call later may succeed: no connection, a timeout, 429 or 5xx."""
    if isinstance(exc, httpx2.TransportError | OSError | TimeoutError):
        return True
    code = status_code(exc)
    return code is not None and (code == 429 or code >= 500)


def describe(exc: BaseException) -> str:
    """A short description of a failed call for a log line."""
    code = status_code(exc)
    if isinstance(exc, ApiError) and exc.status is not None:
        return f"{code} {exc.status.reason or ''}: {exc.status.message or ''}".strip()
    if code is not None:
        return f"HTTP {code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@functools.cache
def _resource(kind: WatchedKind) -> Any:
    """A lightkube generic resource class for ``kind``, with its ``Status`` subresource.

    Made here rather than with ``create_namespaced_resource``: that registers
    the class in lightkube's global registry, which refuses a second class for
    a core kind (``v1 Service``) that anything else in the process loaded.
    """
    info = create_api_info(kind.group, kind.version, kind.kind, kind.plural)
    status_info = ApiInfo(
        resource=info.resource,
        parent=info.resource,
        plural=kind.plural,
        verbs=["get", "patch", "put"],
        action="status",
    )
    status_base = GenericNamespacedStatus if kind.namespaced else GenericGlobalStatus
    base = GenericNamespacedResource if kind.namespaced else GenericGlobalResource
    status_cls = type(f"{kind.kind}Status", (status_base,), {"_api_info": status_info})
    return type(kind.kind, (base,), {"_api_info": info, "Status": status_cls})


class KubeApi:
    """One connection to the API server (``lightkube.AsyncClient``) and the calls weir needs."""

    def __init__(self, config: KubeConfig, *, timeout_s: float = 10.0, field_manager: str = "weir") -> None:
        self._client = AsyncClient(
            config=config, timeout=httpx2.Timeout(timeout_s), field_manager=field_manager
        )

    @property
    def server(self) -> str:
        """The API server's URL, for log lines."""
        return str(self._client.config.cluster.server)

    @property
    def default_namespace(self) -> str:
        """The configuration's namespace (in a pod: the service account's)."""
        return str(self._client.namespace)

    async def close(self) -> None:
        await self._client.close()

    @staticmethod
    def _namespace(kind: WatchedKind, namespace: str | None) -> str | None:
        if not kind.namespaced:
            return None
        return namespace if namespace is not None else "*"

    async def list(
        self, kind: WatchedKind, namespace: str | None, *, labels: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Every object of ``kind`` (in ``namespace``; ``None``: all; with ``labels``, lightkube's
        label selector, only those), and the list's resourceVersion."""
        listing = self._client.list(
            _resource(kind), namespace=self._namespace(kind, namespace), chunk_size=500, labels=labels
        )
        items = [dict(item) async for item in listing]
        try:
            version = listing.resourceVersion
        except NotReadyError:  # the server sent none (no conformant server does)
            version = ""
        return items, version

    async def current_version(self, kind: WatchedKind, namespace: str | None) -> str:
        """The API server's current resourceVersion, from a list of at most one object of ``kind``
        (a consistent read: what its storage holds now)."""
        generic = self._client._client
        _, version, _ = await generic.request(
            "list", res=_resource(kind), namespace=self._namespace(kind, namespace), params={"limit": 1}
        )
        return str(version or "")

    def watch(
        self, kind: WatchedKind, namespace: str | None, resource_version: str, timeout_s: int
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """Events after ``resource_version``: ``(type, object)``, ``BOOKMARK`` events included.

        One watch request: the stream ends when the server ends it (after
        ``timeout_s``), and the caller watches again from the last version.
        (lightkube's own watch would reconnect by itself, and a caller could
        then not tell a quiet kind from a dead connection: a real API server
        sends no bookmark for a kind that had no event since it started.)
        Any error is raised: an ``ERROR`` event (``410 Gone`` once the version
        is compacted away) as :class:`lightkube.ApiError`, a refused request as
        ``httpx2.HTTPStatusError``, a broken connection as
        ``httpx2.TransportError``.
        """
        # AsyncClient.watch has no way to ask for bookmarks, so the request is
        # prepared through its generic client, with the same code path otherwise.
        generic = self._client._client
        request = generic.prepare_request(
            "list",
            res=_resource(kind),
            namespace=self._namespace(kind, namespace),
            watch=True,
            params={
                "resourceVersion": resource_version or None,
                "timeoutSeconds": timeout_s,
                "allowWatchBookmarks": "true",
            },
        )
        return self._events(generic, request)

    @staticmethod
    async def _events(generic: Any, request: Any) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        driver: Any = WatchDriver(request, generic._client.build_request)
        response = await generic.send(driver.get_request(timeout=generic._watch_timeout), stream=True)
        try:
            response.raise_for_status()
            async for line in response.aiter_lines():
                event_type, obj = driver.process_one_line(line)
                yield str(event_type), dict(obj)
        finally:
            await response.aclose()

    async def get(self, kind: WatchedKind, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or ``None`` if it does not exist."""
        try:
            obj = await self._client.get(_resource(kind), name, namespace=namespace or None)
        except ApiError as exc:
            if status_code(exc) == 404:
                return None
            raise
        return dict(obj)

    async def patch_status(
        self, kind: WatchedKind, namespace: str, name: str, resource_version: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch the ``status`` subresource, if the object is still at ``resource_version``.

        ``status`` replaces the whole status: a field weir no longer sets is
        sent as ``null`` by the caller. Raises ``ApiError`` 409 when the
        object changed since, 404 when it is gone.
        """
        body = {"metadata": {"resourceVersion": resource_version}, "status": status}
        obj = await self._client.patch(
            _resource(kind).Status,
            name,
            body,
            namespace=namespace or None,
            patch_type=PatchType.MERGE,
        )
        return dict(obj)

    async def create(self, kind: WatchedKind, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj``; ``ApiError`` 409 if it exists."""
        created = await self._client.create(_resource(kind)(obj))
        return dict(created)

    async def patch(
        self, kind: WatchedKind, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch the object (``null`` removes a key; a list is replaced whole). With
        ``metadata.resourceVersion`` in ``body``, ``ApiError`` 409 when the object changed since."""
        obj = await self._client.patch(
            _resource(kind), name, body, namespace=namespace or None, patch_type=PatchType.MERGE
        )
        return dict(obj)

    async def delete(self, kind: WatchedKind, namespace: str, name: str) -> None:
        """Delete the object; one already gone is fine."""
        try:
            await self._client.delete(_resource(kind), name, namespace=namespace or None)
        except ApiError as exc:
            if status_code(exc) != 404:
                raise

    async def replace(self, kind: WatchedKind, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace ``obj`` (its ``metadata.resourceVersion`` must be current: ``ApiError`` 409 if not)."""
        replaced = await self._client.replace(_resource(kind)(obj))
        return dict(replaced)
