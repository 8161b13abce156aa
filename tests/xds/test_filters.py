"""The HTTP filter registry (:mod:`weir.xds.filters`): one module per filter, chain order by position."""

from __future__ import annotations

from weir.xds import filters
from weir.xds.common import CORS_FILTER
from weir.xds.mcp import TOOLS_FILTER
from weir.xds.mcp_list import LIST_FILTER


def _names(needs: filters.ChainNeeds) -> list[str]:
    return [f.name for f in filters.http_filters(needs)]


def test_every_filter_module_is_registered_in_position_order() -> None:
    modules = {m.name for m in filters.REGISTRY}
    assert {CORS_FILTER, TOOLS_FILTER, "envoy.filters.http.router"} <= modules
    positions = [m.position for m in filters.REGISTRY]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)


def test_the_chain_starts_with_cors_and_ends_with_the_router() -> None:
    for needs in (filters.ChainNeeds(), filters.ChainNeeds(mcp_tools=True)):
        names = _names(needs)
        assert names[0] == CORS_FILTER
        assert names[-1] == "envoy.filters.http.router"
        assert len(names) == len(set(names))


def test_mcp_filters_only_where_routes_need_them() -> None:
    plain = _names(filters.ChainNeeds())
    with_mcp = _names(filters.ChainNeeds(mcp_tools=True))
    # The MCP parser, the tool RBAC filter and the tools/list filter.
    assert len(with_mcp) == len(plain) + 3
    assert TOOLS_FILTER in with_mcp and TOOLS_FILTER not in plain
    assert LIST_FILTER in with_mcp and LIST_FILTER not in plain
    assert with_mcp.index(TOOLS_FILTER) < with_mcp.index("envoy.filters.http.lua.redirect_host")
    assert not filters.access_logs(filters.ChainNeeds())
    assert filters.access_logs(filters.ChainNeeds(mcp_tools=True))
    assert filters.local_reply_mappers(filters.ChainNeeds(mcp_tools=True))
