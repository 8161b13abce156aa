"""The OAuth2 token filters (:mod:`weir.xds.oauth2`): one disabled credential injector per OAuth2
credential the connection manager's routes reach, enabled by those routes. Last before the router,
so the token is added after every other filter has seen the request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weir.xds import oauth2
from weir.xds.filters import ChainNeeds, HttpFilterModule


def _filters(needs: ChainNeeds) -> Sequence[Any]:
    return oauth2.http_filters(needs.oauth2_credentials)


FILTER = HttpFilterModule(oauth2.FILTER_PREFIX, 9_000, _filters)
