"""The CORS filter: inert unless a route carries a CORS policy (:func:`weir.xds.routes` writes it
under :data:`~weir.xds.common.CORS_FILTER`). Always present, so that adding the first CORS policy
changes routes, not the listener."""

from __future__ import annotations

from typing import Any

from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from weir.xds.common import CORS_FILTER, pack
from weir.xds.filters import ChainNeeds, HttpFilterModule


def http_filter(needs: ChainNeeds) -> list[Any]:
    return [hcm_pb2.HttpFilter(name=CORS_FILTER, typed_config=pack(cors_pb2.Cors()))]


#: First: a preflight is answered before anything else runs.
FILTER = HttpFilterModule(CORS_FILTER, 100, http_filter)
