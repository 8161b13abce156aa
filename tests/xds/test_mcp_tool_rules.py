"""The RBAC rules :mod:`weir.xds.mcp` gives Envoy for MCP tool policies, evaluated as Envoy does.

:func:`decide` evaluates the generated ``RBAC`` (DENY) message against a
request's dynamic metadata as Envoy's RBAC filter does (the parts weir uses:
``and``/``or``/``not`` sets, ``any``, header and dynamic metadata matchers,
string matchers with RE2 full-match expressions; policies tried by name in
order, the first match names the refusal). The end-to-end tests
(``tests/e2e/test_mcp_policy.py``) show the same rules in real Envoy; these
check the pattern translation exhaustively against the policy's definition
(``*`` is any run of characters; denied wins; empty ``allowed`` allows all).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import re2
from hypothesis import given, settings
from hypothesis import strategies as st

from weir import ir
from weir.xds import mcp, mcp_list

# ---------------------------------------------------------------------------- an RBAC evaluator


def _lookup(metadata: dict[str, Any], matcher: Any) -> tuple[bool, Any]:
    value: Any = metadata.get(matcher.filter)
    for segment in matcher.path:
        if not isinstance(value, dict) or segment.key not in value:
            return False, None
        value = value[segment.key]
    return True, value


def _string_matches(matcher: Any, value: Any) -> bool:
    if not isinstance(value, str):
        return False
    kind = matcher.WhichOneof("match_pattern")
    if kind == "exact":
        return bool(value == matcher.exact)
    if kind == "prefix":
        return value.startswith(matcher.prefix)
    if kind == "suffix":
        return value.endswith(matcher.suffix)
    if kind == "contains":
        return matcher.contains in value
    assert kind == "safe_regex", kind
    return re2.fullmatch(matcher.safe_regex.regex, value) is not None


def _metadata_matches(matcher: Any, metadata: dict[str, Any]) -> bool:
    found, value = _lookup(metadata, matcher)
    kind = matcher.value.WhichOneof("match_pattern")
    if kind == "present_match":
        result = found
    elif kind == "bool_match":
        result = found and value is matcher.value.bool_match
    else:
        assert kind == "string_match", kind
        result = found and _string_matches(matcher.value.string_match, value)
    return result != matcher.invert


def _matches(permission: Any, metadata: dict[str, Any], method: str) -> bool:
    kind = permission.WhichOneof("rule")
    if kind == "and_rules":
        return all(_matches(p, metadata, method) for p in permission.and_rules.rules)
    if kind == "or_rules":
        return any(_matches(p, metadata, method) for p in permission.or_rules.rules)
    if kind == "not_rule":
        return not _matches(permission.not_rule, metadata, method)
    if kind == "any":
        return bool(permission.any)
    if kind == "header":
        assert permission.header.name == ":method"
        return _string_matches(permission.header.string_match, method)
    assert kind == "sourced_metadata", kind
    return _metadata_matches(permission.sourced_metadata.metadata_matcher, metadata)


def decide(rules: Any, metadata: dict[str, Any], method: str = "POST") -> str | None:
    """The name of the policy refusing the request, or ``None`` when it passes."""
    for name in sorted(rules.policies):
        policy = rules.policies[name]
        assert [p.any for p in policy.principals] == [True]
        if any(_matches(p, metadata, method) for p in policy.permissions):
            return name
    return None


def call(tool: Any, **more: Any) -> dict[str, Any]:
    """The MCP filter's metadata for a ``tools/call`` naming ``tool`` (``...``: no name)."""
    params = {} if tool is ... else {"name": tool}
    return {mcp.MCP_METADATA: {"method": "tools/call", "id": 1, "params": params, **more}}


# ---------------------------------------------------------------------------- the reference


def allowed(policy: ir.McpToolPolicy, tool: str) -> bool:
    """The definition in :class:`weir.ir.McpToolPolicy`."""

    def hit(pattern: str) -> bool:
        return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), tool, re.DOTALL) is not None

    return (not policy.allowed or any(map(hit, policy.allowed))) and not any(map(hit, policy.denied))


# ---------------------------------------------------------------------------- tests


POLICY = ir.McpToolPolicy(
    allowed=("add", "get_*", "*_search", "*issue*", "repo_*_read"), denied=("get_secret",)
)


@pytest.mark.parametrize(
    ("tool", "refusal"),
    [
        ("add", None),
        ("get_weather", None),
        ("get_", None),
        ("code_search", None),
        ("_search", None),
        ("list_issues", None),
        ("issue", None),
        ("repo_x_read", None),
        ("repo__read", None),
        ("get_secret", mcp.POLICY_DENIED),
        ("addition", mcp.POLICY_NOT_ALLOWED),
        ("Add", mcp.POLICY_NOT_ALLOWED),
        ("repo_read", mcp.POLICY_NOT_ALLOWED),
        ("", mcp.POLICY_NOT_ALLOWED),
        ("get\nsecret", mcp.POLICY_NOT_ALLOWED),  # "_" is not a wildcard
    ],
)
def test_tool_names(tool: str, refusal: str | None) -> None:
    assert decide(mcp.tool_rules([POLICY]), call(tool)) == refusal
    assert (refusal is None) == allowed(POLICY, tool)


def test_what_the_rules_refuse_besides_names() -> None:
    rules = mcp.tool_rules([POLICY])
    # A tools/call without a string name: refused as such, before the allow-list speaks.
    for params in (..., 7, None, {"x": 1}):
        assert decide(rules, call(params)) == mcp.POLICY_UNNAMED, params
    # Larger than the filter reads: refused whatever the name it saw.
    assert decide(rules, call("add", is_exceeding_limit=True)) == mcp.POLICY_TOO_LARGE
    assert decide(rules, call("get_secret", is_exceeding_limit=True)) == mcp.POLICY_TOO_LARGE
    # No JSON-RPC method found in a POST (batch, not JSON, not an MCP POST): refused.
    assert decide(rules, {}) == mcp.POLICY_UNREADABLE
    not_jsonrpc = {mcp.MCP_METADATA: {"is_mcp_request": False, "passthrough_reason": "mcp_not_jsonrpc"}}
    assert decide(rules, not_jsonrpc) == mcp.POLICY_UNREADABLE
    assert decide(rules, {}, method="PUT") == mcp.POLICY_UNREADABLE
    # Requests that carry no JSON-RPC message, and every other method, pass.
    for method in ("GET", "HEAD", "DELETE", "OPTIONS"):
        assert decide(rules, {}, method=method) is None
    for other in ("tools/list", "initialize", "notifications/initialized", "__jsonrpc_response"):
        assert decide(rules, {mcp.MCP_METADATA: {"method": other, "params": {"name": "rm"}}}) is None


def test_policies_combine_by_refusing_what_any_refuses() -> None:
    """A mirror's policy counts too: a tool is refused when either policy refuses it."""
    first = ir.McpToolPolicy(allowed=("a*",))
    second = ir.McpToolPolicy(allowed=("*z",), denied=("abz",))
    rules = mcp.tool_rules([first, second])
    for tool, refused in (("az", False), ("a", True), ("z", True), ("abz", True), ("aaz", False)):
        assert (decide(rules, call(tool)) is not None) is refused, tool


def test_only_denied_tools() -> None:
    rules = mcp.tool_rules([ir.McpToolPolicy(denied=("admin_*", "*", "x"))])
    assert decide(rules, call("anything")) == mcp.POLICY_DENIED
    rules = mcp.tool_rules([ir.McpToolPolicy(denied=("admin_*",))])
    assert decide(rules, call("admin_reset")) == mcp.POLICY_DENIED
    assert decide(rules, call("get")) is None
    assert mcp.POLICY_NOT_ALLOWED not in rules.policies


def test_star_matches_newlines_and_everything() -> None:
    """``*`` matches any characters, newlines included: denying ``*`` leaves nothing out."""
    rules = mcp.tool_rules([ir.McpToolPolicy(denied=("*",))])
    for tool in ("a", "line\nbreak", "", "ü"):
        assert decide(rules, call(tool)) == mcp.POLICY_DENIED, tool
    rules = mcp.tool_rules([ir.McpToolPolicy(denied=("a*b*c",))])
    assert decide(rules, call("a\nb\nc")) == mcp.POLICY_DENIED


_NAMES = st.text(alphabet="ab_.-", max_size=8)
_PATTERNS = st.text(alphabet="ab_.*", min_size=1, max_size=7)


@settings(max_examples=400, deadline=None)
@given(
    allowed_=st.lists(_PATTERNS, max_size=3, unique=True),
    denied=st.lists(_PATTERNS, max_size=3, unique=True),
    tool=_NAMES,
)
def test_patterns_match_their_definition(allowed_: list[str], denied: list[str], tool: str) -> None:
    policy = ir.McpToolPolicy(allowed=tuple(sorted(allowed_)), denied=tuple(sorted(denied)))
    refusal = decide(mcp.tool_rules([policy]), call(tool))
    assert (refusal is None) == allowed(policy, tool), (policy, tool, refusal)


@pytest.mark.parametrize(
    ("pattern", "tool", "as_denied", "as_allowed"),
    [
        # The exact expression fits Envoy's limit: matched exactly.
        ("a*b*c", "abc", True, True),
        ("a*b*c", "ac", False, False),
        # Too long for RE2's program limit: denied patterns widen (prefix, inner parts,
        # suffix, overlaps allowed), allowed ones match nothing. Never less refused.
        ("p" * 70 + "*m*" + "s" * 30, "p" * 70 + "m" + "s" * 30, True, False),
        ("p" * 70 + "*m*" + "s" * 30, "p" * 70 + "x" + "s" * 30, False, False),
        ("ab" * 40 + "*b*" + "ba" * 20, "ab" * 40 + "a" + "ba" * 20, True, False),  # overlapping "b": wider
    ],
)
def test_patterns_too_long_for_envoy(pattern: str, tool: str, as_denied: bool, as_allowed: bool) -> None:
    denying = mcp.tool_rules([ir.McpToolPolicy(denied=(pattern,))])
    allowing = mcp.tool_rules([ir.McpToolPolicy(allowed=(pattern,))])
    assert (decide(denying, call(tool)) is not None) is as_denied
    assert (decide(allowing, call(tool)) is None) is as_allowed
    for rules in (denying, allowing):
        for policy in rules.policies.values():
            for regex in re.findall(r"regex: \"(.*?)\"\n", str(policy)):
                assert re2.compile(regex.encode().decode("unicode_escape")).programsize <= 100


def test_per_filter_config() -> None:
    def upstream(name: str, tools: ir.McpToolPolicy | None) -> ir.Upstream:
        return ir.Upstream(name, ir.StaticEndpoints(()), mcp_tools=tools)

    plain = upstream("service/default/plain/80", None)
    counted = upstream("xbackend/default/counted", ir.McpToolPolicy())
    guarded = upstream("xbackend/default/guarded", ir.McpToolPolicy(denied=("rm",)))
    assert mcp.per_filter_config(plain) == {}
    assert mcp.per_filter_config(None) == {}
    assert set(mcp.per_filter_config(counted)) == {mcp.MCP_FILTER}  # parsing only: metrics
    # A guarded upstream also has its tools/list responses filtered (weir.xds.mcp_list).
    guarded_filters = {mcp.MCP_FILTER, mcp.TOOLS_FILTER, mcp_list.LIST_FILTER}
    assert set(mcp.per_filter_config(guarded)) == guarded_filters
    assert set(mcp.per_filter_config(plain, [guarded])) == guarded_filters
    assert set(mcp.per_filter_config(None, [None])) == set()
