"""Clusters: IR upstreams → Envoy ``Cluster`` resources (part of :mod:`weir.xds.build`).

:func:`upstream_cluster` gives an upstream's cluster: how its endpoints are
found (static addresses, or, for an external hostname, EDS: the addresses
weir resolved and its egress policy allows, :mod:`weir.xds.endpoints`), the
HTTP version spoken to them, the upstream HTTP filters that run once a host
is chosen and before any connection (removal of internal headers on the way
to an external hostname, the injected credential or the AWS SigV4
signature of a ``BackendCredentialPolicy``; its OAuth2 tokens are added in
the connection manager, :mod:`weir.xds.oauth2`), and
TLS origination that always verifies the chain and a subject alt name.

Upstreams reaching here passed the contract checks of
:func:`weir.xds.build.build` (TLS has a trust source and names to verify).
Pure functions; the few messages every external upstream shares are packed
once and cached.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from envoy.config.cluster.v3 import circuit_breaker_pb2, cluster_pb2
from envoy.config.common.mutation_rules.v3 import mutation_rules_pb2
from envoy.config.core.v3 import extension_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.extensions.common.aws.v3 import credential_provider_pb2
from envoy.extensions.filters.http.aws_request_signing.v3 import aws_request_signing_pb2
from envoy.extensions.filters.http.credential_injector.v3 import credential_injector_pb2
from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2
from envoy.extensions.filters.http.upstream_codec.v3 import upstream_codec_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.http.injected_credentials.generic.v3 import generic_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.matcher.v3 import string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from weir import ir
from weir.xds.common import (
    HTTP_PROTOCOL_OPTIONS,
    ads,
    duration_ms,
    pack,
    socket_address,
)
from weir.xds.secrets import sds

#: Request headers an external upstream's cluster removes, last thing before
#: the request is encoded, whoever set them (client, connection manager or
#: router): every name with one of these prefixes, and ``forwarded``
#: (RFC 7239, the standard spelling of ``x-forwarded-*``) and ``x-request-id``;
#: request trailers likewise.
EXTERNAL_HEADER_PREFIXES_TO_REMOVE = ("x-envoy-", "x-forwarded-")
EXTERNAL_HEADERS_TO_REMOVE = ("forwarded", "x-request-id")

#: Response trailers from an external upstream lose names with these prefixes.
EXTERNAL_RESPONSE_TRAILER_PREFIXES_TO_REMOVE = ("x-envoy-",)


_TLS_VERSIONS = {"1.2": common_pb2.TlsParameters.TLSv1_2, "1.3": common_pb2.TlsParameters.TLSv1_3}


_SAN_TYPES = {
    "DNS": common_pb2.SubjectAltNameMatcher.DNS,
    "URI": common_pb2.SubjectAltNameMatcher.URI,
}


# --------------------------------------------------------------------------
# Clusters and endpoints
# --------------------------------------------------------------------------


def upstream_cluster(upstream: ir.Upstream, dns: ir.DnsSettings) -> Any:
    out = cluster_pb2.Cluster(
        name=upstream.name,
        connect_timeout=duration_ms(upstream.connect_timeout_ms),
    )
    destination = upstream.destination
    if isinstance(destination, ir.StaticEndpoints):
        out.type = cluster_pb2.Cluster.STATIC
        endpoints = sorted(destination.endpoints, key=lambda e: (e.address, e.port))
        out.load_assignment.CopyFrom(
            _load_assignment(upstream.name, [(e.address, e.port) for e in endpoints])
        )
    else:
        # weir resolves the name and serves only allowed addresses (weir.xds.endpoints).
        out.type = cluster_pb2.Cluster.EDS
        out.eds_cluster_config.eds_config.CopyFrom(ads())
    if upstream.protocol not in (ir.UpstreamProtocol.TCP, ir.UpstreamProtocol.UDP):
        options = _http_protocol_options(upstream)
        options.http_filters.extend(_upstream_filters(upstream))
        out.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].CopyFrom(pack(options))
    if upstream.tls is not None:
        out.transport_socket.name = "envoy.transport_sockets.tls"
        out.transport_socket.typed_config.CopyFrom(pack(_upstream_tls(upstream.tls)))
    if upstream.retry_budget is not None:
        # The budget replaces the fixed max_retries limit of the default priority.
        budget = circuit_breaker_pb2.CircuitBreakers.Thresholds.RetryBudget(
            budget_percent=percent_pb2.Percent(value=float(upstream.retry_budget.percent)),
            min_retry_concurrency=wrappers_pb2.UInt32Value(value=upstream.retry_budget.min_concurrent),
        )
        out.circuit_breakers.thresholds.append(
            circuit_breaker_pb2.CircuitBreakers.Thresholds(retry_budget=budget)
        )
    return out


def _load_assignment(cluster: str, addresses: Iterable[tuple[str, int]]) -> Any:
    """One locality with the given endpoints; empty is valid (every request gets 503)."""
    lb_endpoints = [
        endpoint_components_pb2.LbEndpoint(
            endpoint=endpoint_components_pb2.Endpoint(address=socket_address(host, port))
        )
        for host, port in addresses
    ]
    assignment = endpoint_pb2.ClusterLoadAssignment(cluster_name=cluster)
    if lb_endpoints:
        assignment.endpoints.add(lb_endpoints=lb_endpoints)
    return assignment


def _http_protocol_options(upstream: ir.Upstream) -> Any:
    """The HTTP version spoken to the upstream.

    HTTP2 over TLS offers ALPN ``h2`` by itself; in plaintext it is prior
    knowledge (h2c). AUTO lets ALPN choose: Envoy offers ``h2,http/1.1`` on
    its own, so ``alpn_protocols`` stays empty (setting it on an HTTP/1
    cluster let servers pick h2 while Envoy spoke HTTP/1.1). AUTO needs an
    ALPN-capable transport; without TLS it falls back to HTTP/1.1, which is
    what the IR says translation does for plaintext anyway.
    """
    options = http_protocol_options_pb2.HttpProtocolOptions()
    protocol = upstream.protocol
    if protocol is ir.UpstreamProtocol.AUTO and upstream.tls is None:
        protocol = ir.UpstreamProtocol.HTTP1
    if protocol is ir.UpstreamProtocol.HTTP2:
        options.explicit_http_config.http2_protocol_options.SetInParent()
    elif protocol is ir.UpstreamProtocol.AUTO:
        options.auto_config.http_protocol_options.SetInParent()
        options.auto_config.http2_protocol_options.SetInParent()
    else:
        options.explicit_http_config.http_protocol_options.SetInParent()
    return options


# --------------------------------------------------------------------------
# Upstream filters: internal headers, credentials
# --------------------------------------------------------------------------


def _upstream_filters(upstream: ir.Upstream) -> list[Any]:
    """HTTP filters of the cluster: they run once a host is chosen for a request, before any connection.

    An external hostname gets the removal of internal headers (not a ``TCP`` one: no headers reach it);
    an HTTP upstream with a credential gets the credential injector, last;
    the codec ends a non-empty chain. Other upstreams keep Envoy's default
    chain (the codec alone).
    """
    filters = []
    # no headers ever reach a TCP (or UDP) upstream
    http = upstream.protocol not in (ir.UpstreamProtocol.TCP, ir.UpstreamProtocol.UDP)
    if http and (upstream.host_header is not None or isinstance(upstream.destination, ir.DnsName)):
        strip = _packed_strip_internal_headers()
        filters.append(hcm_pb2.HttpFilter(name="weir.strip_internal_headers", typed_config=strip))
    if http and upstream.credential is not None:
        filters.append(_credential_filter(upstream.credential))
    if http and upstream.aws_sigv4 is not None:
        filters.append(_sigv4_filter(upstream.aws_sigv4))
    if filters:
        codec = upstream_codec_pb2.UpstreamCodec()
        filters.append(hcm_pb2.HttpFilter(name="envoy.filters.http.upstream_codec", typed_config=pack(codec)))
    return filters


def _credential_filter(credential: ir.CredentialInjection) -> Any:
    """The credential injector: ``credential.header`` gets the value of the SDS generic secret.

    Last before the codec, after the removal of internal headers (a
    credential header is never removed by it, whatever its name). The value
    never appears here: the filter names the secret, which arrives over SDS
    and can change without touching the cluster. Without the secret Envoy
    refuses the request (401) rather than send it without the credential
    (``allow_request_without_credential`` stays false); translation never
    names a secret it does not provide.
    """
    generic = generic_pb2.Generic(credential=sds(credential.secret), header=credential.header)
    injector = credential_injector_pb2.CredentialInjector(
        overwrite=credential.overwrite,
        credential=extension_pb2.TypedExtensionConfig(
            name="envoy.http.injected_credentials.generic", typed_config=pack(generic)
        ),
    )
    return hcm_pb2.HttpFilter(name="envoy.filters.http.credential_injector", typed_config=pack(injector))


def _sigv4_filter(signing: ir.AwsSigV4) -> Any:
    """AWS Signature Version 4 (``envoy.filters.http.aws_request_signing``), last before the codec.

    As a cluster filter it signs the request exactly as it leaves: after the
    route's Host rewrite (the external hostname is what is signed) and after
    the removal of internal headers, so no header the upstream will not see
    is part of the signature. Envoy 1.40 runs it there (its OAuth2 client
    does not, :mod:`weir.xds.oauth2`).

    The credentials are inline: Envoy takes AWS keys inline, from files, the
    environment or AWS's own sources, not over SDS. Envoy marks the secret
    key and session token sensitive and prints ``[redacted]`` for them in
    ``/config_dump``; :func:`weir.xds.build.to_data` redacts them too. A
    rotated Secret so changes this cluster (its connections are drained).

    With a signed payload Envoy buffers the body to hash it (a body larger
    than the connection's buffer limit, 1 MiB, fails the request);
    otherwise the request says ``UNSIGNED-PAYLOAD`` and streams.
    """
    inline = credential_provider_pb2.InlineCredentialProvider(
        access_key_id=signing.access_key_id,
        secret_access_key=signing.secret_access_key,
        session_token=signing.session_token or "",
    )
    config = aws_request_signing_pb2.AwsRequestSigning(
        service_name=signing.service,
        region=signing.region,
        use_unsigned_payload=not signing.signed_payload,
        credential_provider=credential_provider_pb2.AwsCredentialProvider(inline_credential=inline),
    )
    return hcm_pb2.HttpFilter(name="envoy.filters.http.aws_request_signing", typed_config=pack(config))


# Every external upstream carries the same few filter and DNS configurations: build
# and pack each once (callers copy the Any into their own message, never change it).
@functools.lru_cache(maxsize=1)
def _packed_strip_internal_headers() -> Any:
    return pack(_strip_internal_headers())


def _strip_internal_headers() -> Any:
    """A header mutation removing :data:`EXTERNAL_HEADER_PREFIXES_TO_REMOVE` and friends.

    The one place these headers are removed for an external upstream. As a
    cluster filter it runs after the router, so it also catches headers the
    connection manager and the router add (``x-forwarded-for``,
    ``x-envoy-external-address``, ``x-envoy-expected-rq-timeout-ms``...) and
    client-sent copies, and it can match by prefix, which route-level removal
    cannot. Routes carry no removal list of their own: at 10,000 routes one
    per route made Envoy's route configurations bigger to build and apply
    for nothing this filter does not already do.

    HTTP/2 (and gRPC) requests may end with trailers, which can carry the
    same names: they lose them too. The external host's response trailers
    lose ``x-envoy-*`` (:data:`EXTERNAL_RESPONSE_TRAILER_PREFIXES_TO_REMOVE`):
    a name a proxy behind weir (an Envoy sidecar) would take as an
    instruction from inside.
    """
    request = [
        mutation_rules_pb2.HeaderMutation(
            remove_on_match=mutation_rules_pb2.HeaderMutation.RemoveOnMatch(
                key_matcher=string_pb2.StringMatcher(prefix=prefix, ignore_case=True)
            )
        )
        for prefix in EXTERNAL_HEADER_PREFIXES_TO_REMOVE
    ]
    request.extend(mutation_rules_pb2.HeaderMutation(remove=name) for name in EXTERNAL_HEADERS_TO_REMOVE)
    response_trailers = [
        mutation_rules_pb2.HeaderMutation(
            remove_on_match=mutation_rules_pb2.HeaderMutation.RemoveOnMatch(
                key_matcher=string_pb2.StringMatcher(prefix=prefix, ignore_case=True)
            )
        )
        for prefix in EXTERNAL_RESPONSE_TRAILER_PREFIXES_TO_REMOVE
    ]
    return header_mutation_pb2.HeaderMutation(
        mutations=header_mutation_pb2.Mutations(
            request_mutations=request,
            request_trailers_mutations=request,
            response_trailers_mutations=response_trailers,
        )
    )


# --------------------------------------------------------------------------
# Upstream TLS
# --------------------------------------------------------------------------


def _upstream_tls(tls: ir.UpstreamTLS) -> Any:
    """TLS origination that always verifies the chain and a SAN.

    Envoy does not compare SNI with the certificate, so the SAN matchers are
    what protects the name. A trusted CA comes over SDS, merged with the SAN
    matchers through a combined validation context. Translation names
    secrets by content, so a rotated CA or client certificate is a new secret
    and a changed cluster: Envoy replaces the cluster and drains connections
    made with the old material.
    """
    common = tls_pb2.CommonTlsContext(
        tls_params=common_pb2.TlsParameters(
            tls_minimum_protocol_version=_TLS_VERSIONS[tls.min_version],
            # Envoy's upstream default maximum is TLS 1.2.
            tls_maximum_protocol_version=_TLS_VERSIONS[tls.max_version],
        )
    )
    sans = [_san_matcher(san) for san in sorted(tls.subject_alt_names, key=_san_key)]
    if tls.trusted_ca is not None:
        combined = common.combined_validation_context
        combined.default_validation_context.match_typed_subject_alt_names.extend(sans)
        combined.validation_context_sds_secret_config.CopyFrom(sds(tls.trusted_ca))
    else:
        common.validation_context.trusted_ca.filename = tls.system_trust_file
        common.validation_context.match_typed_subject_alt_names.extend(sans)
    if tls.client_certificate is not None:
        common.tls_certificate_sds_secret_configs.append(sds(tls.client_certificate))
    return tls_pb2.UpstreamTlsContext(sni=tls.sni, common_tls_context=common)


def _san_key(san: ir.SubjectAltName) -> tuple[str, str]:
    return (san.kind, san.value)


def _san_matcher(san: ir.SubjectAltName) -> Any:
    """A certificate SAN condition.

    For DNS SANs with an ``exact`` matcher Envoy applies DNS semantics: case
    is ignored and a wildcard in the *certificate* (``*.example.com``) covers
    one label. A wildcard in the *expected* name is not understood by that
    matcher (it would only match the literal ``*.example.com``), so
    ``*.example.com`` becomes the regex ``(?i)^[^.]+\\.example\\.com$``: any
    single left-most label, including a certificate's own ``*``, per RFC 6125.
    A ``suffix`` matcher would wrongly accept deeper names (``a.b.example.com``).
    """
    matcher = string_pb2.StringMatcher()
    if san.kind == "DNS" and san.value.startswith("*."):
        pattern = "(?i)^[^.]+" + re.escape(san.value[1:]) + "$"
        # No engine named: ``google_re2`` is deprecated and RE2 is the default.
        matcher.safe_regex.regex = pattern
    else:
        matcher.exact = san.value
    return common_pb2.SubjectAltNameMatcher(san_type=_SAN_TYPES[san.kind], matcher=matcher)
