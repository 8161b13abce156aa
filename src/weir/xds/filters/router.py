"""The router: the last HTTP filter of every chain."""

from __future__ import annotations

from typing import Any

from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from weir.xds.common import pack
from weir.xds.filters import ChainNeeds, HttpFilterModule

ROUTER_FILTER = "envoy.filters.http.router"


def http_filter(needs: ChainNeeds) -> list[Any]:
    router = router_pb2.Router(
        # No x-envoy-* headers on requests leaving, nor on responses.
        suppress_envoy_headers=True,
        # Dynamic stats stay on: /metrics reads each cluster's responses by
        # class (upstream_rq_<N>xx, weir.telemetry). The bootstrap's inclusion
        # list drops the rest (per code, internal/external, timings); so they
        # cost nothing measurable (lever "dynamic-stats", 0.99 of Envoy's CPU
        # per request: bench/results/dataplane-levers-dynamic-stats.json).
    )
    return [hcm_pb2.HttpFilter(name=ROUTER_FILTER, typed_config=pack(router))]


#: Last: Envoy requires the router to end the chain.
FILTER = HttpFilterModule(ROUTER_FILTER, 10_000, http_filter)
