"""XBackend validation through ``weir validate``: every schema constraint and every CEL rule.

Each case is one XBackend manifest, checked by the CLI as a user runs it;
an invalid one must exit 1 and print exactly the expected problem lines, in
the API server's words. The rules' texts and messages are those of the
upstream CRD (``shared/reference/xbackend.md``), evaluated by a CEL engine.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from weir.api import cel, xbackend_v1alpha1
from weir.cli import app

runner = CliRunner()


class _Delete:
    """A patch value that removes the key (kept as itself by copies, so patches can be merged)."""

    def __deepcopy__(self, memo: object) -> _Delete:
        return self


DELETE = _Delete()

BASE: dict[str, Any] = {
    "apiVersion": "gateway.networking.x-k8s.io/v1alpha1",
    "kind": "XBackend",
    "metadata": {"name": "api", "namespace": "egress"},
    "spec": {
        "type": "ExternalHostname",
        "externalHostname": {"hostname": "api.example.com"},
        "port": {"port": 443},
    },
}
TLS_SYSTEM: dict[str, Any] = {
    "mode": "ServerOnly",
    "validation": {"hostname": "api.example.com", "wellKnownCACertificates": "System"},
}
CA_REF: dict[str, Any] = {"group": "", "kind": "ConfigMap", "name": "ca"}


def merged(base: Any, patch: Any) -> Any:
    """``patch`` applied to ``base``: dicts merge, :data:`DELETE` removes a key, anything else replaces."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for key, value in patch.items():
            if value is DELETE:
                out.pop(key, None)
            else:
                out[key] = merged(out.get(key), value)
        return out
    return copy.deepcopy(patch)


def spec(**patch: Any) -> dict[str, Any]:
    return {"spec": patch}


def tls_validation(**patch: Any) -> dict[str, Any]:
    return spec(tls=merged(TLS_SYSTEM, {"validation": patch}))


@dataclass(frozen=True)
class Case:
    id: str
    patch: dict[str, Any]
    #: ``(field path, message)`` of each expected problem; empty for a valid manifest.
    errors: tuple[tuple[str, str], ...] = ()


def invalid(id: str, patch: dict[str, Any], *errors: tuple[str, str]) -> Case:
    return Case(id, patch, errors)


def san(**fields: Any) -> dict[str, Any]:
    return tls_validation(subjectAltNames=[fields])


WELL_KNOWN = (
    r"'^(System|([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]))$'"
)
CLIENT_CERT_IFF_MUTUAL = (
    'Invalid value: "object": clientCertificateRef must be set if and only if mode is ClientAndServer'
)
LABEL_63 = "a" * 61 + "-b"
HOSTNAME_253 = ".".join(["a" * 63] * 3 + ["b" * 61])

VALID: list[Case] = [
    Case("minimal", {}),
    Case(
        "everything",
        spec(
            port={"port": 443, "name": "https"},
            protocol="HTTP",
            tls=merged(
                TLS_SYSTEM,
                {
                    "validation": {
                        "subjectAltNames": [
                            {"type": "Hostname", "hostname": "*.example.com"},
                            {"type": "URI", "uri": "spiffe://example.com/ns/egress/sa/api"},
                        ]
                    }
                },
            ),
        ),
    ),
    Case("port-min", spec(port={"port": 1})),
    Case("port-max", spec(port={"port": 65535})),
    Case("port-name-empty", spec(port={"port": 443, "name": ""})),
    Case("port-name-label", spec(port={"port": 443, "name": "https"})),
    Case("port-name-63", spec(port={"port": 443, "name": LABEL_63})),
    *(
        Case(f"protocol-{p.lower()}", spec(protocol=p))
        for p in ("TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP")
    ),
    Case("tls-none", spec(tls={"mode": "None"})),
    Case("tls-server-only-no-validation", spec(tls={"mode": "ServerOnly"})),
    Case(
        "tls-client-and-server-with-ref",
        spec(tls=merged(TLS_SYSTEM, {"mode": "ClientAndServer", "clientCertificateRef": {"name": "client"}})),
    ),
    Case("ca-refs-only", tls_validation(wellKnownCACertificates=DELETE, caCertificateRefs=[CA_REF])),
    Case("ca-refs-8", tls_validation(wellKnownCACertificates=DELETE, caCertificateRefs=[CA_REF] * 8)),
    # An empty list or string counts as unset in both trust-source rules.
    Case("ca-refs-empty-with-well-known", tls_validation(caCertificateRefs=[])),
    Case("well-known-prefixed", tls_validation(wellKnownCACertificates="example.com/corporate-cas")),
    Case("sans-5", tls_validation(subjectAltNames=[{"type": "Hostname", "hostname": "a.example.com"}] * 5)),
    Case("hostname-253", spec(externalHostname={"hostname": HOSTNAME_253})),
    # Only the suffix ".cluster.local" is refused by the rule.
    Case("hostname-cluster-local-bare", spec(externalHostname={"hostname": "cluster.local"})),
    Case("hostname-cluster-local-inside", spec(externalHostname={"hostname": "cluster.local.example.com"})),
    # The gap: the schema accepts IP literals and in-cluster names although the message promises
    # otherwise; weir refuses them at translation (Accepted=False, UnsupportedValue), not here.
    Case("gap-ipv4-literal", spec(externalHostname={"hostname": "10.0.0.1"})),
    Case("gap-metadata-address", spec(externalHostname={"hostname": "169.254.169.254"})),
    Case("gap-localhost", spec(externalHostname={"hostname": "localhost"})),
    Case("gap-service-name", spec(externalHostname={"hostname": "kubernetes.default.svc"})),
    Case("unknown-field-ignored", spec(weight=3)),
]

INVALID: list[Case] = [
    # ---- spec.type
    invalid(
        "type-enum",
        spec(type="Service"),
        ("spec.type", 'Unsupported value: "Service": supported values: "ExternalHostname"'),
    ),
    invalid("type-missing", spec(type=DELETE), ("spec.type", "Required value")),
    invalid("spec-missing", {"spec": DELETE}, ("spec", "Required value")),
    # ---- spec.port
    invalid(
        "port-zero",
        spec(port={"port": 0}),
        ("spec.port.port", "Invalid value: 0: should be greater than or equal to 1"),
    ),
    invalid(
        "port-too-big",
        spec(port={"port": 65536}),
        ("spec.port.port", "Invalid value: 65536: should be less than or equal to 65535"),
    ),
    invalid(
        "port-string",
        spec(port={"port": "443"}),
        ("spec.port.port", 'Invalid value: "string": must be of type integer'),
    ),
    invalid(
        "port-boolean",
        spec(port={"port": True}),
        ("spec.port.port", 'Invalid value: "boolean": must be of type integer'),
    ),
    invalid(
        "port-missing", spec(port={"port": DELETE, "name": "https"}), ("spec.port.port", "Required value")
    ),
    invalid(
        "port-name-too-long",
        spec(port={"port": 443, "name": LABEL_63 + "c"}),
        ("spec.port.name", "Too long: may not be longer than 63"),
    ),
    invalid(
        "port-name-uppercase",
        spec(port={"port": 443, "name": "Web-TLS"}),
        ("spec.port.name", 'Invalid value: "string": Name must be a valid DNS label'),
    ),
    invalid(
        "port-name-dots",
        spec(port={"port": 443, "name": "web.tls"}),
        ("spec.port.name", 'Invalid value: "string": Name must be a valid DNS label'),
    ),
    invalid(
        "port-name-trailing-dash",
        spec(port={"port": 443, "name": "https-"}),
        ("spec.port.name", 'Invalid value: "string": Name must be a valid DNS label'),
    ),
    # ---- spec.externalHostname
    invalid(
        "hostname-missing",
        spec(externalHostname=DELETE),
        (
            "spec",
            'Invalid value: "object": externalHostname must be set when type is ExternalHostname '
            "and must be unset otherwise",
        ),
    ),
    invalid(
        "hostname-cluster-local",
        spec(externalHostname={"hostname": "web.apps.svc.cluster.local"}),
        (
            "spec.externalHostname.hostname",
            'Invalid value: "string": hostname must not be an IP address or end with .cluster.local',
        ),
    ),
    invalid(
        "hostname-uppercase",
        spec(externalHostname={"hostname": "API.example.com"}),
        (
            "spec.externalHostname.hostname",
            'Invalid value: "API.example.com": should match '
            r"'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
        ),
    ),
    invalid(
        "hostname-wildcard",
        spec(externalHostname={"hostname": "*.example.com"}),
        (
            "spec.externalHostname.hostname",
            'Invalid value: "*.example.com": should match '
            r"'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
        ),
    ),
    invalid(
        "hostname-too-long",
        spec(externalHostname={"hostname": HOSTNAME_253 + "b"}),
        ("spec.externalHostname.hostname", "Too long: may not be longer than 253"),
    ),
    invalid(
        "hostname-empty",
        spec(externalHostname={"hostname": ""}),
        ("spec.externalHostname.hostname", 'Invalid value: "": should be at least 1 chars long'),
    ),
    # ---- spec.protocol
    invalid(
        "protocol-enum",
        spec(protocol="HTTP3"),
        (
            "spec.protocol",
            'Unsupported value: "HTTP3": supported values: "TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP"',
        ),
    ),
    # main's values are not v1.6's: an object with v1.6 keys is validated as v1.6
    invalid(
        "protocol-grpc-is-main-only",
        spec(protocol="GRPC"),
        (
            "spec.protocol",
            'Unsupported value: "GRPC": supported values: "TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP"',
        ),
    ),
    invalid(
        "type-endpoint-selector-is-main-only",
        spec(type="EndpointSelector", externalHostname=DELETE),
        ("spec.type", 'Unsupported value: "EndpointSelector": supported values: "ExternalHostname"'),
    ),
    # ---- spec.tls
    invalid(
        "tls-mode-enum",
        spec(tls={"mode": "Mutual"}),
        (
            "spec.tls.mode",
            'Unsupported value: "Mutual": supported values: "None", "ServerOnly", "ClientAndServer"',
        ),
    ),
    invalid("tls-mode-missing", spec(tls={}), ("spec.tls.mode", "Required value")),
    invalid(
        "client-cert-without-mutual-tls",
        spec(tls=merged(TLS_SYSTEM, {"clientCertificateRef": {"name": "client"}})),
        (
            "spec.tls",
            CLIENT_CERT_IFF_MUTUAL,
        ),
    ),
    invalid(
        "client-cert-with-tls-none",
        spec(tls={"mode": "None", "clientCertificateRef": {"name": "client"}}),
        (
            "spec.tls",
            CLIENT_CERT_IFF_MUTUAL,
        ),
    ),
    invalid(
        "mutual-tls-without-client-cert",
        spec(tls=merged(TLS_SYSTEM, {"mode": "ClientAndServer"})),
        (
            "spec.tls",
            CLIENT_CERT_IFF_MUTUAL,
        ),
    ),
    invalid(
        "client-cert-name-missing",
        spec(tls=merged(TLS_SYSTEM, {"mode": "ClientAndServer", "clientCertificateRef": {"kind": "Secret"}})),
        ("spec.tls.clientCertificateRef.name", "Required value"),
    ),
    # ---- spec.tls.validation
    invalid(
        "validation-hostname-missing",
        tls_validation(hostname=DELETE),
        ("spec.tls.validation.hostname", "Required value"),
    ),
    invalid(
        "both-trust-sources",
        tls_validation(caCertificateRefs=[CA_REF]),
        (
            "spec.tls.validation",
            'Invalid value: "object": must not contain both CACertificateRefs and WellKnownCACertificates',
        ),
    ),
    invalid(
        "no-trust-source",
        tls_validation(wellKnownCACertificates=DELETE),
        (
            "spec.tls.validation",
            'Invalid value: "object": must specify either CACertificateRefs or WellKnownCACertificates',
        ),
    ),
    invalid(
        "empty-trust-sources",
        tls_validation(wellKnownCACertificates="", caCertificateRefs=[]),
        ("spec.tls.validation.wellKnownCACertificates", 'Invalid value: "": should be at least 1 chars long'),
    ),
    # The pattern of Gateway API's WellKnownCACertificatesType: System, or a prefixed name.
    invalid(
        "well-known-pattern",
        tls_validation(wellKnownCACertificates="Public"),
        (
            "spec.tls.validation.wellKnownCACertificates",
            f'Invalid value: "Public": should match {WELL_KNOWN}',
        ),
    ),
    invalid(
        "well-known-unprefixed-name",
        tls_validation(wellKnownCACertificates="corporate-cas"),
        (
            "spec.tls.validation.wellKnownCACertificates",
            f'Invalid value: "corporate-cas": should match {WELL_KNOWN}',
        ),
    ),
    invalid(
        "ca-refs-9",
        tls_validation(wellKnownCACertificates=DELETE, caCertificateRefs=[CA_REF] * 9),
        ("spec.tls.validation.caCertificateRefs", "Too many: 9: must have at most 8 items"),
    ),
    invalid(
        "ca-ref-group-missing",
        tls_validation(
            wellKnownCACertificates=DELETE, caCertificateRefs=[{"kind": "ConfigMap", "name": "ca"}]
        ),
        ("spec.tls.validation.caCertificateRefs[0].group", "Required value"),
    ),
    # ---- spec.tls.validation.subjectAltNames
    invalid(
        "sans-6",
        tls_validation(subjectAltNames=[{"type": "Hostname", "hostname": "a.example.com"}] * 6),
        ("spec.tls.validation.subjectAltNames", "Too many: 6: must have at most 5 items"),
    ),
    invalid(
        "san-type-enum",
        san(type="IP", hostname="a.example.com"),
        (
            "spec.tls.validation.subjectAltNames[0].type",
            'Unsupported value: "IP": supported values: "Hostname", "URI"',
        ),
    ),
    invalid(
        "san-hostname-without-hostname",
        san(type="Hostname"),
        (
            "spec.tls.validation.subjectAltNames[0]",
            'Invalid value: "object": SubjectAltName element must contain Hostname, '
            "if Type is set to Hostname",
        ),
    ),
    invalid(
        "san-uri-with-hostname",
        san(type="URI", uri="spiffe://example.com/api", hostname="a.example.com"),
        (
            "spec.tls.validation.subjectAltNames[0]",
            'Invalid value: "object": SubjectAltName element must not contain Hostname, '
            "if Type is not set to Hostname",
        ),
    ),
    invalid(
        "san-uri-without-uri",
        san(type="URI"),
        (
            "spec.tls.validation.subjectAltNames[0]",
            'Invalid value: "object": SubjectAltName element must contain URI, if Type is set to URI',
        ),
    ),
    invalid(
        "san-hostname-with-uri",
        san(type="Hostname", hostname="a.example.com", uri="spiffe://example.com/api"),
        (
            "spec.tls.validation.subjectAltNames[0]",
            'Invalid value: "object": SubjectAltName element must not contain URI, if Type is not set to URI',
        ),
    ),
    invalid(
        "san-uri-pattern",
        san(type="URI", uri="spiffe-example"),
        (
            "spec.tls.validation.subjectAltNames[0].uri",
            'Invalid value: "spiffe-example": should match '
            r"'^(([^:/?#]+):)(//([^/?#]*))([^?#]*)(\?([^#]*))?(#(.*))?'",
        ),
    ),
    invalid(
        "san-uri-too-long",
        san(type="URI", uri="spiffe://" + "a" * 245),
        ("spec.tls.validation.subjectAltNames[0].uri", "Too long: may not be longer than 253"),
    ),
    # ---- several rules at once: every failing rule is reported, a child's failure hides no parent's
    invalid(
        "rules-at-every-level",
        spec(
            externalHostname=DELETE,
            port={"port": 443, "name": "HTTPS"},
            tls={
                "mode": "ClientAndServer",
                "validation": {"hostname": "api.example.com", "subjectAltNames": [{"type": "URI"}]},
            },
        ),
        (
            "spec",
            'Invalid value: "object": externalHostname must be set when type is ExternalHostname '
            "and must be unset otherwise",
        ),
        ("spec.port.name", 'Invalid value: "string": Name must be a valid DNS label'),
        (
            "spec.tls",
            CLIENT_CERT_IFF_MUTUAL,
        ),
        (
            "spec.tls.validation",
            'Invalid value: "object": must specify either CACertificateRefs or WellKnownCACertificates',
        ),
        (
            "spec.tls.validation.subjectAltNames[0]",
            'Invalid value: "object": SubjectAltName element must contain URI, if Type is set to URI',
        ),
    ),
    # ---- schema errors first: rules run only on an object that passed its schema
    invalid(
        "schema-error-hides-rules",
        spec(externalHostname=DELETE, port={"port": 0}),
        ("spec.port.port", "Invalid value: 0: should be greater than or equal to 1"),
    ),
]


# ------------------------------------------------------------------ upstream main's shape

#: An XBackend written for upstream main's CRD: ``spec.port.number`` is what tells it apart.
BASE_MAIN: dict[str, Any] = merged(BASE, spec(port={"number": 443, "port": DELETE}))


def selector(labels: dict[str, str]) -> dict[str, Any]:
    return spec(type="EndpointSelector", externalHostname=DELETE, endpointSelector={"matchLabels": labels})


SELECTOR: dict[str, Any] = selector({"app": "web"})
TLS_NONE: dict[str, Any] = {"mode": "None"}
H2C_FORBIDS_TLS = (
    'Invalid value: "object": tls must be unset when protocol is H2C, use protocol HTTP2 for HTTP/2 with tls'
)
HTTP2_NEEDS_TLS = (
    'Invalid value: "object": tls must be set when protocol is HTTP2, use protocol H2C for HTTP/2 without tls'
)
WSS_NEEDS_TLS = 'Invalid value: "object": tls must be set when protocol is WSS'
SELECTOR_IFF = (
    'Invalid value: "object": endpointSelector must be set when type is EndpointSelector '
    "and must be unset otherwise"
)
NOT_DECLARED = "field not declared in schema"

VALID_MAIN: list[Case] = [
    Case("main-minimal", {}),
    # Upstream main's protocol rules read self.protocol without has(): its API server refuses every
    # XBackend without a protocol (no such key). weir follows the rules' intent and accepts it.
    Case("main-no-protocol-with-tls", spec(tls=TLS_SYSTEM)),
    *(
        Case(f"main-protocol-{p.lower()}", spec(protocol=p))
        for p in ("TCP", "HTTP", "HTTP11", "MCP", "GRPC", "H2C")
    ),
    Case("main-http2-with-tls", spec(protocol="HTTP2", tls=TLS_SYSTEM)),
    Case("main-wss-with-tls", spec(protocol="WSS", tls=TLS_SYSTEM)),
    # tls.mode None counts as having tls, as on the API server (has(self.tls) is true).
    Case("main-http2-with-tls-none", spec(protocol="HTTP2", tls=TLS_NONE)),
    Case("main-wss-with-tls-none", spec(protocol="WSS", tls=TLS_NONE)),
    Case("main-tls-without-validation", spec(tls={"mode": "ServerOnly"})),
    Case("main-endpoint-selector", SELECTOR),
    Case(
        "main-endpoint-selector-64-labels",
        selector({f"k{i}": "v" for i in range(64)}),
    ),
    # Label keys are not checked by main's schema; values are (empty included).
    Case("main-label-key-unchecked", selector({"Not A/Key!": ""})),
]

INVALID_MAIN: list[Case] = [
    # Both shapes' keys at once: refused as the API server with main's CRD refuses them.
    invalid(
        "main-mixed-port-keys", spec(port={"number": 443, "port": 443}), ("spec.port.port", NOT_DECLARED)
    ),
    invalid("main-port-name", spec(port={"number": 443, "name": "https"}), ("spec.port.name", NOT_DECLARED)),
    invalid(
        "main-selector-with-v16-port",
        merged(SELECTOR, spec(port={"number": DELETE, "port": 80})),
        ("spec.port.port", NOT_DECLARED),
    ),
    invalid(
        "main-port-empty",
        merged(SELECTOR, spec(port={"number": DELETE})),
        ("spec.port", "Invalid value: 0: should have at least 1 properties"),
    ),
    invalid(
        "main-port-zero",
        spec(port={"number": 0}),
        ("spec.port.number", "Invalid value: 0: should be greater than or equal to 1"),
    ),
    invalid(
        "main-type-enum",
        spec(type="Service"),
        (
            "spec.type",
            'Unsupported value: "Service": supported values: "ExternalHostname", "EndpointSelector"',
        ),
    ),
    invalid(
        "main-protocol-enum",
        spec(protocol="HTTP3"),
        (
            "spec.protocol",
            'Unsupported value: "HTTP3": supported values: "TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP", '
            '"GRPC", "WSS"',
        ),
    ),
    invalid("main-h2c-with-tls", spec(protocol="H2C", tls=TLS_SYSTEM), ("spec", H2C_FORBIDS_TLS)),
    invalid("main-h2c-with-tls-none", spec(protocol="H2C", tls=TLS_NONE), ("spec", H2C_FORBIDS_TLS)),
    invalid("main-http2-without-tls", spec(protocol="HTTP2"), ("spec", HTTP2_NEEDS_TLS)),
    invalid("main-wss-without-tls", spec(protocol="WSS"), ("spec", WSS_NEEDS_TLS)),
    invalid(
        "main-selector-without-type",
        spec(endpointSelector={"matchLabels": {"app": "web"}}),
        ("spec", SELECTOR_IFF),
    ),
    invalid(
        "main-type-without-selector", merged(SELECTOR, spec(endpointSelector=DELETE)), ("spec", SELECTOR_IFF)
    ),
    invalid(
        "main-selector-with-hostname",
        merged(SELECTOR, spec(externalHostname={"hostname": "api.example.com"})),
        (
            "spec",
            'Invalid value: "object": externalHostname must be set when type is ExternalHostname '
            "and must be unset otherwise",
        ),
    ),
    invalid(
        "main-match-labels-empty",
        merged(SELECTOR, spec(endpointSelector={"matchLabels": DELETE})),
        ("spec.endpointSelector.matchLabels", "Required value"),
    ),
    invalid(
        "main-match-labels-65",
        selector({f"k{i}": "v" for i in range(65)}),
        ("spec.endpointSelector.matchLabels", "Too many: 65: must have at most 64 items"),
    ),
    invalid(
        "main-label-value-pattern",
        merged(SELECTOR, spec(endpointSelector={"matchLabels": {"app": "-web"}})),
        (
            "spec.endpointSelector.matchLabels.app",
            "Invalid value: \"-web\": should match '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'",
        ),
    ),
    invalid(
        "main-label-value-64",
        merged(SELECTOR, spec(endpointSelector={"matchLabels": {"app": "a" * 64}})),
        ("spec.endpointSelector.matchLabels.app", "Too long: may not be longer than 63"),
    ),
    invalid(
        "main-shares-tls-rules",
        spec(tls=merged(TLS_SYSTEM, {"validation": {"wellKnownCACertificates": "Public"}})),
        (
            "spec.tls.validation.wellKnownCACertificates",
            f'Invalid value: "Public": should match {WELL_KNOWN}',
        ),
    ),
]


def params(cases: list[Case]) -> list[Any]:
    return [pytest.param(case, id=case.id) for case in cases]


def run_validate(tmp_path: Path, manifest: dict[str, Any]) -> tuple[int, Path, list[str], str]:
    path = tmp_path / "xbackend.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    result = runner.invoke(app, ["validate", "-f", str(path)])
    # Each error names the line of its field (tests/loader/test_loader.py and test_yamlsource.py
    # check those); here the table is about what is said, so errors read ``{path}:1:`` alike.
    errors = [
        re.sub(rf"^{re.escape(str(path))}:\d+:", f"{path}:1:", line.removeprefix("error: "))
        for line in result.output.splitlines()
        if line.startswith("error: ")
    ]
    return result.exit_code, path, errors, result.output


def test_the_table_is_big_enough() -> None:
    assert len(VALID) + len(INVALID) >= 40
    cases = VALID + INVALID + VALID_MAIN + INVALID_MAIN
    assert len({c.id for c in cases}) == len(cases)


@pytest.mark.parametrize("case", params(VALID))
def test_valid(tmp_path: Path, case: Case) -> None:
    code, _, errors, output = run_validate(tmp_path, merged(BASE, case.patch))
    assert (code, errors) == (0, []), output
    assert "1 object(s) valid" in output


@pytest.mark.parametrize("case", params(INVALID))
def test_invalid(tmp_path: Path, case: Case) -> None:
    code, path, errors, output = run_validate(tmp_path, merged(BASE, case.patch))
    assert code == 1, output
    assert errors == [f"{path}:1: XBackend egress/api: {field}: {message}" for field, message in case.errors]
    assert f"{len(case.errors)} error(s) in 1 invalid object(s); 0 valid" in output


@pytest.mark.parametrize("case", params(VALID_MAIN))
def test_valid_main_shape(tmp_path: Path, case: Case) -> None:
    code, path, errors, output = run_validate(tmp_path, merged(BASE_MAIN, case.patch))
    assert (code, errors) == (0, []), output
    (backend,) = [d for d in yaml.safe_load_all(path.read_text())]
    parsed = xbackend_v1alpha1.XBackend.model_validate(backend)
    assert parsed.shape == "main"


@pytest.mark.parametrize("case", params(INVALID_MAIN))
def test_invalid_main_shape(tmp_path: Path, case: Case) -> None:
    code, path, errors, output = run_validate(tmp_path, merged(BASE_MAIN, case.patch))
    assert code == 1, output
    assert errors == [f"{path}:1: XBackend egress/api: {field}: {message}" for field, message in case.errors]


@pytest.mark.parametrize(
    ("spec_", "shape"),
    [
        ({"port": {"port": 443}}, "v1.6"),
        ({"port": {"port": 443, "name": "https"}}, "v1.6"),
        ({"port": {}}, "v1.6"),
        ({}, "v1.6"),
        ({"port": {"number": 443}}, "main"),
        ({"port": {"number": 443, "port": 443}}, "main"),  # then refused: port is not main's
        ({"endpointSelector": {"matchLabels": {"app": "web"}}, "port": {"port": 80}}, "main"),
    ],
)
def test_the_keys_decide_the_shape(spec_: dict[str, Any], shape: str) -> None:
    assert xbackend_v1alpha1.shape_of(spec_) == shape


# ------------------------------------------------------------------ the rules themselves


def spec_rule() -> cel.CelRule:
    (rule,) = xbackend_v1alpha1.XBackendSpec.cel_rules
    return rule


def test_spec_rule_both_branches() -> None:
    """The other branch (a type other than ExternalHostname) is out of reach of the enum in a manifest."""
    rule = spec_rule()
    assert rule.failure({"type": "ExternalHostname", "externalHostname": {"hostname": "a"}}) is None
    assert rule.failure({"type": "ExternalHostname"}) == rule.message
    assert rule.failure({"type": "Service"}) is None
    assert rule.failure({"type": "Service", "externalHostname": {"hostname": "a"}}) == rule.message


def test_rule_sees_the_object_as_stored() -> None:
    """Defaults applied, nulls and unset convenience defaults absent, JSON names, keywords escaped."""
    backend = xbackend_v1alpha1.XBackend.model_validate(
        merged(
            BASE,
            spec(
                port={"port": DELETE, "number": 443},
                protocol=None,
                tls=merged(
                    TLS_SYSTEM,
                    {"mode": "ClientAndServer", "clientCertificateRef": {"name": "c", "namespace": "ns"}},
                ),
            ),
        )
    )
    assert cel.cel_value(backend.spec) == {
        "type": "ExternalHostname",
        "port": {"number": 443},
        "externalHostname": {"hostname": "api.example.com"},
        "tls": {
            "mode": "ClientAndServer",
            "clientCertificateRef": {"group": "", "kind": "Secret", "name": "c", "__namespace__": "ns"},
            "validation": {"wellKnownCACertificates": "System", "hostname": "api.example.com"},
        },
    }


def test_rules_read_only_the_fields_they_name() -> None:
    assert spec_rule().fields == {"type", "externalHostname"}
    assert cel.CelRule("self.all(x, x > 0)").fields is None
    assert cel.CelRule("size(self) > 0").fields is None
    assert cel.CelRule("self.a == 'self.b' && has(self.c)").fields == {"a", "c"}


def test_evaluation_error_is_worded_as_the_api_server() -> None:
    rule = cel.CelRule("self.mode == 'x'", "mode must be x")
    assert rule.failure({}) == "no such key: mode evaluating rule: mode must be x"
    assert cel.CelRule("self.a").failure({"a": 1}) == "rule did not evaluate to a bool: self.a"
    assert cel.CelRule("self.a == 1").failure({"a": 2}) == "failed rule: self.a == 1"


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        ("https", None),
        ("a", None),
        ("0-9", None),
        (LABEL_63, None),
        (
            "Web",
            [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
                "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ],
        ),
        ("a.b", ["must not contain dots"]),
        (LABEL_63 + "c", ["must be no more than 63 characters"]),
    ],
)
def test_format_dns1123_label(value: str, errors: list[str] | None) -> None:
    """Kubernetes' ``format`` library: ``validate`` returns an optional list of errors."""
    has_errors = cel.CelRule("format.dns1123Label().validate(self).hasValue()")
    assert (has_errors.failure(value) is None) == (errors is not None)
    if errors is not None:
        listed = cel.CelRule(f"format.dns1123Label().validate(self).value() == {errors!r}")
        assert listed.failure(value) is None
    # Compared with null (XBackend's rule), validate() is null exactly when the value is valid.
    assert (cel.CelRule("format.dns1123Label().validate(self) == null").failure(value) is None) == (
        errors is None
    )


def test_format_library_other_formats_and_named() -> None:
    assert (
        cel.CelRule("!format.dns1123Subdomain().validate(self).hasValue()").failure("a.example.com") is None
    )
    assert cel.CelRule("format.dns1035Label().validate(self).hasValue()").failure("1abc") is None
    assert cel.CelRule("format.named('dns1123Label').hasValue()").failure("") is None
    assert cel.CelRule("!format.named('nope').hasValue()").failure("") is None
    assert cel.CelRule("format.named('dns1123Label').value().validate(self).hasValue()").failure("A") is None


@pytest.mark.parametrize(
    ("rule", "value"),
    [
        ("isIP(self)", "10.0.0.1"),
        ("isIP(self)", "2001:db8::1"),
        ("!isIP(self)", "10.0.0.01"),
        ("!isIP(self)", "::ffff:10.0.0.1"),
        ("!isIP(self)", "fe80::1%eth0"),
        ("!isIP(self)", "api.example.com"),
        ("self.lowerAscii() == 'abc-é'", "ABC-é"),
        ("self.upperAscii() == 'ABC'", "abc"),
        ("self.trim() == 'a b'", "  a b\t"),
        ("self.split('.') == ['a', 'b', 'c']", "a.b.c"),
        ("self.split('.', 2) == ['a', 'b.c']", "a.b.c"),
        ("self.split('.').join('/') == 'a/b'", "a.b"),
        ("self.replace('.', '-') == 'a-b-c'", "a.b.c"),
        ("self.indexOf('.') == 1 && self.lastIndexOf('.') == 3", "a.b.c"),
        ("self.substring(2) == 'b.c' && self.substring(0, 1) == 'a'", "a.b.c"),
    ],
)
def test_kubernetes_library_functions(rule: str, value: str) -> None:
    assert cel.CelRule(rule).failure(value) is None


def test_every_rule_compiles_once_when_its_model_is_defined() -> None:
    rule = spec_rule()
    program = rule._program
    for _ in range(3):
        rule.failure({"type": "ExternalHostname"})
    assert rule._program is program


def test_the_engine_coexists_with_xds_protos_cel_package() -> None:
    """``xds-protos`` also ships a ``cel`` package (``cel.expr``); both must import."""
    import importlib

    importlib.import_module("cel.expr.syntax_pb2")
    assert cel.engine.compile("1 + 1").execute({}) == 2


@pytest.mark.parametrize(("name", "warned"), [("https", True), ("", False), (None, False)])
def test_port_name_is_accepted_with_a_warning_for_v16_clusters(
    tmp_path: Path, name: str | None, warned: bool
) -> None:
    """The released rule makes an API server with the v1.6.x CRD refuse every non-empty name
    (measured: kube-apiserver v1.32 says "spec.port.name: Invalid value: "string": Name must be a
    valid DNS label" for "https"); weir accepts a valid name, as the rule means, and says so."""
    port: dict[str, Any] = {"port": 443} if name is None else {"port": 443, "name": name}
    code, path, errors, output = run_validate(tmp_path, merged(BASE, spec(port=port)))
    assert (code, errors) == (0, []), output
    warnings = [line for line in output.splitlines() if line.startswith("warning: ")]
    if warned:
        line = path.read_text().splitlines().index("    name: https") + 1  # the field's line
        assert warnings == [
            f"warning: {path}:{line}: XBackend egress/api: spec.port.name: accepted, but a cluster with the "
            "released v1.6.x XBackend CRD refuses every non-empty name (its rule is wrong upstream; "
            "upstream main removed the field): omit it for such clusters"
        ]
    else:
        assert warnings == []


LABEL_64 = "a" * 64


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("web", None),
        ("a" * 63, None),  # generateName takes 57 of them; the label holds 63
        (
            LABEL_64,
            "it is 64 characters long and the Service's label weir.dev/xbackend holds at most 63",
        ),
        (
            "api.v2",
            "a Service name (made from generateName: <name>-) must start with a letter and hold only "
            "lowercase letters, digits and '-'",
        ),
        (
            "1api",
            "a Service name (made from generateName: <name>-) must start with a letter and hold only "
            "lowercase letters, digits and '-'",
        ),
    ],
)
def test_an_endpoint_selector_name_the_headless_service_cannot_carry_is_warned(
    tmp_path: Path, name: str, why: str | None
) -> None:
    manifest = merged(merged(BASE_MAIN, SELECTOR), {"metadata": {"name": name}})
    code, path, errors, output = run_validate(tmp_path, manifest)
    assert (code, errors) == (0, []), output
    warnings = [line for line in output.splitlines() if line.startswith("warning: ")]
    if why is None:
        assert warnings == []
        return
    line = path.read_text().splitlines().index(f"  name: {name}") + 1
    assert warnings == [
        f"warning: {path}:{line}: XBackend egress/{name}: metadata.name: in a Kubernetes cluster weir serves "
        "an EndpointSelector XBackend through a headless Service it creates, and no such Service can be made "
        f"for this name ({why}), so the backend gets no endpoints there: rename the XBackend "
        "to a DNS label of at most 63 characters"
    ]


def test_an_external_hostname_xbackend_of_any_valid_name_is_not_warned(tmp_path: Path) -> None:
    code, _, errors, output = run_validate(tmp_path, merged(BASE, {"metadata": {"name": "api.v2"}}))
    assert (code, errors) == (0, []), output
    assert "warning: " not in output
