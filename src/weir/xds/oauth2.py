"""OAuth2 client-credentials tokens in Envoy (part of :mod:`weir.xds.build`).

An upstream with :attr:`weir.ir.Upstream.oauth2` gets ``Authorization:
Bearer <token>`` on every request, from Envoy's credential injector
(``envoy.filters.http.credential_injector``) with its OAuth2 client
(``envoy.http.injected_credentials.oauth2``):

* **Where.** In Envoy 1.40 that client crashes Envoy (segmentation fault at
  load) when the injector is a cluster (upstream) filter, where the static
  credential's injector sits (:mod:`weir.xds.clusters`). So it is a filter of
  the connection manager, one per credential, named :func:`filter_name`,
  disabled (:func:`http_filters`), just before the router; a route whose
  every destination and mirror carries that one credential enables it
  (:func:`per_filter_config`). Envoy reads ``typed_per_filter_config`` of a
  weighted cluster for other filters' settings but not to enable a disabled
  one, hence whole routes only: translation refuses a rule that splits or
  mirrors across different credentials
  (:func:`weir.translate.routes._mixed_oauth2`), the only case where one
  route would need two. Only connection managers with routes to such
  upstreams carry the filters (:func:`credentials_used`).
* **Token.** Each filter fetches a token as soon as it is loaded, posting
  ``grant_type=client_credentials``, ``client_id``, ``client_secret`` and
  ``scope`` (form body; or HTTP Basic) to the token URL through the token
  endpoint's own cluster (an XBackend: its TLS verification and its egress
  guard's endpoints, like every external name), caches it and fetches the
  next before it expires; a failed fetch is retried every
  :data:`RETRY_INTERVAL_S` seconds. The client secret reaches Envoy over SDS
  (a generic secret), never in the listener. The token never appears in
  configuration or logs.
* **Failing closed.** While a filter holds no token (endpoint down, refused
  by the egress guard, an answer without a usable token), Envoy answers
  requests on its routes ``401`` with details ``failed_to_inject_credential``
  and sends nothing upstream (``allow_request_without_credential`` stays
  false).
* **Counting.** Envoy counts per connection manager
  (``http.<listener>.credential_injector.oauth2.*``): tokens requested,
  fetched and each kind of failed fetch; :mod:`weir.envoy_stats` reads them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from envoy.config.core.v3 import extension_pb2, http_uri_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.http.credential_injector.v3 import credential_injector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.http.injected_credentials.oauth2.v3 import oauth2_pb2
from google.protobuf import duration_pb2, empty_pb2

from weir import ir
from weir.xds.common import pack
from weir.xds.secrets import sds

#: Prefix of the connection manager's filter of each credential (then the credential's name).
FILTER_PREFIX = "weir.oauth2/"

#: How long Envoy waits for the token endpoint's answer.
TOKEN_TIMEOUT_S = 5
#: How long Envoy waits before asking again after a failed fetch (Envoy's default is 2 s).
RETRY_INTERVAL_S = 2


def filter_name(credential: ir.OAuth2Credential) -> str:
    return FILTER_PREFIX + credential.name


def credentials_used(
    virtual_hosts: Iterable[ir.VirtualHost], upstreams: Mapping[str, ir.Upstream]
) -> tuple[ir.OAuth2Credential, ...]:
    """The distinct OAuth2 credentials of the upstreams the routes of ``virtual_hosts`` send (or
    mirror) requests to, by name. Reads only the upstreams the routes name."""
    found: dict[str, ir.OAuth2Credential] = {}
    for vhost in virtual_hosts:
        for route in vhost.routes:
            if not isinstance(route.action, ir.Forward):
                continue
            names = [b.upstream for b in route.action.backends] + [m.upstream for m in route.action.mirrors]
            for name in names:
                upstream = upstreams.get(name) if name is not None else None
                if upstream is not None and upstream.oauth2 is not None:
                    found[upstream.oauth2.name] = upstream.oauth2
    return tuple(found[name] for name in sorted(found))


def http_filters(credentials: Iterable[ir.OAuth2Credential]) -> list[Any]:
    """One disabled credential injector per credential (see the module's docstring)."""
    return [_http_filter(credential) for credential in credentials]


@functools.lru_cache(maxsize=256)
def _http_filter(credential: ir.OAuth2Credential) -> Any:
    auth = oauth2_pb2.OAuth2.BASIC_AUTH if credential.basic_auth else oauth2_pb2.OAuth2.URL_ENCODED_BODY
    client = oauth2_pb2.OAuth2(
        token_endpoint=http_uri_pb2.HttpUri(
            uri=credential.token_url,
            cluster=credential.token_upstream,
            timeout=duration_pb2.Duration(seconds=TOKEN_TIMEOUT_S),
        ),
        scopes=credential.scopes,
        client_credentials=oauth2_pb2.OAuth2.ClientCredentials(
            client_id=credential.client_id, client_secret=sds(credential.client_secret), auth_type=auth
        ),
        token_fetch_retry_interval=duration_pb2.Duration(seconds=RETRY_INTERVAL_S),
    )
    injector = credential_injector_pb2.CredentialInjector(
        overwrite=credential.overwrite,
        credential=extension_pb2.TypedExtensionConfig(
            name="envoy.http.injected_credentials.oauth2", typed_config=pack(client)
        ),
    )
    return hcm_pb2.HttpFilter(name=filter_name(credential), typed_config=pack(injector), disabled=True)


def per_filter_config(destinations: Iterable[ir.Upstream | None]) -> dict[str, Any]:
    """``typed_per_filter_config`` of a route sending (or mirroring) requests to ``destinations``.

    Enables the credential's filter when every destination that resolved
    carries the same OAuth2 credential; otherwise nothing (translation
    answers such a rule 500 before it gets here, see the module's docstring).
    """
    found = {u.oauth2 for u in destinations if u is not None}
    if len(found) != 1:
        return {}
    (credential,) = found
    if credential is None:
        return {}
    return {filter_name(credential): _packed_enabled()}


@functools.lru_cache(maxsize=1)
def _packed_enabled() -> Any:
    # Envoy refuses an empty FilterConfig, and the injector has no per-route settings: an optional
    # placeholder enables it (Envoy logs once per load that no filter reads an Empty).
    return pack(route_components_pb2.FilterConfig(config=pack(empty_pb2.Empty()), is_optional=True))
