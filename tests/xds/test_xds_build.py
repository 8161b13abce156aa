"""Golden, determinism and contract tests for :mod:`weir.xds.build`.

Golden cases: ``testdata/NAME.ir.yaml`` (IR as ``weir.ir.to_data`` writes it)
→ ``testdata/NAME.envoy.yaml`` (``weir.xds.build.to_data`` of the built
resources). ``WEIR_UPDATE_GOLDEN=1 pytest tests/xds`` rewrites the goldens;
review the diff.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
from typing import Any

import pytest
import yaml
from goldens import TESTDATA, golden_names, load_ir, merge

from weir import ir
from weir.xds import build as xds_build
from weir.xds import endpoints
from weir.xds.snapshot import CLUSTER, LISTENER, PUSH_ORDER, ROUTE, SECRET

UPDATE = os.environ.get("WEIR_UPDATE_GOLDEN") == "1"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (PEM) as literal blocks, so goldens read like files."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=120)


def _comparable(data: dict[str, Any]) -> dict[str, Any]:
    """IR data without certificate chains, which ``to_data`` renders as ``<N bytes of PEM>``."""
    secrets = [{k: v for k, v in s.items() if k != "certificateChain"} for s in data["secrets"]]
    return {**data, "secrets": secrets}


@pytest.mark.parametrize("name", golden_names())
def test_golden(name: str) -> None:
    source = yaml.safe_load((TESTDATA / f"{name}.ir.yaml").read_text())
    the_ir = load_ir(name)
    # The test file is in the exact shape weir.ir.to_data produces.
    assert _comparable(ir.to_data(the_ir)) == _comparable(source)

    got = _dump(xds_build.to_data(xds_build.build(the_ir)))
    golden = TESTDATA / f"{name}.envoy.yaml"
    if UPDATE:
        golden.write_text(got)
    assert golden.exists(), f"{golden.name} missing: run with WEIR_UPDATE_GOLDEN=1"
    assert got == golden.read_text(), f"{golden.name} differs: run with WEIR_UPDATE_GOLDEN=1"


def test_every_golden_has_an_ir() -> None:
    """A golden left behind by a renamed case would never be checked again."""
    for path in TESTDATA.glob("*.envoy.yaml"):
        assert (TESTDATA / path.name.replace(".envoy.yaml", ".ir.yaml")).exists(), path.name


def test_empty_ir_has_every_type() -> None:
    resources = xds_build.build(ir.IR())
    assert set(resources) == set(PUSH_ORDER)
    assert all(not by_name for by_name in resources.values())
    assert xds_build.to_data(resources) == {type_url: {} for type_url in sorted(PUSH_ORDER)}


def test_names_are_ir_names(merged_ir: ir.IR) -> None:
    """Resources are named after their IR objects, plus the listeners answering for external
    hostnames whose addresses are all denied (weir.xds.endpoints).

    Route configurations are those of HTTP listeners and of HTTPS servers of TLS listeners.
    """
    resources = xds_build.build(merged_ir)
    denied = [endpoints.EGRESS_DENIED]
    http = [x.name for x in merged_ir.listeners if isinstance(x, ir.Listener)]
    http += [s.name for x in merged_ir.listeners if isinstance(x, ir.TlsListener) for s in x.https]
    assert list(resources[LISTENER]) == sorted([x.name for x in merged_ir.listeners] + denied)
    assert list(resources[ROUTE]) == sorted(http)
    assert list(resources[CLUSTER]) == sorted(x.name for x in merged_ir.upstreams)
    assert list(resources[SECRET]) == sorted(x.name for x in merged_ir.secrets)
    for name, message in {**resources[LISTENER], **resources[ROUTE], **resources[CLUSTER]}.items():
        assert message.name == name


def test_no_egress_detour_even_when_a_tcp_listener_is_guarded() -> None:
    """External hostnames are EDS clusters holding only allowed addresses: no path needs a detour.

    (A per-request guard once needed the TCP and mirror internal paths; weir.xds.endpoints.)
    """
    plain = ir.Upstream("xbackend/default/db", ir.DnsName("db.example.com", 5432), ir.UpstreamProtocol.TCP)
    listener = ir.TcpListener("127.0.0.1:1", "127.0.0.1", 1, (ir.WeightedBackend(plain.name, 1),))
    guarded = dataclasses.replace(plain, egress_guard=ir.EgressGuard(("10.0.0.0/8",)))
    resources = xds_build.build(ir.IR(listeners=(listener,), upstreams=(guarded,)))
    names = {name for by_name in resources.values() for name in by_name}
    assert "weir-tcp-egress" not in names and "weir-mirror-egress" not in names
    assert not resources[ROUTE]
    cluster = resources[CLUSTER][plain.name]
    assert cluster.type == cluster.EDS and not cluster.typed_extension_protocol_options
    # The listener standing for names whose addresses are all denied.
    assert endpoints.EGRESS_DENIED in resources[LISTENER]


# --------------------------------------------------------------------------
# Determinism
# --------------------------------------------------------------------------


def _serialized(resources: dict[str, dict[str, Any]]) -> dict[str, dict[str, bytes]]:
    return {
        type_url: {name: m.SerializeToString(deterministic=True) for name, m in by_name.items()}
        for type_url, by_name in resources.items()
    }


def _shuffled(value: Any, rng: random.Random) -> Any:
    """``value`` with every order that carries no meaning shuffled (routes and backends kept)."""

    def shuffle(items: tuple[Any, ...]) -> tuple[Any, ...]:
        items = tuple(_shuffled(v, rng) for v in items)
        return tuple(rng.sample(items, len(items)))

    if isinstance(value, ir.IR):
        return dataclasses.replace(
            value,
            listeners=shuffle(value.listeners),
            upstreams=shuffle(value.upstreams),
            secrets=shuffle(value.secrets),
        )
    if isinstance(value, ir.Listener):
        return dataclasses.replace(value, virtual_hosts=shuffle(value.virtual_hosts))
    if isinstance(value, ir.VirtualHost):
        routes = tuple(_shuffled(r, rng) for r in value.routes)
        return dataclasses.replace(value, domains=shuffle(value.domains), routes=routes)
    if isinstance(value, ir.Route):
        match = dataclasses.replace(value.match, headers=shuffle(value.match.headers))
        return dataclasses.replace(value, match=match)
    if isinstance(value, ir.Upstream):
        destination = value.destination
        if isinstance(destination, ir.StaticEndpoints):
            destination = ir.StaticEndpoints(shuffle(destination.endpoints))
        tls = value.tls
        if tls is not None:
            tls = dataclasses.replace(tls, subject_alt_names=shuffle(tls.subject_alt_names))
        return dataclasses.replace(value, destination=destination, tls=tls)
    return value


def test_build_is_deterministic(merged_ir: ir.IR) -> None:
    first = _serialized(xds_build.build(merged_ir))
    assert first == _serialized(xds_build.build(merged_ir))
    # A fresh, equal IR (new objects): nothing may depend on identity.
    fresh = merge([load_ir(name) for name in golden_names()])
    assert first == _serialized(xds_build.build(fresh))


@pytest.mark.parametrize("seed", range(5))
def test_build_ignores_meaningless_order(merged_ir: ir.IR, seed: int) -> None:
    shuffled = _shuffled(merged_ir, random.Random(seed))
    assert _serialized(xds_build.build(shuffled)) == _serialized(xds_build.build(merged_ir))


# --------------------------------------------------------------------------
# Behaviour worth pinning beyond the goldens
# --------------------------------------------------------------------------


def _wildcard_regex(value: str) -> str:
    upstream = ir.Upstream(
        "u",
        ir.DnsName("h", 443),
        tls=ir.UpstreamTLS(
            "h", (ir.SubjectAltName("DNS", value),), system_trust_file="/etc/ssl/certs/ca.crt"
        ),
    )
    data = xds_build.to_data(xds_build.build(ir.IR(upstreams=(upstream,))))
    tls = data[CLUSTER]["u"]["transportSocket"]["typedConfig"]["commonTlsContext"]
    (san,) = tls["validationContext"]["matchTypedSubjectAltNames"]
    assert san["sanType"] == "DNS"
    regex: str = san["matcher"]["safeRegex"]["regex"]
    return regex


@pytest.mark.parametrize(
    ("cert_san", "matches"),
    [
        ("api.example.com", True),
        ("API.Example.COM", True),
        ("*.example.com", True),  # a wildcard certificate covers the same names
        ("a-b.example.com", True),
        ("example.com", False),
        ("a.b.example.com", False),
        ("evilexample.com", False),
        ("api.example.com.evil", False),
        ("api.exampleXcom", False),
    ],
)
def test_wildcard_dns_san_matches_one_label(cert_san: str, matches: bool) -> None:
    # RE2 and Python agree on this subset (anchors, a class, escapes, (?i)).
    assert bool(re.search(_wildcard_regex("*.example.com"), cert_san)) is matches


def test_to_data_redacts_private_keys() -> None:
    secret = ir.TlsCertificate("c", "CHAIN", "-----BEGIN PRIVATE KEY-----\nSECRET\n")
    resources = xds_build.build(ir.IR(secrets=(secret,)))
    # The protobuf carries the key; only the rendering hides it.
    assert resources[SECRET]["c"].tls_certificate.private_key.inline_string == secret.private_key
    rendered = repr(xds_build.to_data(resources))
    assert "SECRET" not in rendered
    assert "CHAIN" in rendered


_WEB = ir.Upstream("service/default/web/80", ir.StaticEndpoints(()))


def _tls_upstream(**changes: Any) -> ir.Upstream:
    tls = ir.UpstreamTLS("h", (ir.SubjectAltName("DNS", "h"),), trusted_ca="ca")
    return dataclasses.replace(_WEB, tls=dataclasses.replace(tls, **changes))


def _route_to(upstream: str, **timeouts: int) -> ir.Listener:
    route = ir.Route(
        "r",
        ir.RouteMatch(ir.PathMatch("PathPrefix", "/")),
        ir.Forward((ir.WeightedBackend(upstream, 1),), **timeouts),
    )
    return ir.Listener("l", "127.0.0.1", 1, (ir.VirtualHost("v", ("*",), (route,)),))


_CA = ir.TrustedCA("ca", "PEM")
_DB = ir.Upstream("service/default/db/5432/tcp", ir.StaticEndpoints(()), ir.UpstreamProtocol.TCP)


def _tcp_to(upstream: str, weight: int = 1, idle_timeout_ms: int = 1000, name: str = "t") -> ir.TcpListener:
    return ir.TcpListener(name, "127.0.0.1", 2, (ir.WeightedBackend(upstream, weight),), idle_timeout_ms)


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (ir.IR(upstreams=(_WEB, _WEB)), "duplicate upstream"),
        (ir.IR(listeners=(_route_to("nope"),), upstreams=(_WEB,)), "unknown upstream"),
        (ir.IR(listeners=(_route_to(_WEB.name, request_timeout_ms=-1),), upstreams=(_WEB,)), "negative"),
        (ir.IR(listeners=(_route_to(_WEB.name, idle_timeout_ms=-1),), upstreams=(_WEB,)), "negative"),
        (ir.IR(upstreams=(_tls_upstream(),)), "no TrustedCA secret"),
        (ir.IR(upstreams=(_tls_upstream(trusted_ca=None),)), "exactly one of"),
        (
            ir.IR(upstreams=(_tls_upstream(system_trust_file="/etc/ca.crt"),), secrets=(_CA,)),
            "exactly one of",
        ),
        (ir.IR(upstreams=(_tls_upstream(subject_alt_names=()),), secrets=(_CA,)), "subject alt"),
        (
            ir.IR(upstreams=(_tls_upstream(client_certificate="ca"),), secrets=(_CA,)),
            "no TlsCertificate secret",
        ),
        (ir.IR(listeners=(_route_to(_DB.name),), upstreams=(_DB,)), "speaks raw TCP"),
        (ir.IR(listeners=(_tcp_to(_WEB.name),), upstreams=(_WEB,)), "speaks HTTP"),
        (ir.IR(listeners=(_tcp_to("nope"),), upstreams=(_DB,)), "unknown upstream"),
        (ir.IR(listeners=(_tcp_to(_DB.name, weight=0),), upstreams=(_DB,)), "weight"),
        (ir.IR(listeners=(_tcp_to(_DB.name, idle_timeout_ms=-1),), upstreams=(_DB,)), "negative"),
        (
            ir.IR(listeners=(_route_to(_WEB.name), _tcp_to(_DB.name, name="l")), upstreams=(_WEB, _DB)),
            "duplicate listener",
        ),
    ],
)
def test_ir_contract_violations_are_refused(broken: ir.IR, message: str) -> None:
    """Never build an insecure or dangling configuration from a buggy IR."""
    with pytest.raises(ValueError, match=message):
        xds_build.build(broken)
