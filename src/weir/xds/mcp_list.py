"""``tools/list`` answers filtered by the MCP tool policy of their route, in Envoy's Lua filter.

Part of :mod:`weir.xds.mcp`, which places this filter in the connection
manager (after the tool RBAC filter, disabled) and enables it on the routes
and weighted clusters whose tool policies restrict something, next to that
RBAC filter. A tool a ``tools/call`` could not name is then also absent from
the lists the client receives, so agents do not plan around tools they cannot
call.

**How.** The script (``mcp_tools_list.lua``, beside this module) acts only on
requests in which Envoy's MCP filter found ``tools/list``:

* on the request, it removes ``Accept-Encoding``, so the server answers in a
  form the gateway can read;
* on the response, it buffers the body (as Envoy buffers a request body: up
  to the connection's buffer limit, 1 MiB; a larger answer gets Envoy's own
  error) and removes from ``result.tools`` every tool the policies refuse,
  by the rules of ``tools/call``: a ``deniedTools`` pattern of any policy
  matches it, or an ``allowedTools`` list does not. A JSON answer is one
  message; an SSE answer (``text/event-stream``, the streamable HTTP
  transport) has each event's ``data`` read as one message, events without
  data passing as they are (the answer reaches the client when the server
  ends the stream, which the transport has it do after the response).
  Everything else in the answer (other members,
  the order of the tools kept, their bytes) is passed unchanged; a message
  without ``result`` (a JSON-RPC error, a notification) passes.

**Per caller.** For a per-caller policy the script decides, for the caller
that asked, what the RBAC principals of :mod:`weir.xds.mcp` decide for a
call: it reads the client certificate's URI and DNS SANs (unless the HTTPS
server marked its certificates unverified) and the token payloads the JWT
filter left in the metadata, and adds the tools of the grants whose caller
matches to the policy's ``allowed``. A caller whose identity cannot be read
is treated as unidentified (fewer tools, never more).

**Fail closed.** A ``2xx`` answer the script cannot read is replaced, so no
tool reaches the client unfiltered: HTTP 502 with a JSON-RPC error carrying
the request's ``id``, code ``-32603`` (Internal error), a message naming
what could not be read and the backend. Unreadable means: compressed
(``Content-Encoding`` other than ``identity``), a type other than
``application/json`` or ``text/event-stream``, not one JSON object per
message (a batch, invalid JSON, text after it, deeper than 128 levels), a
``result`` that is not an object or has no ``tools`` array, a tool that is
not an object with a string ``name``. An answer with an error status that
cannot be read passes as it is: a client takes no tools from it.

**Matching.** Tool names are matched after JSON escapes are decoded, as the
MCP filter decodes the name of a ``tools/call``; of duplicate ``name`` keys
the last counts. Each pattern goes to the script as Lua patterns that must
all match: the exact pattern, or, where the RBAC rules of :mod:`weir.xds.mcp`
cannot express it exactly (:func:`weir.xds.mcp.regex_fits`), the same
widening (``deniedTools``) or nothing (``allowedTools``), so that a list
never shows a tool a call could not use.

**Counting.** The script writes its outcome into the request's dynamic
metadata (namespace :data:`LIST_METADATA`: ``outcome`` = ``filtered``,
``unchanged``, ``refused`` or ``passed``; ``listed``, ``removed``, ``reason``);
the MCP access log (:func:`weir.xds.mcp.access_log`) carries ``tools/list``
entries to :mod:`weir.xds.accesslog`, which counts them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from importlib import resources
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from google.protobuf import struct_pb2, wrappers_pb2

from weir import ir
from weir.xds.common import pack

#: The Lua filter's name in the connection manager.
LIST_FILTER = "weir.mcp_tools_list"
#: The dynamic metadata namespace the script writes its findings into.
LIST_METADATA = "weir.mcp_tools_list"
#: The name of the script among the filter's source codes.
_SCRIPT = "tools_list"

#: What the script's ``outcome`` says.
FILTERED = "filtered"
UNCHANGED = "unchanged"
REFUSED = "refused"
PASSED = "passed"

#: Characters with a meaning in Lua patterns (tool patterns use ``.`` and ``-`` of them).
_LUA_MAGIC = frozenset("^$()%.[]*+-?")


def script() -> str:
    """The Lua source (read from the package)."""
    return _script()


@functools.lru_cache(maxsize=1)
def _script() -> str:
    return resources.files("weir.xds").joinpath("mcp_tools_list.lua").read_text(encoding="utf-8")


def http_filter() -> Any:
    """The Lua filter, disabled until a route enables it (:func:`per_route_config`)."""
    return _packed_filter()


@functools.lru_cache(maxsize=1)
def _packed_filter() -> Any:
    config = lua_pb2.Lua(
        source_codes={_SCRIPT: _data_source(script())},
        # The script changes no header a route matches on: keep the route chosen.
        clear_route_cache=wrappers_pb2.BoolValue(value=False),
    )
    return hcm_pb2.HttpFilter(name=LIST_FILTER, typed_config=pack(config), disabled=True)


def _data_source(text: str) -> Any:
    return base_pb2.DataSource(inline_string=text)


@functools.lru_cache(maxsize=256)
def per_route_config(policies: tuple[ir.McpToolPolicy, ...], backend: str) -> Any:
    """``typed_per_filter_config`` enabling the filter for requests to ``backend`` (a cluster name).

    The lists are filtered by every one of ``policies`` (the destination's
    and its mirrors', as :func:`weir.xds.mcp.per_filter_config` gathers them).
    """
    context = struct_pb2.Struct()
    context.update({"backend": backend, "rules": "\n".join(_policy_rules(p) for p in policies)})
    override = lua_pb2.LuaPerRoute(name=_SCRIPT, filter_context=context)
    return pack(route_components_pb2.FilterConfig(config=pack(override)))


def _policy_rules(policy: ir.McpToolPolicy) -> str:
    """One policy as a line the script reads (``read_rules``): ``A|N|P;ALLOWED;DENIED;GRANTS``.

    Strings, not lists: Envoy 1.40 hands the script a context's lists as
    tables whose items Lua cannot read back. Patterns are joined by ``,``
    and the Lua patterns of one by a space; neither occurs in them (tool
    patterns are letters, digits and ``._*-``). ``P``: a per-caller policy,
    whose ``GRANTS`` (joined by ``|``) are read by ``read_grant``.
    """
    denied = _joined(policy.denied, widen=True)
    # An allow-list whose every pattern is too large to match exactly allows nothing: still "A".
    allowed = _joined(policy.allowed, widen=False)
    mode = "P" if policy.per_caller else "A" if policy.allowed else "N"
    grants = "|".join(f"{_caller(g.caller)}>{_joined(g.allowed, widen=False)}" for g in policy.grants)
    return ";".join((mode, allowed, denied, grants))


def _joined(patterns: Sequence[str], *, widen: bool) -> str:
    found = [p for p in (lua_patterns(x, widen=widen) for x in patterns) if p is not None]
    return ",".join(" ".join(p) for p in found)


def _caller(caller: ir.McpCaller) -> str:
    """``C`` and the SANs, or ``J`` provider ``/`` subjects ``/`` claims (see the script's ``read_grant``)."""
    if caller.jwt is None:
        return "C" + ",".join(_escape(san) for san in caller.subject_alt_names)
    claims = "&".join(
        f"{_escape(name)}=" + ",".join(_escape(v) for v in values) for name, values in caller.claims
    )
    subjects = ",".join(_escape(s) for s in caller.subjects)
    return f"J{_escape(caller.jwt)}/{subjects}/{claims}"


def _escape(text: str) -> str:
    """``text`` with every byte outside ``A-Z a-z 0-9 _ . -`` as ``%XX`` (the script's ``unescape``)."""
    return "".join(
        chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_.-") else f"%{b:02X}"
        for b in text.encode("utf-8")
    )


def lua_patterns(pattern: str, *, widen: bool) -> list[str] | None:
    """Lua patterns that must all match a tool name for ``pattern`` to match it.

    The same names as :func:`weir.xds.mcp.tool_pattern` matches: exactly,
    unless its RE2 expression is too large for Envoy; then ``widen`` gives
    the same wider match, else ``None`` (it matches nothing).
    """
    from weir.xds.mcp import regex_fits

    parts = pattern.split("*")
    head, *inner, tail = parts if len(parts) > 1 else (parts[0], parts[0])
    inner = [part for part in inner if part]
    # The forms :func:`weir.xds.mcp.tool_pattern` matches with plain string matchers.
    simple = (
        len(parts) == 1 or (not inner and not (head and tail)) or (len(inner) == 1 and not head and not tail)
    )
    if simple or regex_fits(pattern):
        return ["^" + ".*".join(_lua_literal(part) for part in parts) + "$"]
    if not widen:
        return None
    out = [_lua_literal(part) for part in inner]
    if head:
        out.append("^" + _lua_literal(head))
    if tail:
        out.append(_lua_literal(tail) + "$")
    return out


def _lua_literal(text: str) -> str:
    return "".join(f"%{c}" if c in _LUA_MAGIC else c for c in text)


def restricts(policies: Sequence[ir.McpToolPolicy]) -> bool:
    """Whether some policy allows less than every tool (an empty policy only counts calls); a
    per-caller policy always does (callers get the tools granted to them)."""
    return any(p.allowed or p.denied or p.per_caller for p in policies)


__all__ = [
    "FILTERED",
    "LIST_FILTER",
    "LIST_METADATA",
    "PASSED",
    "REFUSED",
    "UNCHANGED",
    "http_filter",
    "lua_patterns",
    "per_route_config",
    "restricts",
    "script",
]
