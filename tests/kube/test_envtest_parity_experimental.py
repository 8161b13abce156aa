"""Validation parity for the experimental channel's HTTPRoute fields that weir reads.

weir reads two fields only upstream's experimental channel declares: a rule's
``retry`` and its ``sessionPersistence`` (a standard-channel API server drops
both, so there only the files loader ever judges them). An API server of this
module's own runs the v1.6.1 experimental-channel HTTPRoute CRD
(``testdata/gateway-api-v1.6.1/httproutes-experimental.yaml``); the cases are
:data:`ROUTE`'s variants under that schema which touch those two fields (made
by :func:`parity.generated`), and hand-made cases for their CEL rules and for
the experimental channel's rules weir does not follow.

weir serves the standard channel: where the two channels' rules differ on a
field both declare (parentRefs told apart by ``port``, repeated rule names,
header values off a pattern), weir keeps the standard channel's verdict. Each
such case is in :data:`STANDARD_CHANNEL` with the verdicts it must keep.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from envtest import Api
from kube_world import start_cluster
from parity import generated, record, server_refuses, spec_schema, weir_refuses

UPSTREAM = Path(__file__).parent / "testdata" / "gateway-api-v1.6.1"
CRD: dict[str, Any] = yaml.safe_load((UPSTREAM / "httproutes-experimental.yaml").read_text())
#: The fields of a rule only the experimental channel declares and weir reads.
EXPERIMENTAL_FIELDS = ("retry", "sessionPersistence")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Api]:
    folder = Path(tempfile.mkdtemp(prefix="weir-kube-parity-experimental-", dir="/tmp"))
    cluster = start_cluster(folder, crds=[CRD])
    try:
        yield cluster.admin
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)


ROUTE: dict[str, Any] = yaml.safe_load(
    """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: default}
spec:
  parentRefs: [{name: gw, namespace: infra, sectionName: http}]
  hostnames: [web.example.com]
  rules:
  - name: main
    matches: [{path: {type: PathPrefix, value: /api}}]
    backendRefs: [{name: web, port: 8080}]
    timeouts: {request: 10s, backendRequest: 5s}
    retry: {codes: [500, 503], attempts: 3, backoff: 100ms}
    sessionPersistence:
      sessionName: session
      absoluteTimeout: 1h
      type: Cookie
      cookieConfig: {lifetimeType: Permanent}
  - name: header-session
    backendRefs: [{name: web, port: 8080}]
    sessionPersistence: {sessionName: x-session, type: Header}
"""
)


def _rule(**fields: Any) -> dict[str, Any]:
    route = copy.deepcopy(ROUTE)
    route["spec"]["rules"] = [{"backendRefs": [{"name": "web", "port": 8080}], **fields}]
    return route


def _route(**spec: Any) -> dict[str, Any]:
    return {**ROUTE, "spec": {**ROUTE["spec"], **spec}}


def _header(value: str, where: str = "set") -> dict[str, Any]:
    modifier = {where: [{"name": "x-a", "value": value}]}
    return _rule(filters=[{"type": "RequestHeaderModifier", "requestHeaderModifier": modifier}])


HAND_MADE: dict[str, dict[str, Any]] = {
    "retry-empty": _rule(retry={}),
    "retry-attempts-zero": _rule(retry={"attempts": 0}),
    "retry-attempts-negative": _rule(retry={"attempts": -1}),
    "retry-attempts-large": _rule(retry={"attempts": 1000}),
    "retry-codes-repeat": _rule(retry={"codes": [500, 500]}),
    "retry-codes-none": _rule(retry={"codes": []}),
    "retry-codes-many": _rule(retry={"codes": list(range(500, 600))}),
    "retry-code-399": _rule(retry={"codes": [399]}),
    "retry-code-600": _rule(retry={"codes": [600]}),
    "retry-code-string": _rule(retry={"codes": ["500"]}),
    "retry-backoff-zero": _rule(retry={"backoff": "0s"}),
    "retry-backoff-bad": _rule(retry={"backoff": "1d"}),
    "retry-attempts-string": _rule(retry={"attempts": "3"}),
    "session-empty": _rule(sessionPersistence={}),
    "session-permanent-without-timeout": _rule(
        sessionPersistence={"cookieConfig": {"lifetimeType": "Permanent"}}
    ),
    "session-permanent-with-timeout": _rule(
        sessionPersistence={"cookieConfig": {"lifetimeType": "Permanent"}, "absoluteTimeout": "1s"}
    ),
    "session-cookie-config-empty": _rule(sessionPersistence={"cookieConfig": {}}),
    "session-cookie-config-on-header": _rule(sessionPersistence={"type": "Header", "cookieConfig": {}}),
    "session-header-without-name": _rule(sessionPersistence={"type": "Header"}),
    "session-name-empty": _rule(sessionPersistence={"sessionName": ""}),
    "session-name-128": _rule(sessionPersistence={"sessionName": "a" * 128}),
    "session-name-129": _rule(sessionPersistence={"sessionName": "a" * 129}),
    "session-name-space": _rule(sessionPersistence={"sessionName": "a b"}),
    "session-timeout-zero": _rule(sessionPersistence={"absoluteTimeout": "0s"}),
    "session-timeout-bad": _rule(sessionPersistence={"absoluteTimeout": "1d"}),
    "session-type-lowercase": _rule(sessionPersistence={"type": "cookie"}),
    "session-idle-timeout-bad": _rule(sessionPersistence={"idleTimeout": "1d"}),
    "session-on-two-rules": _route(
        rules=[
            {"name": "a", "sessionPersistence": {"sessionName": "s"}},
            {"name": "b", "sessionPersistence": {"sessionName": "s"}},
        ]
    ),
    "header-value-tab-inside": _header("a\tb"),
    "header-value-valid-as-is": _header("a b,c"),
    "valid-as-is": ROUTE,
}


#: Cases where the experimental channel's CRD has a rule the standard channel's lacks, on a field
#: both declare; weir keeps the standard channel's verdict (weir's default install, and the one
#: ``test_envtest_upstream_parity`` holds it to): case → (the server's verdict, weir's, why).
STANDARD_CHANNEL: dict[str, tuple[list[str], list[str], str]] = {
    "parents-by-port-only": (
        [],
        [
            'spec.parentRefs: Invalid value: "array": sectionName must be unique when parentRefs '
            "includes 2 or more references to the same parent"
        ],
        "the experimental channel tells two references to one parent apart by port too",
    ),
    "rule-names-repeat": (
        ['spec.rules: Invalid value: "array": Rule name must be unique within the route'],
        [],
        "only the experimental channel requires unique rule names",
    ),
}

_PATTERN = "^[!-~]+([\\t ]?[!-~]+)*$"
for _name, _value in {
    "crlf": "a\r\nb",
    "lf": "a\nb",
    "cr": "a\rb",
    "leading-space": " a",
    "two-spaces": "a  b",
    "latin1": "a\u00e9",
}.items():
    HAND_MADE[f"header-value-{_name}"] = _header(_value)
    HAND_MADE[f"header-match-value-{_name}"] = _rule(
        matches=[{"headers": [{"name": "x-a", "value": _value}]}]
    )
    for _where, _path in (
        ("value", "filters[0].requestHeaderModifier.set[0].value"),
        ("match-value", "matches[0].headers[0].value"),
    ):
        _at = f"spec.rules[0].{_path}"
        STANDARD_CHANNEL[f"header-{_where}-{_name}"] = (
            [
                f"{_at}: Invalid value: {json.dumps(_value, ensure_ascii=False)}: "
                f"{_at} in body should match '{_PATTERN}'"
            ],
            [],
            "only the experimental channel limits header values to printable US-ASCII (weir refuses "
            "CR and LF when it translates the route, see tests/e2e/test_header_values.py)",
        )
HAND_MADE["header-value-crlf-add"] = _header("a\r\nb", "add")
STANDARD_CHANNEL["header-value-crlf-add"] = (
    [
        'spec.rules[0].filters[0].requestHeaderModifier.add[0].value: Invalid value: "a\\r\\nb": '
        f"spec.rules[0].filters[0].requestHeaderModifier.add[0].value in body should match '{_PATTERN}'"
    ],
    [],
    STANDARD_CHANNEL["header-value-crlf"][2],
)
HAND_MADE["parents-by-port-only"] = _route(
    parentRefs=[{"name": "gw", "port": 80}, {"name": "gw", "port": 81}]
)
HAND_MADE["rule-names-repeat"] = _route(rules=[{"name": "a"}, {"name": "a"}])


def cases() -> list[Any]:
    made = [
        (case, obj)
        for case, obj in generated(ROUTE, spec_schema(CRD))
        if any(f".{field}" in case for field in EXPERIMENTAL_FIELDS)
    ]
    made += [(f"HTTPRoute:experimental:{name}", obj) for name, obj in HAND_MADE.items()]
    return [pytest.param(obj, id=case) for case, obj in made]


@pytest.mark.parametrize("obj", cases())
def test_httproute_experimental_parity(
    upstream: Api, obj: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    case = request.node.callspec.id
    server = server_refuses(upstream, obj)
    weir = weir_refuses(obj)
    record(case, server, weir)
    name = case.rsplit(":", 1)[1]
    if name in STANDARD_CHANNEL:
        assert (server, weir) == STANDARD_CHANNEL[name][:2]
        return
    assert bool(server) == bool(weir), f"\nAPI server: {server or 'accepts'}\nweir: {weir or 'accepts'}"
