"""Identity-based refusals in the MCP metrics (:mod:`weir.xds.accesslog`), from access log entries
shaped as Envoy sends them: the RBAC refusal of a tool not granted to the caller, and the JWT
filter's refusal of a token (any MCP request; a ``tools/call`` is also a denied call)."""

from __future__ import annotations

from typing import Any

from envoy.data.accesslog.v3 import accesslog_pb2

from weir import metrics
from weir.xds import accesslog, mcp


def entry(*, method: str | None, policy: str | None = None, details: str = "") -> Any:
    out = accesslog_pb2.HTTPAccessLogEntry()
    common = out.common_properties
    if method is not None:
        common.metadata.filter_metadata[mcp.MCP_METADATA].update(
            {"method": method, "id": 1, "params": {"name": "deploy"}}
        )
    if policy is not None:
        common.metadata.filter_metadata[mcp.RBAC_METADATA].update(
            {"enforced_engine_result": "denied", "enforced_effective_policy_id": policy}
        )
    common.custom_tags[mcp.UPSTREAM_TAG] = "xbackend/team/tools"
    out.response.response_code.value = 401 if details else 200
    out.response.response_code_details = details
    return out


def samples(sink: accesslog.McpToolMetrics) -> dict[tuple[str, tuple[str, ...]], float]:
    out = {}
    for family in metrics.parse(metrics.render(sink.collect())):
        for sample in family.samples:
            out[(family.name + sample.name_suffix, tuple(sample.labels.values()))] = sample.value
    return out


def test_identity_refusals_are_counted_by_reason() -> None:
    sink = accesslog.McpToolMetrics()
    sink.record(entry(method="tools/call", policy=mcp.POLICY_NOT_GRANTED))
    sink.record(entry(method="tools/call", policy=mcp.POLICY_NOT_ALLOWED))  # nobody's: not identity
    sink.record(entry(method="tools/call", details="jwt_authn_access_denied{Jwt_is_expired}"))
    sink.record(entry(method="initialize", details="jwt_authn_access_denied{Jwt_verification_fails}"))
    sink.record(entry(method=None, details="jwt_authn_access_denied{Jwt_issuer_is_not_configured}"))
    found = samples(sink)
    identity = "weir_mcp_identity_denied_total"
    assert found[(identity, ("team", "tools", "not_granted"))] == 1
    assert found[(identity, ("team", "tools", "invalid_token"))] == 3
    # The refused tools/calls (granted to no one, not to this caller, bad token) are denied calls;
    # the refused initialize and the GET are not calls.
    assert found[("weir_mcp_tool_denied_total", ("team", "tools", "deploy"))] == 3
    assert found[("weir_mcp_tool_calls_total", ("team", "tools", "deploy"))] == 3
    assert ("weir_mcp_tool_errors_total", ("team", "tools", "deploy")) not in found
