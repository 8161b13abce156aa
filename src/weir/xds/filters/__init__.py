"""The HTTP filter registry: one module per HTTP filter of weir's connection managers.

Every HTTP connection manager weir builds (an HTTP listener's, an HTTPS
server's) runs the same chain, made here from the modules of this package:
each declares ``FILTER``, an :class:`HttpFilterModule` with its position in
the chain, the filters it puts there, and what else it adds to the connection
manager (access logs, local-reply mappers). Most filters sit on every chain,
disabled, and the routes that need one enable it by name in their
``typed_per_filter_config`` (so a route that starts using a filter changes
routes, not the listener); a filter that should only be present when routes
use it says so from :class:`ChainNeeds`.

Adding a route filter: one module here, with its ``FILTER`` and its
per-route configuration (``per_route``, which :mod:`weir.xds.routes` writes
into each route); nothing in :mod:`weir.xds.listeners` or
:mod:`weir.xds.routes`. (The MCP tool policy's per-route configuration
depends on the upstreams and stays in :mod:`weir.xds.mcp`.)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from weir import ir


@dataclass(frozen=True, slots=True)
class ChainNeeds:
    """What the routes of one connection manager need of its chain.

    ``mcp_tools``: some route reaches an upstream with an MCP tool policy
    (:func:`weir.xds.mcp.uses_tool_policies`).
    """

    mcp_tools: bool = False
    #: The JWT requirements of the per-caller MCP tool policies of those routes (each the
    #: providers of one route's policies, :class:`weir.xds.mcp.McpUse`).
    mcp_jwt: frozenset[tuple[ir.McpJwtProvider, ...]] = frozenset()
    #: An HTTPS server that lets in clients whose certificate it could not verify
    #: (``AllowInsecureFallback``): client certificates prove nothing there.
    unverified_certificates: bool = False
    #: The OAuth2 credentials of the upstreams those routes reach
    #: (:func:`weir.xds.oauth2.credentials_used`): a token filter each.
    oauth2_credentials: tuple[ir.OAuth2Credential, ...] = ()


def _none(needs: ChainNeeds) -> Sequence[Any]:
    return ()


def _no_route_config(route: ir.Route) -> Any | None:
    return None


@dataclass(frozen=True, slots=True)
class HttpFilterModule:
    """One filter module's part of the connection manager.

    ``position``: where its filters go, smaller first; the router is last.
    The positions leave room between them for filters to come.
    """

    name: str
    position: int
    http_filters: Callable[[ChainNeeds], Sequence[Any]]
    access_logs: Callable[[ChainNeeds], Sequence[Any]] = _none
    local_reply_mappers: Callable[[ChainNeeds], Sequence[Any]] = _none
    #: What a route puts under ``name`` in its ``typed_per_filter_config`` (``None``: nothing).
    per_route: Callable[[ir.Route], Any | None] = _no_route_config


def _discover() -> tuple[HttpFilterModule, ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        declared = getattr(module, "FILTER", None)
        if not isinstance(declared, HttpFilterModule):
            raise TypeError(f"{module.__name__} declares no FILTER (an HttpFilterModule)")
        found.append(declared)
    positions = [f.position for f in found]
    if len(set(positions)) != len(positions):
        raise ValueError(f"two HTTP filter modules declare one position: {sorted(positions)}")
    return tuple(sorted(found, key=lambda f: f.position))


#: Every filter module, in chain order.
REGISTRY: tuple[HttpFilterModule, ...] = _discover()


def http_filters(needs: ChainNeeds) -> list[Any]:
    """The connection manager's ``http_filters``, in order."""
    return [f for module in REGISTRY for f in module.http_filters(needs)]


def access_logs(needs: ChainNeeds) -> list[Any]:
    """The access logs the filter modules add (after weir's own)."""
    return [log for module in REGISTRY for log in module.access_logs(needs)]


def local_reply_mappers(needs: ChainNeeds) -> list[Any]:
    """The local-reply mappers the filter modules add (after weir's own)."""
    return [m for module in REGISTRY for m in module.local_reply_mappers(needs)]


def per_route_configs(route: ir.Route) -> list[tuple[str, Any]]:
    """``(filter name, packed configuration)`` for each filter ``route`` configures, in chain order."""
    found = ((module.name, module.per_route(route)) for module in REGISTRY)
    return [(name, config) for name, config in found if config is not None]
