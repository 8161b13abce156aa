""":class:`ApiServerDouble`: the store served over HTTP/1.1 from a background thread."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import h11
import yaml

from apiserver_double.errors import ApiStatusError, status_body
from apiserver_double.http import (
    READ_SIZE,
    Reply,
    Request,
    Server,
    WatchReply,
    parse_target,
    route,
    stream_watch,
)
from apiserver_double.kinds import DEFAULT_KINDS, KindInfo
from apiserver_double.patches import MERGE
from apiserver_double.store import Store
from weir.testkit._conn import ConnectionTracker
from weir.testkit.net import require_loopback

__all__ = ["DIRECT_MANAGER", "ApiServerDouble"]

log = logging.getLogger(__name__)

#: The field manager of changes made through the direct-manipulation methods.
DIRECT_MANAGER = "weir-testkit"


@dataclass
class _Fault:
    method: str
    path_prefix: str
    status: int
    remaining: int


class ApiServerDouble:
    """A Kubernetes API server test double on a loopback address (see the package docstring).

    The data (objects, resourceVersion counter, history) lives in the
    instance, not in the serving thread: :meth:`stop` then :meth:`start`
    is an API-server restart on the same port with etcd's data intact, and
    the direct-manipulation methods work whether or not it is serving.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kinds: Iterable[KindInfo] = DEFAULT_KINDS,
        bookmark_interval_s: float = 1.0,
        history_limit: int = 1000,
        enforce_namespaces: bool = False,
    ) -> None:
        self._host = require_loopback(host, what="ApiServerDouble")
        self._port = port
        self._bookmark_interval = bookmark_interval_s
        self._store = Store(kinds, history_limit=history_limit, enforce_namespaces=enforce_namespaces)
        self._lock = threading.Lock()
        self._requests: list[tuple[str, str]] = []
        self._faults: list[_Fault] = []
        self._tokens: set[str] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._context: Server | None = None

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        """Serve from a background thread; return once listening. Idempotent.

        The first start binds ``port`` (0: a free one); later starts bind the
        same port again.

        Raises:
            OSError: if the port cannot be bound.
        """
        if self._thread is not None:
            return
        ready = threading.Event()
        failure: list[BaseException] = []
        thread = threading.Thread(
            target=self._run, args=(ready, failure), name=f"apiserver-double:{self._port}", daemon=True
        )
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            raise failure[0]
        self._thread = thread

    def stop(self) -> None:
        """Close the listening socket and every connection (watches are cut), join the thread. Idempotent."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None or loop is None or stopping is None:
            return
        loop.call_soon_threadsafe(stopping.set)
        thread.join()
        self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready, failure))
        except BaseException as exc:  # pragma: no cover - a bug in _serve; start() must not hang
            failure.append(exc)
            ready.set()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._loop = None

    async def _serve(self, ready: threading.Event, failure: list[BaseException]) -> None:
        connections = ConnectionTracker()
        self._stopping = asyncio.Event()
        try:
            server = await asyncio.start_server(
                lambda r, w: self._on_connection(r, w, connections), self._host, self._port
            )
        except OSError as exc:
            failure.append(exc)
            ready.set()
            return
        self._port = server.sockets[0].getsockname()[1]
        self._context = Server(self._store, asyncio.get_running_loop())
        ready.set()
        await self._stopping.wait()
        server.close()
        self._store.end_all_watches()
        await connections.close_all()
        await server.wait_closed()

    # -- facts ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port (0 until the first :meth:`start` picks one, if constructed with 0)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        if self._port == 0:
            raise RuntimeError("ApiServerDouble.url: start() the server first (it binds the port)")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    @property
    def serving(self) -> bool:
        return self._thread is not None

    @property
    def resource_version(self) -> str:
        """The current (latest) resourceVersion."""
        return str(self._store.resource_version)

    @property
    def open_watches(self) -> int:
        """How many watch streams are open right now (e.g. to wait until a client is watching)."""
        return self._store.watch_count

    @property
    def requests(self) -> list[tuple[str, str]]:
        """Every request received, as ``(method, path?query)``, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def write_kubeconfig(
        self, path: str | Path, *, namespace: str = "default", token: str | None = None
    ) -> Path:
        """Write a kubeconfig for this server (plain HTTP) that lightkube's ``KubeConfig.from_file`` reads.

        With ``token`` the user authenticates with that bearer token, and the
        server from now on requires a token it knows (other requests get 401).
        """
        user: dict[str, str] = {}
        if token is not None:
            self.authorize(token)
            user["token"] = token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "weir-double", "cluster": {"server": self.url}}],
            "users": [{"name": "weir-double", "user": user}],
            "contexts": [
                {
                    "name": "weir-double",
                    "context": {"cluster": "weir-double", "user": "weir-double", "namespace": namespace},
                }
            ],
            "current-context": "weir-double",
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target

    def authorize(self, token: str) -> None:
        """Accept bearer ``token``; once any token is known, requests without a known one get 401."""
        with self._lock:
            self._tokens.add(token)

    def revoke(self, token: str) -> None:
        """Stop accepting ``token`` (if no token is left, the server is open again)."""
        with self._lock:
            self._tokens.discard(token)

    def fail_next(self, method: str, path_prefix: str, status: int = 500, count: int = 1) -> None:
        """Answer the next ``count`` requests with ``method`` ("*": any) whose path starts with
        ``path_prefix`` with a ``status`` Status error, before they reach the store."""
        with self._lock:
            self._faults.append(_Fault(method.upper(), path_prefix, status, count))

    # -- kinds ------------------------------------------------------------------------

    def install_crd(self, group: str, version: str, plural: str, kind: str, namespaced: bool = True) -> None:
        """Serve a CRD version from now on (as when a CRD is created)."""
        self._store.install(KindInfo(group, version, kind, plural, namespaced))

    def install_kind(self, info: KindInfo) -> None:
        self._store.install(info)

    def uninstall_crd(
        self, group: str, version: str, plural: str, kind: str | None = None, namespaced: bool | None = None
    ) -> None:
        """Stop serving a CRD version; its paths answer 404. Removing the last version deletes the
        objects (watches see DELETED events, then end), as deleting a CRD does.

        Raises:
            ValueError: if that version is not served (or its kind differs from ``kind``).
        """
        info = self._store.kind_at(group, version, plural)
        if info is None or (kind is not None and info.kind != kind):
            raise ValueError(f"uninstall_crd: {plural}.{group}/{version} ({kind}) is not served")
        self._store.uninstall(group, version, plural)

    # -- direct manipulation ----------------------------------------------------------

    def _target(self, api_version: str, kind: str, namespace: str | None) -> tuple[KindInfo, str]:
        info = self._store.kind_of(api_version, kind)
        if not info.namespaced:
            return info, ""
        if not namespace:
            raise ValueError(f"{kind} is namespaced: give a namespace")
        return info, namespace

    def _object_target(self, obj: dict[str, Any]) -> tuple[KindInfo, str, str]:
        meta = obj.get("metadata") or {}
        if not obj.get("apiVersion") or not obj.get("kind"):
            raise ValueError(f"the object {meta.get('name')!r} needs an apiVersion and a kind")
        info, namespace = self._target(
            str(obj.get("apiVersion", "")), str(obj.get("kind", "")), meta.get("namespace") or "default"
        )
        return info, namespace, str(meta.get("name") or "")

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` (namespace from its metadata, else ``default``), as a POST would.

        Raises:
            ApiStatusError: as the API server answers (409 AlreadyExists; 404 for a kind not served...).
        """
        info, namespace, _ = self._object_target(obj)
        return self._store.create(info, namespace, obj, manager=DIRECT_MANAGER)

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace ``obj`` as a PUT would, except that a body without ``metadata.resourceVersion``
        is an unconditional update for every kind (one with a stale one still gets 409)."""
        info, namespace, name = self._object_target(obj)
        return self._store.update(
            info, namespace, name, obj, manager=DIRECT_MANAGER, require_resource_version=False
        )

    def replace_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT ``obj``'s status through ``/status`` (unconditional without a resourceVersion)."""
        info, namespace, name = self._object_target(obj)
        self._require_status(info)
        return self._store.update(
            info,
            namespace,
            name,
            obj,
            manager=DIRECT_MANAGER,
            subresource="status",
            require_resource_version=False,
        )

    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        patch_type: str = MERGE,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PATCH with ``patch`` (a JSON tree) in media type ``patch_type``."""
        info, ns = self._target(api_version, kind, namespace)
        if subresource is not None:
            self._require_status(info)
        body = json.dumps(patch).encode()
        return self._store.patch(
            info, ns, name, patch_type, body, manager=DIRECT_MANAGER, subresource=subresource
        )

    def patch_status(
        self, api_version: str, kind: str, namespace: str | None, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch ``status`` into the object's status through the ``/status`` subresource."""
        return self.patch(api_version, kind, namespace, name, {"status": status}, subresource="status")

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        """Delete at once. Raises ApiStatusError 404 if there is no such object."""
        info, ns = self._target(api_version, kind, namespace)
        self._store.delete(info, ns, name)

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None if there is none (a kind that is not served raises ApiStatusError 404)."""
        info, ns = self._target(api_version, kind, namespace)
        try:
            return self._store.get(info, ns, name)
        except ApiStatusError as exc:
            if exc.code == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of a kind (in ``namespace``, or everywhere), sorted by namespace and name,
        each with ``apiVersion`` and ``kind``."""
        info = self._store.kind_of(api_version, kind)
        listed = self._store.list(info, (namespace or "") if info.namespaced else "")
        return [{"apiVersion": info.api_version, "kind": info.kind, **item} for item in listed["items"]]

    def compact(self) -> None:
        """Forget history, as etcd compaction does (see :meth:`Store.compact`)."""
        self._store.compact()

    @staticmethod
    def _require_status(info: KindInfo) -> None:
        if not info.status_subresource:
            raise ApiStatusError(404, "the server could not find the requested resource", "NotFound", {})

    # -- HTTP ---------------------------------------------------------------------------

    def _admit(self, method: str, target: str, headers: dict[str, str]) -> None:
        """Log the request, then check its token and the injected faults."""
        with self._lock:
            self._requests.append((method, target))
            if self._tokens:
                scheme, _, token = headers.get("authorization", "").partition(" ")
                if scheme.lower() != "bearer" or token.strip() not in self._tokens:
                    raise ApiStatusError(401, "Unauthorized", "Unauthorized")
            path = target.partition("?")[0]
            for fault in self._faults:
                if fault.method in ("*", method) and path.startswith(fault.path_prefix):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    raise ApiStatusError(fault.status, f"injected failure: {method} {fault.path_prefix}")

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connections: ConnectionTracker
    ) -> None:
        async with connections.track(writer) as serve:
            if not serve:
                return
            try:
                await self._serve_connection(reader, writer)
            except (OSError, EOFError, h11.ProtocolError) as exc:
                log.debug("apiserver double: connection ended: %r", exc)
            except Exception:
                log.exception("apiserver double: connection handler failed")

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            received = await _read_request(conn, reader, writer)
            if received is None:
                return
            request, body = received
            method = request.method.decode("ascii")
            target = request.target.decode("latin-1")
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
            segments, query = parse_target(target)
            try:
                self._admit(method, target, headers)
                assert self._context is not None  # set before the first connection is accepted
                answer = route(self._context, Request(method, segments, query, headers, body))
            except ApiStatusError as exc:
                answer = Reply(exc.code, exc.status)
            except Exception as exc:
                log.exception("apiserver double: %s %s failed", method, target)
                answer = Reply(500, status_body(500, f"apiserver double: {exc!r}"))
            if isinstance(answer, WatchReply):
                if not await stream_watch(self._store, answer, conn, reader, writer, self._bookmark_interval):
                    return
            else:
                payload = answer.encode()
                head = [("content-type", answer.content_type), ("content-length", str(len(payload)))]
                response = h11.Response(
                    status_code=answer.status, headers=head, reason=_phrase(answer.status)
                )
                writer.write(conn.send(response) or b"")
                writer.write(conn.send(h11.Data(data=payload)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
            if h11.MUST_CLOSE in (conn.our_state, conn.their_state):
                return
            conn.start_next_cycle()


def _phrase(code: int) -> bytes:
    try:
        return HTTPStatus(code).phrase.encode("ascii")
    except ValueError:
        return b""


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[h11.Request, bytes] | None:
    """The next complete request on ``conn``, or None when the client closed (or spoke nonsense)."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                message = json.dumps(status_body(400, f"bad request: {exc}")).encode()
                head = [("content-type", "application/json"), ("content-length", str(len(message)))]
                writer.write(
                    conn.send(h11.Response(status_code=400, headers=head, reason=b"Bad Request")) or b""
                )
                writer.write(conn.send(h11.Data(data=message)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
            return None
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(READ_SIZE))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None
