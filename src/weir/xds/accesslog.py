"""Per-tool MCP metrics, from the access log entries Envoy streams to weir over gRPC.

Envoy sends one entry per ``tools/call`` and ``tools/list`` to an upstream with an MCP tool
policy, and one per request that policy refused (see
:func:`weir.xds.mcp.access_log`), over the AccessLogService v3 on weir's
own gRPC server (the ADS socket: :func:`add_to_server`). :class:`McpToolMetrics`
keeps counts per XBackend and tool, in memory, and :func:`collect` turns them
into Prometheus families for ``/metrics``:

- ``weir_mcp_tool_calls_total``: ``tools/call`` requests through the gateway,
  refused ones included;
- ``weir_mcp_tool_denied_total``: those the policy refused (never sent);
- ``weir_mcp_tool_errors_total``: forwarded calls that failed at the HTTP
  level: no response, a status of 400 or more (the server's, or the
  gateway's when the server could not be reached or timed out), or a
  response cut by the upstream. Envoy reads requests, not responses: a
  JSON-RPC error or a tool result with ``isError`` inside a 200 is a
  success here. A call the client abandoned (it closed the connection
  before any response) is not an error;
- ``weir_mcp_tool_call_duration_seconds``: for forwarded calls, from the
  first byte of the request to the last byte of the response (a streamed
  result included).
- ``weir_mcp_tool_lists_total`` (labels ``namespace``, ``xbackend``,
  ``outcome``): answers to ``tools/list`` the gateway read
  (:mod:`weir.xds.mcp_list`): ``filtered``, ``unchanged``, ``refused``,
  ``passed``;
- ``weir_mcp_tools_filtered_total``: tools removed from those answers, per
  tool.
- ``weir_mcp_identity_denied_total`` (labels ``namespace``, ``xbackend``,
  ``reason``): requests refused because of who sent them, under a per-caller
  policy: ``not_granted`` (a ``tools/call`` for a tool no rule grants to the
  caller's verified identity, also in ``weir_mcp_tool_denied_total``) and
  ``invalid_token`` (a bearer token that failed verification, 401: any MCP
  request; for a ``tools/call``, also counted as a denied call).

Labels: ``namespace`` and ``xbackend`` (the XBackend), ``tool``. Tool names
come from clients, so they are bounded: at most :data:`MAX_TOOLS_PER_BACKEND`
names per XBackend, the calls of any further name counted under
:data:`OTHER`; a name longer than a tool name may be under :data:`INVALID`,
a ``tools/call`` without a string name under :data:`UNNAMED`, a refused
request whose body could not be read under :data:`UNREADABLE`. These four
contain parentheses, which MCP tool names (letters, digits, ``_ - .``) do not.

The process has one :data:`MCP_TOOLS`, which :func:`add_to_server` feeds by
default and :func:`collect` reads: Envoy's access log reaches whichever weir
serves its ADS.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import grpc
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from weir.metrics import Counter, Histogram, MetricFamily
from weir.xds.mcp import (
    ACCESS_LOG_NAME,
    JWT_DENIED_DETAILS,
    MCP_METADATA,
    POLICY_NOT_GRANTED,
    RBAC_METADATA,
    UPSTREAM_TAG,
)
from weir.xds.mcp_list import LIST_METADATA

__all__ = [
    "INVALID",
    "MAX_TOOLS_PER_BACKEND",
    "MCP_TOOLS",
    "OTHER",
    "UNNAMED",
    "UNREADABLE",
    "McpToolMetrics",
    "add_to_server",
    "collect",
]

log = logging.getLogger("weir.xds.accesslog")

#: Distinct ``tool`` label values kept per XBackend; further names count as :data:`OTHER`.
MAX_TOOLS_PER_BACKEND = 200
#: Longest tool name counted under its own name (the MCP specification's limit).
MAX_TOOL_NAME = 128

OTHER = "(other)"
INVALID = "(invalid)"
UNNAMED = "(unnamed)"
UNREADABLE = "(unreadable)"
#: Label values that are not tool names: always their own series (there are four).
_SPECIAL = frozenset((OTHER, INVALID, UNNAMED, UNREADABLE))

#: Upper bounds of the duration histogram, in seconds: tool calls take from
#: milliseconds (a lookup) to minutes (a build, a crawl).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

#: Response flags (``ResponseFlags`` fields) saying the upstream side failed,
#: whatever the status code: a 200 whose stream was then cut is an error.
_UPSTREAM_FAILURES = (
    "upstream_remote_reset",
    "upstream_connection_failure",
    "upstream_connection_termination",
    "upstream_request_timeout",
    "upstream_overflow",
    "upstream_protocol_error",
    "upstream_max_stream_duration_reached",
    "upstream_retry_limit_exceeded",
    "no_healthy_upstream",
    "stream_idle_timeout",
    "duration_timeout",
    "dns_resolution_failure",
)
#: Response flags saying the client went away: a call it abandoned is not the tool's error.
_CLIENT_LEFT = ("downstream_connection_termination", "downstream_remote_reset")

_LABELS = ("namespace", "xbackend", "tool")


class McpToolMetrics:
    """Calls, refusals, errors and durations per XBackend and tool, from access log entries.

    :meth:`record` and :meth:`collect` may be called from different threads.
    """

    def __init__(self, max_tools_per_backend: int = MAX_TOOLS_PER_BACKEND) -> None:
        self.max_tools_per_backend = max_tools_per_backend
        self._lock = threading.Lock()
        self._tools: dict[tuple[str, str], set[str]] = {}
        self.calls = Counter(
            "weir_mcp_tool_calls_total",
            "MCP tools/call requests through the gateway to an XBackend with a BackendMCPPolicy, "
            "refused ones included.",
            _LABELS,
        )
        self.denied = Counter(
            "weir_mcp_tool_denied_total",
            "MCP tools/call requests (and unreadable requests) the BackendMCPPolicy refused; none "
            "reached the server.",
            _LABELS,
        )
        self.errors = Counter(
            "weir_mcp_tool_errors_total",
            "Forwarded MCP tools/call requests that failed at the HTTP level: no response, status 400 "
            "or more, or a response cut by the upstream. JSON-RPC and tool errors inside a 200 are not "
            "seen.",
            _LABELS,
        )
        self.lists = Counter(
            "weir_mcp_tool_lists_total",
            "Answers to MCP tools/list from an XBackend whose BackendMCPPolicy restricts tools, by what the "
            "gateway did: filtered (tools removed), unchanged, refused (unreadable, replaced by an error) or "
            "passed (unreadable, with an error status).",
            ("namespace", "xbackend", "outcome"),
        )
        self.filtered = Counter(
            "weir_mcp_tools_filtered_total",
            "Tools the gateway removed from tools/list answers because the BackendMCPPolicy refuses them.",
            _LABELS,
        )
        self.identity_denied = Counter(
            "weir_mcp_identity_denied_total",
            "MCP requests refused because of the caller's identity under a per-caller BackendMCPPolicy: "
            "not_granted (a tools/call for a tool not granted to the caller) or invalid_token (a bearer "
            "token that failed verification, answered 401).",
            ("namespace", "xbackend", "reason"),
        )
        self.duration = Histogram(
            "weir_mcp_tool_call_duration_seconds",
            "Forwarded MCP tools/call requests: time from the first request byte to the last response byte.",
            DURATION_BUCKETS,
            _LABELS,
        )

    def record(self, entry: Any) -> None:
        """Count one ``HTTPAccessLogEntry``; one that is neither a tool call nor a refusal is ignored."""
        common = entry.common_properties
        metadata = common.metadata.filter_metadata
        mcp = metadata[MCP_METADATA].fields if MCP_METADATA in metadata else None
        rbac = metadata[RBAC_METADATA].fields if RBAC_METADATA in metadata else None
        refused = rbac is not None and _string(rbac.get("enforced_engine_result")) == "denied"
        # The entry's own upstream_cluster is empty when no host was chosen (a refusal, no healthy host).
        backend = _xbackend(common.custom_tags.get(UPSTREAM_TAG) or common.upstream_cluster)
        method = _string(mcp.get("method")) if mcp is not None else None
        unverified = entry.response.response_code_details.startswith(JWT_DENIED_DETAILS)
        if backend is not None:
            not_granted = (
                rbac is not None
                and refused
                and _string(rbac.get("enforced_effective_policy_id")) == POLICY_NOT_GRANTED
            )
            if unverified or not_granted:
                with self._lock:
                    self.identity_denied.inc(*backend, "invalid_token" if unverified else "not_granted")
            if unverified:
                if method != "tools/call":
                    return
                refused = True
        if backend is not None and method == "tools/list" and LIST_METADATA in metadata and not refused:
            self._record_list(backend, metadata[LIST_METADATA].fields)
            return
        if backend is None or (method != "tools/call" and not refused):
            return
        with self._lock:
            tool = self._tool_label(backend, _tool_name(mcp) if method == "tools/call" else UNREADABLE)
            labels = (*backend, tool)
            self.calls.inc(*labels)
            if refused:
                self.denied.inc(*labels)
                return
            if _failed(entry):
                self.errors.inc(*labels)
            self.duration.observe(_seconds(common), *labels)

    def _record_list(self, backend: tuple[str, str], found: Any) -> None:
        """Count a ``tools/list`` answer by what :mod:`weir.xds.mcp_list` wrote about it."""
        outcome = _string(found.get("outcome"))
        if outcome is None:
            return
        removed = _string(found.get("tools")) or ""
        with self._lock:
            self.lists.inc(*backend, outcome)
            for name in removed.split(","):
                if name:
                    invalid = len(name) > MAX_TOOL_NAME
                    self.filtered.inc(*backend, self._tool_label(backend, INVALID if invalid else name))

    def collect(self) -> list[MetricFamily]:
        with self._lock:
            return [
                self.calls.collect(),
                self.denied.collect(),
                self.errors.collect(),
                self.duration.collect(),
                self.lists.collect(),
                self.filtered.collect(),
                self.identity_denied.collect(),
            ]

    def _tool_label(self, backend: tuple[str, str], tool: str) -> str:
        seen = self._tools.setdefault(backend, set())
        if tool in seen or tool in _SPECIAL:
            return tool
        if len(seen) >= self.max_tools_per_backend:
            return OTHER
        seen.add(tool)
        return tool


def _xbackend(cluster: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of an XBackend's cluster (``xbackend/NS/NAME``); ``None`` for others."""
    kind, _, rest = cluster.partition("/")
    namespace, _, name = rest.partition("/")
    if kind != "xbackend" or not namespace or not name:
        return None
    return namespace, name


def _string(value: Any) -> str | None:
    if value is None or value.WhichOneof("kind") != "string_value":
        return None
    text: str = value.string_value
    return text


def _tool_name(mcp: Any) -> str:
    params = mcp.get("params") if mcp is not None else None
    if params is None or params.WhichOneof("kind") != "struct_value":
        return UNNAMED
    name = _string(params.struct_value.fields.get("name"))
    if name is None:
        return UNNAMED
    if not name or len(name) > MAX_TOOL_NAME:
        return INVALID
    return name


def _failed(entry: Any) -> bool:
    flags = entry.common_properties.response_flags
    if any(getattr(flags, flag) for flag in _UPSTREAM_FAILURES):
        return True
    code = entry.response.response_code.value if entry.response.HasField("response_code") else 0
    if code == 0:
        return not any(getattr(flags, flag) for flag in _CLIENT_LEFT)
    return code >= 400


def _seconds(common: Any) -> float:
    span = (
        common.time_to_last_downstream_tx_byte if common.HasField("time_to_last_downstream_tx_byte") else None
    )
    if span is None:
        span = common.duration
    seconds: float = span.seconds + span.nanos / 1e9
    return seconds


# --------------------------------------------------------------------------
# The gRPC service, and the process's metrics
# --------------------------------------------------------------------------


#: The MCP tool metrics of this process, fed by every server :func:`add_to_server` registers
#: on by default, and read by :func:`collect`.
MCP_TOOLS = McpToolMetrics()


def collect() -> list[MetricFamily]:
    """The ``weir_mcp_tool_*`` families of :data:`MCP_TOOLS` (a :data:`weir.metrics.Collector`)."""
    return MCP_TOOLS.collect()


def add_to_server(server: grpc.aio.Server, sink: McpToolMetrics = MCP_TOOLS) -> None:
    """Serve Envoy's AccessLogService on ``server`` (before it starts), counting into ``sink``."""
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(_Servicer(sink), server)


class _Servicer(als_pb2_grpc.AccessLogServiceServicer):  # type: ignore[misc]
    def __init__(self, sink: McpToolMetrics) -> None:
        self._sink = sink

    async def StreamAccessLogs(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> Any:
        """Count the entries of a stream whose first message names :data:`ACCESS_LOG_NAME`.

        Envoy keeps one stream per worker thread open and sends entries in
        batches; the stream ends when Envoy stops or reconnects. An entry
        that cannot be counted is logged and skipped, never ends the stream.
        """
        ours: bool | None = None
        async for message in request_iterator:
            if ours is None:
                ours = message.identifier.log_name == ACCESS_LOG_NAME
                if not ours:
                    log.warning("ignoring access logs named %r", message.identifier.log_name)
            if not ours:
                continue
            for entry in message.http_logs.log_entry:
                try:
                    self._sink.record(entry)
                except Exception:
                    log.exception("could not count an MCP access log entry")
        return als_pb2.StreamAccessLogsResponse()
