"""Overlapping TLS hostnames on a socket are found through each hostname's wildcard suffixes (not by
testing every pair of listeners, which a socket of 1,000 HTTPS listeners made a million tests);
what is found must be exactly what testing every pair finds, in the listeners' order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from weir.api.gateway_v1 import Gateway, GatewayClass
from weir.resources import Resources
from weir.translate import Settings
from weir.translate.gateways import _label, gateway_contexts, hostnames_overlap

#: Hostnames that cover one another in every way: exact under wildcards, wildcards under wider ones.
POOL = [None, "example", "a.example", "*.example", "b.a.example", "*.a.example", "*.b.a.example", "c.other"]


def resources(hostnames: list[str | None]) -> Resources:
    listeners = [
        {"name": f"l{i}", "port": 443, "protocol": "HTTPS", "tls": {"certificateRefs": [{"name": "cert"}]}}
        | ({"hostname": h} if h is not None else {})
        for i, h in enumerate(hostnames)
    ]
    gc = GatewayClass.model_validate(
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": "weir"},
            "spec": {"controllerName": "weir.dev/gateway-controller"},
        }
    )
    gw = Gateway.model_validate(
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "weir", "listeners": listeners},
        }
    )
    return Resources.from_objects([gc, gw])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(POOL), unique=True, min_size=1))
def test_overlaps_are_those_of_every_pair(hostnames: list[str | None]) -> None:
    (ctx,) = gateway_contexts(resources(hostnames), Settings(), {"weir"})
    listeners = [lc for lc in ctx.listeners if lc.valid]
    assert len(listeners) == len(hostnames)
    for lc in listeners:
        expected = [
            _label(other, lc.gateway)
            for other in listeners
            if other is not lc and hostnames_overlap(lc.hostname, other.hostname)
        ]
        assert lc.overlapping == expected, lc.hostname
