"""The API-server double's HTTP side: URL routing, the verbs, discovery, and watch streams.

One function per concern, all running on the server's event loop:
:func:`route` maps ``(method, path, query)`` to a store operation and
returns a :class:`Reply` or a :class:`WatchReply`; :func:`stream_watch`
sends a watch as a chunked HTTP/1.1 response of JSON lines.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import h11
import yaml

from apiserver_double import errors
from apiserver_double.errors import ApiStatusError
from apiserver_double.kinds import KindInfo
from apiserver_double.patches import APPLY
from apiserver_double.store import Store
from apiserver_double.watchers import Watcher

__all__ = ["Reply", "Request", "WatchReply", "route", "stream_watch"]

READ_SIZE = 65536
_JSON = "application/json"


@dataclass(frozen=True)
class Request:
    method: str
    #: Path segments, percent-decoded (``/apis/g/v/x`` → ``["apis", "g", "v", "x"]``).
    segments: list[str]
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any
    content_type: str = _JSON

    def encode(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body, separators=(",", ":")).encode()


@dataclass(frozen=True)
class WatchReply:
    watcher: Watcher
    #: Seconds until the server ends the stream (``timeoutSeconds``); ``inf``: never.
    timeout: float
    bookmarks: bool


@dataclass(frozen=True)
class Server:
    """What routing needs to know about the server it runs in."""

    store: Store
    loop: asyncio.AbstractEventLoop


# -- routing ----------------------------------------------------------------------------


def route(server: Server, req: Request) -> Reply | WatchReply:
    """Answer one request. Raises ApiStatusError for every refusal."""
    seg = req.segments
    if seg in (["healthz"], ["livez"], ["readyz"]):
        return Reply(200, b"ok", "text/plain; charset=utf-8")
    if seg == ["version"]:
        return Reply(200, {"major": "1", "minor": "34", "gitVersion": "v1.34.0-weir-apiserver-double"})
    if req.method == "GET" and seg == ["api"]:
        return Reply(200, {"kind": "APIVersions", "versions": ["v1"]})
    if req.method == "GET" and seg == ["apis"]:
        return Reply(200, _group_list(server.store))
    if len(seg) >= 2 and seg[0] == "api":
        group, version, rest = "", seg[1], seg[2:]
    elif len(seg) >= 3 and seg[0] == "apis":
        group, version, rest = seg[1], seg[2], seg[3:]
    elif req.method == "GET" and len(seg) == 2 and seg[0] == "apis":
        found = [g for g in _group_list(server.store)["groups"] if g["name"] == seg[1]]
        if not found:
            raise errors.resource_not_found()
        return Reply(200, {"kind": "APIGroup", "apiVersion": "v1", **found[0]})
    else:
        raise errors.resource_not_found()
    if not rest:
        if req.method != "GET":
            raise _method_not_allowed()
        return Reply(200, _resource_list(server.store, group, version))
    return _resource_request(server, req, group, version, rest)


def _resource_request(
    server: Server, req: Request, group: str, version: str, rest: list[str]
) -> Reply | WatchReply:
    store = server.store
    namespace: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        inner = store.kind_at(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise errors.resource_not_found()
    info = store.kind_at(group, version, rest[0])
    if info is None:
        raise errors.resource_not_found()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if (namespace is not None and not info.namespaced) or (info.namespaced and name and namespace is None):
        raise errors.resource_not_found()
    if subresource is not None and (subresource != "status" or not info.status_subresource):
        raise errors.resource_not_found()
    ns = namespace or ""
    q = req.query
    dry_run = _dry_run(q)
    manager = q.get("fieldManager") or _manager_from_agent(req.headers)
    if name is None:
        if req.method == "GET" and q.get("watch") in ("true", "1"):
            return _watch(server, info, ns, q)
        if req.method == "GET":
            limit = _int_param(q, "limit", 0)
            return Reply(
                200,
                store.list(
                    info,
                    ns,
                    labels=q.get("labelSelector"),
                    fields=q.get("fieldSelector"),
                    limit=limit,
                    continue_token=q.get("continue"),
                ),
            )
        if req.method == "POST" and (namespace is not None or not info.namespaced):
            return Reply(201, store.create(info, ns, _json_body(req), manager=manager, dry_run=dry_run))
        if req.method == "DELETE" and (namespace is not None or not info.namespaced):
            return Reply(200, _delete_collection(store, info, ns, q, dry_run))
        raise _method_not_allowed()
    if req.method == "GET":
        return Reply(200, store.get(info, ns, name))
    if req.method == "PUT":
        body = _json_body(req)
        return Reply(
            200, store.update(info, ns, name, body, manager=manager, subresource=subresource, dry_run=dry_run)
        )
    if req.method == "PATCH":
        content_type = req.headers.get("content-type", "").split(";")[0].strip()
        if content_type == APPLY and not q.get("fieldManager"):
            raise ApiStatusError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: '
                "fieldManager: Required value: is required for apply patch",
            )
        existed = _exists(store, info, ns, name)
        patched = store.patch(
            info, ns, name, content_type, req.body, manager=manager, subresource=subresource, dry_run=dry_run
        )
        return Reply(200 if existed else 201, patched)
    if req.method == "DELETE" and subresource is None:
        options = _json_body(req) if req.body.strip() else {}
        preconditions = options.get("preconditions") if isinstance(options, dict) else None
        gone = store.delete(info, ns, name, preconditions=preconditions, dry_run=dry_run)
        if not info.builtin:
            return Reply(200, gone)
        meta = gone["metadata"]
        details = {"name": name, "group": info.group, "kind": info.plural, "uid": meta.get("uid")}
        return Reply(
            200,
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details},
        )
    raise _method_not_allowed()


def _exists(store: Store, info: KindInfo, ns: str, name: str) -> bool:
    try:
        store.get(info, ns, name)
    except ApiStatusError:
        return False
    return True


def _delete_collection(store: Store, info: KindInfo, ns: str, q: Mapping[str, str], dry_run: bool) -> Any:
    listed = store.list(info, ns, labels=q.get("labelSelector"), fields=q.get("fieldSelector"))
    for item in listed["items"]:
        meta = item["metadata"]
        try:
            store.delete(info, meta.get("namespace", ""), meta["name"], dry_run=dry_run)
        except ApiStatusError as exc:
            if exc.code != 404:  # deleted meanwhile: fine
                raise
    return listed


def _watch(server: Server, info: KindInfo, ns: str, q: Mapping[str, str]) -> WatchReply:
    timeout = _int_param(q, "timeoutSeconds", 0)
    watcher = server.store.watch(
        info,
        ns,
        labels=q.get("labelSelector"),
        fields=q.get("fieldSelector"),
        resource_version=q.get("resourceVersion"),
        loop=server.loop,
    )
    return WatchReply(
        watcher, float(timeout) if timeout > 0 else math.inf, q.get("allowWatchBookmarks") == "true"
    )


def _method_not_allowed() -> ApiStatusError:
    return ApiStatusError(405, "the server does not allow this method on the requested resource")


def _int_param(q: Mapping[str, str], name: str, default: int) -> int:
    raw = q.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise errors.bad_request(f"{name}: Invalid value: {raw!r}: must be an integer") from None


def _dry_run(q: Mapping[str, str]) -> bool:
    value = q.get("dryRun")
    if value is None or value == "":
        return False
    if value != "All":
        raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return True


def _manager_from_agent(headers: Mapping[str, str]) -> str:
    """The API server's default field manager: the User-Agent up to its first ``/``."""
    agent = headers.get("user-agent", "")
    return agent.split("/")[0] or "unknown"


def _json_body(req: Request) -> Any:
    content_type = req.headers.get("content-type", _JSON).split(";")[0].strip()
    try:
        if content_type.endswith("yaml"):
            return yaml.safe_load(req.body.decode("utf-8"))
        return json.loads(req.body)
    except (ValueError, yaml.YAMLError) as exc:
        raise errors.bad_request(f"the request body could not be decoded as {content_type}: {exc}") from exc


# -- discovery ----------------------------------------------------------------------------

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version order: GA before beta before alpha, higher numbers first (sort ascending)."""
    match = _VERSION.match(version)
    if not match:
        return (3, 0, 0)
    major, stage, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -int(major), -int(minor or 0))


def _group_list(store: Store) -> dict[str, Any]:
    versions: dict[str, set[str]] = {}
    for info in store.served():
        if info.group:
            versions.setdefault(info.group, set()).add(info.version)
    groups = []
    for group, found in sorted(versions.items()):
        ordered = sorted(found, key=_version_priority)
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in ordered]
        groups.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _resource_list(store: Store, group: str, version: str) -> dict[str, Any]:
    kinds = [k for k in store.served() if k.group == group and k.version == version]
    if not kinds:
        raise errors.resource_not_found()
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    resources: list[dict[str, Any]] = []
    for k in kinds:
        base = {"namespaced": k.namespaced, "kind": k.kind}
        resources.append({"name": k.plural, "singularName": k.kind.lower(), **base, "verbs": verbs})
        if k.status_subresource:
            resources.append(
                {
                    "name": f"{k.plural}/status",
                    "singularName": "",
                    **base,
                    "verbs": ["get", "patch", "update"],
                }
            )
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


# -- watch streams ---------------------------------------------------------------------------


async def stream_watch(
    store: Store,
    reply: WatchReply,
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    bookmark_interval: float,
) -> bool:
    """Send a watch as JSON lines until it ends; return False if the client went away.

    The stream ends at ``timeoutSeconds``, after an ``ERROR`` event, when the
    store ends the watch (compaction, CRD removal), or when the client closes
    its side. BOOKMARKs are queued through the store, so each carries a
    resourceVersion no later than the events already sent.
    """
    watcher, loop = reply.watcher, asyncio.get_running_loop()
    peer_gone = asyncio.Event()
    monitor = asyncio.create_task(_watch_peer(reader, conn, watcher, peer_gone))
    getter: asyncio.Task[tuple[str, dict[str, Any] | None]] | None = None
    deadline = loop.time() + reply.timeout
    next_bookmark = loop.time() + bookmark_interval if reply.bookmarks else math.inf
    head = [("content-type", _JSON), ("cache-control", "no-cache, private")]
    try:
        writer.write(conn.send(h11.Response(status_code=200, headers=head, reason=b"OK")) or b"")
        while True:
            if getter is None:
                getter = asyncio.ensure_future(watcher.queue.get())
            wait = min(deadline, next_bookmark) - loop.time()
            done, _ = await asyncio.wait({getter}, timeout=max(wait, 0.0))
            if not done:
                if loop.time() >= deadline:
                    break
                store.bookmark(watcher)
                next_bookmark = loop.time() + bookmark_interval
                continue
            kind, obj = getter.result()
            getter = None
            if kind == "END":
                break
            line = json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
            writer.write(conn.send(h11.Data(data=line)) or b"")
            await writer.drain()
            if kind == "ERROR":
                break
        if peer_gone.is_set():
            return False
        writer.write(conn.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        return True
    finally:
        store.unwatch(watcher)
        for task in (monitor, getter):
            if task is not None:
                task.cancel()
        await asyncio.gather(monitor, *([getter] if getter else []), return_exceptions=True)


async def _watch_peer(
    reader: asyncio.StreamReader, conn: h11.Connection, watcher: Watcher, gone: asyncio.Event
) -> None:
    """While a watch streams, read the client's side: its EOF ends the watch at once.

    Bytes that arrive (a pipelined request) are handed to h11, which keeps
    them for the next request cycle.
    """
    while True:
        data = await reader.read(READ_SIZE)
        if not data:
            gone.set()
            watcher.queue.put_nowait(("END", None))
            return
        conn.receive_data(data)


def parse_target(target: str) -> tuple[list[str], dict[str, str]]:
    """Split a request target into decoded path segments and the query (first value of each name)."""
    path, _, query = target.partition("?")
    stripped = path.strip("/")
    segments = [unquote(s) for s in stripped.split("/")] if stripped else []
    params: dict[str, str] = {}
    for pair in query.split("&") if query else []:
        key, _, value = pair.partition("=")
        params.setdefault(unquote(key.replace("+", " ")), unquote(value.replace("+", " ")))
    return segments, params
