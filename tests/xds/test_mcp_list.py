"""The tools/list script (weir.xds.mcp_list) run under LuaJIT, against Python's reading of the same text.

Envoy embeds LuaJIT; ``lupa`` runs the same script with the same engine, so
its JSON reading and its tool matching can be checked against Python's
``json`` and against the RBAC rules' matching (a pattern with ``*`` for any
run of characters) on many generated inputs. The end-to-end tests
(tests/e2e/test_mcp_policy.py) show it in Envoy.
"""

from __future__ import annotations

import json
import re
from typing import Any

import lupa.luajit21 as luajit
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir import ir
from weir.xds import mcp_list

TOOL_CHARS = "abcxyz_.-"


@pytest.fixture(scope="module")
def lua() -> Any:
    runtime = luajit.LuaRuntime(unpack_returned_tuples=True)
    runtime.execute(mcp_list.script().replace("local function filter_body", "function filter_body"))
    return runtime.globals().filter_body


def _rules(*policies: ir.McpToolPolicy) -> str:
    return "\n".join(mcp_list._policy_rules(p) for p in policies)


def _allowed_by(policy: ir.McpToolPolicy, name: str) -> bool:
    def matches(pattern: str) -> bool:
        return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), name, re.S) is not None

    if any(matches(p) for p in policy.denied):
        return False
    return not policy.allowed or any(matches(p) for p in policy.allowed)


def _listing(names: list[Any], id_: Any = 1) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "result": {"tools": [{"name": n} for n in names]}})


patterns = st.text(TOOL_CHARS + "*", min_size=1, max_size=6)
policies = st.builds(
    ir.McpToolPolicy,
    allowed=st.lists(patterns, max_size=3).map(tuple),
    denied=st.lists(patterns, max_size=3).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(policy=policies, names=st.lists(st.text(TOOL_CHARS, min_size=1, max_size=8), max_size=6))
def test_kept_tools_are_those_the_policy_allows(lua: Any, policy: ir.McpToolPolicy, names: list[str]) -> None:
    text, removed, listed = lua(200, "application/json", "identity", _listing(names), _rules(policy))
    assert text is not None, removed
    kept = [tool["name"] for tool in json.loads(text)["result"]["tools"]]
    assert kept == [n for n in names if _allowed_by(policy, n)]
    assert listed == len(names) and len(list(removed.values())) == len(names) - len(kept)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(schema=json_values, name=st.text(max_size=6), indent=st.sampled_from([None, 1]))
def test_any_json_around_the_tools_is_read_and_kept(
    lua: Any, schema: Any, name: str, indent: int | None
) -> None:
    """Escapes and nesting of every kind, pretty-printed or not: names decoded as Python decodes them."""
    policy = ir.McpToolPolicy(denied=("x*",))
    tools = [{"name": name, "inputSchema": schema}, {"name": "x" + name, "annotations": schema}]
    message = {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools, "meta": schema}}
    text, removed, _ = lua(
        200, "application/json", "identity", json.dumps(message, indent=indent), _rules(policy)
    )
    assert text is not None, removed
    expected = {
        **message,
        "result": {**message["result"], "tools": [t for t in tools if not t["name"].startswith("x")]},
    }
    assert json.loads(text) == expected


@pytest.mark.parametrize(
    "body",
    [
        "",
        "[]",
        '[{"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}]',  # a batch
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": []}',  # cut
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": []}} {}',
        '{"jsonrpc": "2.0", "id": 1, "result": {}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": {}}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": ["add"]}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": 7}]}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"title": "add"}]}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a\\q"}]}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a\x01"}]}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "add"}], "x": tru}}',
        '{"jsonrpc": "2.0", "id": 1, "result": {"tools": []}, "result": 3}',
        '{"a":' * 200 + "1" + "}" * 200,
    ],
)
def test_unreadable_answers_are_refused(lua: Any, body: str) -> None:
    text, reason = lua(200, "application/json", "identity", body, _rules(ir.McpToolPolicy(denied=("x",))))
    assert text is None and isinstance(reason, str)


def test_every_result_is_filtered_and_messages_without_one_pass(lua: Any) -> None:
    rules = _rules(ir.McpToolPolicy(denied=("rm",)))
    twice = '{"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "rm"}], '
    twice += '"tools": [{"name": "rm"}, {"name": "ls"}]}}'
    text, _, listed = lua(200, "application/json", "identity", twice, rules)
    assert (
        json.loads(text) == {"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "ls"}]}} and listed == 3
    )
    error = '{"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "m"}}'
    assert lua(200, "application/json", "identity", error, rules)[0] == error


def test_several_policies_each_refuse(lua: Any) -> None:
    rules = _rules(ir.McpToolPolicy(allowed=("a*",)), ir.McpToolPolicy(denied=("ab",)))
    text, _, _ = lua(200, "application/json", "identity", _listing(["a", "ab", "b", "ac"]), rules)
    assert [t["name"] for t in json.loads(text)["result"]["tools"]] == ["a", "ac"]


def test_long_patterns_match_as_the_rbac_rules_do() -> None:
    """A pattern too large for an RE2 program: denied more widely, allowed nowhere (as weir.xds.mcp)."""
    long = "a*" + "b*" * 30 + "c"
    assert mcp_list.lua_patterns(long, widen=False) is None
    assert mcp_list.lua_patterns(long, widen=True) == ["b"] * 30 + ["^a", "c$"]
    assert mcp_list.lua_patterns("get_*", widen=False) == ["^get_.*$"]
    assert mcp_list.lua_patterns("a.b-c", widen=True) == ["^a%.b%-c$"]
    assert mcp_list._policy_rules(ir.McpToolPolicy(allowed=(long,))) == "A;;;"
