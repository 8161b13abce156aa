"""XBackend validation through ``weir validate``: every schema constraint and every CEL rule.

Each case is one XBackend manifest, checked by the CLI as a user runs it;
an invalid one must exit 1 and print exactly the expected problem lines, in
the API server's words. The rules' texts and messages are those of the
upstream CRD (``shared/reference/xbackend.md``), evaluated by a CEL engine.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from weir.api import cel, xbackend_v1alpha1
from weir.cli import app

runner = CliRunner()

DELETE = object()

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
    Case("port-number-spelling", spec(port={"number": 8443})),
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
    Case(
        "well-known-empty-with-ca-refs",
        tls_validation(wellKnownCACertificates="", caCertificateRefs=[CA_REF]),
    ),
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
        (
            "spec.tls.validation",
            'Invalid value: "object": must specify either CACertificateRefs or WellKnownCACertificates',
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


def params(cases: list[Case]) -> list[Any]:
    return [pytest.param(case, id=case.id) for case in cases]


def run_validate(tmp_path: Path, manifest: dict[str, Any]) -> tuple[int, Path, list[str], str]:
    path = tmp_path / "xbackend.yaml"
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    result = runner.invoke(app, ["validate", "-f", str(path)])
    errors = [
        line.removeprefix("error: ") for line in result.output.splitlines() if line.startswith("error: ")
    ]
    return result.exit_code, path, errors, result.output


def test_the_table_is_big_enough() -> None:
    assert len(VALID) + len(INVALID) >= 40
    assert len({c.id for c in VALID + INVALID}) == len(VALID) + len(INVALID)


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
                port={"number": 443},
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
        "port": {"port": 443},
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
