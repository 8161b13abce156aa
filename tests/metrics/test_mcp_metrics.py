"""Per-tool MCP metrics (:mod:`weir.xds.accesslog`): what an access log entry counts as, and the gRPC service.

Entries are built as Envoy sends them (``HTTPAccessLogEntry`` with the MCP
and RBAC filters' dynamic metadata and the ``upstream_cluster`` tag); the
service test streams them over real gRPC on a unix socket. The e2e test
``tests/e2e/test_mcp_policy.py`` shows real Envoy producing them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from weir import metrics
from weir.xds import accesslog, mcp, mcp_list

CALLS = "weir_mcp_tool_calls_total"
DENIED = "weir_mcp_tool_denied_total"
ERRORS = "weir_mcp_tool_errors_total"
COUNT = "weir_mcp_tool_call_duration_seconds_count"
SUM = "weir_mcp_tool_call_duration_seconds_sum"


def entry(
    tool: Any = "add",
    *,
    method: str | None = "tools/call",
    cluster: str = "xbackend/team/tools",
    code: int | None = 200,
    refused: bool = False,
    seconds: float = 0.25,
    flags: tuple[str, ...] = (),
    tagged: bool = True,
) -> Any:
    """An entry as Envoy's gRPC access log sends it (``...`` as ``tool``: no name)."""
    out = accesslog_pb2.HTTPAccessLogEntry()
    common = out.common_properties
    if method is not None:
        fields: dict[str, Any] = {"method": method, "id": 1, "is_mcp_request": True}
        if tool is not ...:
            fields["params"] = {"name": tool}
        common.metadata.filter_metadata[mcp.MCP_METADATA].update(fields)
    common.metadata.filter_metadata[mcp.RBAC_METADATA].update(
        {"enforced_engine_result": "denied" if refused else "allowed"}
    )
    if tagged:
        common.custom_tags[mcp.UPSTREAM_TAG] = cluster
    if not refused:  # Envoy names the cluster itself only once a host was chosen
        common.upstream_cluster = cluster
    common.time_to_last_downstream_tx_byte.FromNanoseconds(int(seconds * 1e9))
    for flag in flags:
        setattr(common.response_flags, flag, True)
    if code is not None:
        out.response.response_code.value = code
    return out


def values(sink: accesslog.McpToolMetrics) -> dict[tuple[str, str, str], float]:
    """(sample name, xbackend, tool) → value, through the text format (parsed strictly)."""
    out = {}
    for family in metrics.parse(metrics.render(sink.collect())):
        for sample in family.samples:
            if "le" not in sample.labels and "tool" in sample.labels:  # not the lists by outcome
                assert sample.labels["namespace"] == "team"
                key = (family.name + sample.name_suffix, sample.labels["xbackend"], sample.labels["tool"])
                out[key] = sample.value
    return out


def test_calls_refusals_errors_and_durations() -> None:
    sink = accesslog.McpToolMetrics()
    sink.record(entry("add", seconds=0.25))
    sink.record(entry("add", seconds=1.5))
    sink.record(entry("rm", refused=True))
    sink.record(entry("add", code=503, flags=("upstream_connection_failure",)))
    sink.record(entry("add", code=200, flags=("upstream_remote_reset",)))  # a result stream cut midway
    sink.record(entry("add", code=404))  # the server lost the session
    sink.record(entry("add", code=None, flags=("downstream_connection_termination",)))  # the client left
    sink.record(entry("add", code=None))  # no response at all
    assert values(sink) == {
        (CALLS, "tools", "add"): 7,
        (ERRORS, "tools", "add"): 4,
        (COUNT, "tools", "add"): 7,
        (SUM, "tools", "add"): 0.25 + 1.5 + 5 * 0.25,
        (CALLS, "tools", "rm"): 1,
        (DENIED, "tools", "rm"): 1,
    }
    buckets = {
        s.labels["le"]: s.value
        for f in sink.collect()
        for s in f.samples
        if s.name_suffix == "_bucket" and s.labels["tool"] == "add"
    }
    assert buckets["0.25"] == 6 and buckets["1.0"] == 6 and buckets["2.5"] == 7 and buckets["+Inf"] == 7


def test_what_is_not_a_tool_call() -> None:
    sink = accesslog.McpToolMetrics()
    sink.record(entry(method="tools/list"))
    sink.record(entry(method="initialize"))
    sink.record(entry(cluster="service/team/web/80"))  # not an XBackend
    sink.record(entry(cluster="", tagged=False))
    assert values(sink) == {}


def test_backend_of_a_request_that_never_left() -> None:
    """A refusal (or a 503 without a healthy host) has no upstream cluster; the tag names it."""
    sink = accesslog.McpToolMetrics()
    sink.record(entry("rm", refused=True, cluster="xbackend/team/ops"))
    sink.record(entry("add", code=503, flags=("no_healthy_upstream",), cluster="xbackend/team/void"))
    assert values(sink) == {
        (CALLS, "ops", "rm"): 1,
        (DENIED, "ops", "rm"): 1,
        (CALLS, "void", "add"): 1,
        (ERRORS, "void", "add"): 1,
        (COUNT, "void", "add"): 1,
        (SUM, "void", "add"): 0.25,
    }


def test_tool_labels_are_bounded() -> None:
    sink = accesslog.McpToolMetrics(max_tools_per_backend=3)
    for tool in ("a", "b", "c", "d", "e", "a"):
        sink.record(entry(tool))
    sink.record(entry("x" * 129))  # longer than any tool name
    sink.record(entry(7))  # not a string
    sink.record(entry(...))  # no name
    sink.record(entry(method=None, refused=True))  # a body the gateway could not read
    sink.record(entry("z", cluster="xbackend/team/other"))  # the limit is per XBackend
    calls = {
        tool: v for (name, backend, tool), v in values(sink).items() if name == CALLS and backend == "tools"
    }
    assert calls == {
        "a": 2,
        "b": 1,
        "c": 1,
        accesslog.OTHER: 2,
        # Not tool names: always their own series.
        accesslog.INVALID: 1,
        accesslog.UNNAMED: 2,
        accesslog.UNREADABLE: 1,
    }
    assert values(sink)[(CALLS, "other", "z")] == 1

    sink = accesslog.McpToolMetrics()
    for case in (entry("x" * 129), entry(7), entry(...), entry(method=None, refused=True)):
        sink.record(case)
    calls = {tool: v for (name, _, tool), v in values(sink).items() if name == CALLS}
    assert calls == {accesslog.INVALID: 1, accesslog.UNNAMED: 2, accesslog.UNREADABLE: 1}
    assert values(sink)[(DENIED, "tools", accesslog.UNREADABLE)] == 1


def test_empty_metrics_render() -> None:
    families = metrics.parse(metrics.render(accesslog.McpToolMetrics().collect()))
    assert [(f.name, f.type, f.samples) for f in families] == [
        (CALLS, "counter", ()),
        (DENIED, "counter", ()),
        (ERRORS, "counter", ()),
        ("weir_mcp_tool_call_duration_seconds", "histogram", ()),
        ("weir_mcp_tool_lists_total", "counter", ()),
        ("weir_mcp_tools_filtered_total", "counter", ()),
        ("weir_mcp_identity_denied_total", "counter", ()),
    ]
    assert {f.name for f in accesslog.collect()} == {f.name for f in families}


def _listed(outcome: str | None, removed: str = "") -> Any:
    """A ``tools/list`` entry with what the list filter (weir.xds.mcp_list) wrote, ``None``: nothing."""
    out = entry(..., method="tools/list")
    if outcome is not None:
        found: dict[str, Any] = {"outcome": outcome}
        if removed:
            found["tools"] = removed
        out.common_properties.metadata.filter_metadata[mcp_list.LIST_METADATA].update(found)
    return out


def test_tools_list_outcomes_and_tools_filtered() -> None:
    sink = accesslog.McpToolMetrics(max_tools_per_backend=2)
    sink.record(_listed("filtered", "get_secret,delete_repo"))
    sink.record(_listed("filtered", "get_secret,rm," + "x" * 129))  # rm: a third name, counted as (other)
    sink.record(_listed("unchanged"))
    sink.record(_listed("refused"))
    sink.record(_listed(None))  # the filter did not run (no restricting policy): not counted
    lists = {
        s.labels["outcome"]: s.value
        for f in metrics.parse(metrics.render(sink.collect()))
        if f.name == "weir_mcp_tool_lists_total"
        for s in f.samples
    }
    assert lists == {"filtered": 2, "unchanged": 1, "refused": 1}
    assert {k: v for k, v in values(sink).items() if k[0] == "weir_mcp_tools_filtered_total"} == {
        ("weir_mcp_tools_filtered_total", "tools", "get_secret"): 2,
        ("weir_mcp_tools_filtered_total", "tools", "delete_repo"): 1,
        ("weir_mcp_tools_filtered_total", "tools", accesslog.OTHER): 1,
        ("weir_mcp_tools_filtered_total", "tools", accesslog.INVALID): 1,
    }
    assert not any(k[0] == CALLS for k in values(sink))  # a list is not a call


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[tuple[accesslog.McpToolMetrics, Any]]:
    """A real gRPC server on a unix socket serving the access log service, and a client stub."""
    sink = accesslog.McpToolMetrics()
    server = grpc.aio.server()
    accesslog.add_to_server(server, sink)
    address = f"unix:{tmp_path / 'als.sock'}"
    assert server.add_insecure_port(address)
    await server.start()
    channel = grpc.aio.insecure_channel(address)
    try:
        yield sink, als_pb2_grpc.AccessLogServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(None)


def _message(log_name: str | None, *entries: Any) -> Any:
    message = als_pb2.StreamAccessLogsMessage()
    if log_name is not None:
        message.identifier.log_name = log_name
    message.http_logs.log_entry.extend(entries)
    return message


@pytest.mark.asyncio
async def test_service_counts_streams_named_for_it(service: tuple[accesslog.McpToolMetrics, Any]) -> None:
    sink, stub = service

    async def stream(*messages: Any) -> None:
        async def requests() -> AsyncIterator[Any]:
            for message in messages:
                yield message
                await asyncio.sleep(0)

        await stub.StreamAccessLogs(requests())

    # Envoy names the log in the first message of a stream only.
    await stream(
        _message(mcp.ACCESS_LOG_NAME, entry("add")), _message(None, entry("add"), entry("rm", refused=True))
    )
    await stream(_message("someone-else", entry("add")))
    broken = entry("add")
    broken.common_properties.metadata.filter_metadata[mcp.MCP_METADATA].update({"params": "not an object"})
    await stream(_message(mcp.ACCESS_LOG_NAME, broken, entry("add")))
    assert values(sink) == {
        (CALLS, "tools", "add"): 3,
        (COUNT, "tools", "add"): 3,
        (SUM, "tools", "add"): 0.75,
        (CALLS, "tools", accesslog.UNNAMED): 1,
        (COUNT, "tools", accesslog.UNNAMED): 1,
        (SUM, "tools", accesslog.UNNAMED): 0.25,
        (CALLS, "tools", "rm"): 1,
        (DENIED, "tools", "rm"): 1,
    }
