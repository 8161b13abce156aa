"""The MCP tool policy filters (:mod:`weir.xds.mcp`): the MCP parser, the tool RBAC filter and
the ``tools/list`` response filter (:mod:`weir.xds.mcp_list`),
disabled until a route to an upstream with a tool policy enables them, with their gRPC access log
and JSON-RPC errors. Only on connection managers some of whose routes need them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weir.xds import mcp
from weir.xds.filters import ChainNeeds, HttpFilterModule


def _filters(needs: ChainNeeds) -> Sequence[Any]:
    if not needs.mcp_tools:
        return ()
    return mcp.http_filters(needs.mcp_jwt, unverified_certificates=needs.unverified_certificates)


def _access_logs(needs: ChainNeeds) -> Sequence[Any]:
    return [mcp.access_log()] if needs.mcp_tools else ()


def _local_reply_mappers(needs: ChainNeeds) -> Sequence[Any]:
    return mcp.local_reply_mappers() if needs.mcp_tools else ()


#: After CORS (a preflight is answered before any of this), before the router.
FILTER = HttpFilterModule(mcp.TOOLS_FILTER, 200, _filters, _access_logs, _local_reply_mappers)
