"""``weir crds``: the XBackend and GatewayClassConfig CRDs generated from the models, structural.

XBackend carries every upstream CEL rule; GatewayClassConfig states as patterns what its Python
validators check.
"""

from __future__ import annotations

import ipaddress
import random
import re
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from weir.api import cel, crds, weir_policies_v1alpha1, weir_v1alpha1, xbackend_v1alpha1
from weir.cli import app

runner = CliRunner()

#: The rules of the upstream XBackend CRD (shared/reference/xbackend.md, Gateway API v1.6
#: experimental), written out here independently of the models: (schema path, rule, message).
#: ``[]`` in a path is the items of a list.
UPSTREAM_RULES: list[tuple[str, str, str]] = [
    (
        "spec",
        "self.type == 'ExternalHostname' ? has(self.externalHostname) : !has(self.externalHostname)",
        "externalHostname must be set when type is ExternalHostname and must be unset otherwise",
    ),
    (
        "spec.externalHostname.hostname",
        "!self.endsWith('.cluster.local')",
        "hostname must not be an IP address or end with .cluster.local",
    ),
    (
        "spec.port.name",
        "size(self) == 0 || format.dns1123Label().validate(self) == null",
        "Name must be a valid DNS label",
    ),
    (
        "spec.tls",
        "self.mode == 'ClientAndServer' ? has(self.clientCertificateRef) : !has(self.clientCertificateRef)",
        "clientCertificateRef must be set if and only if mode is ClientAndServer",
    ),
    (
        "spec.tls.validation",
        "!(has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 && "
        'has(self.wellKnownCACertificates) && self.wellKnownCACertificates != "")',
        "must not contain both CACertificateRefs and WellKnownCACertificates",
    ),
    (
        "spec.tls.validation",
        "(has(self.caCertificateRefs) && size(self.caCertificateRefs) > 0 || "
        'has(self.wellKnownCACertificates) && self.wellKnownCACertificates != "")',
        "must specify either CACertificateRefs or WellKnownCACertificates",
    ),
    (
        "spec.tls.validation.subjectAltNames[]",
        '!(self.type == "Hostname" && (!has(self.hostname) || self.hostname == ""))',
        "SubjectAltName element must contain Hostname, if Type is set to Hostname",
    ),
    (
        "spec.tls.validation.subjectAltNames[]",
        '!(self.type != "Hostname" && has(self.hostname) && self.hostname != "")',
        "SubjectAltName element must not contain Hostname, if Type is not set to Hostname",
    ),
    (
        "spec.tls.validation.subjectAltNames[]",
        '!(self.type == "URI" && (!has(self.uri) || self.uri == ""))',
        "SubjectAltName element must contain URI, if Type is set to URI",
    ),
    (
        "spec.tls.validation.subjectAltNames[]",
        '!(self.type != "URI" && has(self.uri) && self.uri != "")',
        "SubjectAltName element must not contain URI, if Type is not set to URI",
    ),
]


#: Upstream main's rules (apisx/v1alpha1/xbackend_types.go), written out here independently of the
#: models. Its three protocol rules read ``self.protocol`` without ``has()``, which refuses every
#: XBackend without a protocol; weir's guard them (see XBackendSpecMain), with upstream's messages.
UPSTREAM_RULES_MAIN: list[tuple[str, str, str]] = [
    *(r for r in UPSTREAM_RULES if r[0] != "spec.port.name"),
    (
        "spec",
        "self.type == 'EndpointSelector' ? has(self.endpointSelector) : !has(self.endpointSelector)",
        "endpointSelector must be set when type is EndpointSelector and must be unset otherwise",
    ),
    (
        "spec",
        "!has(self.protocol) || self.protocol != 'H2C' || !has(self.tls)",
        "tls must be unset when protocol is H2C, use protocol HTTP2 for HTTP/2 with tls",
    ),
    (
        "spec",
        "!has(self.protocol) || self.protocol != 'HTTP2' || has(self.tls)",
        "tls must be set when protocol is HTTP2, use protocol H2C for HTTP/2 without tls",
    ),
    (
        "spec",
        "!has(self.protocol) || self.protocol != 'WSS' || has(self.tls)",
        "tls must be set when protocol is WSS",
    ),
]


def main_schema() -> dict[str, Any]:
    result = runner.invoke(app, ["crds", "--xbackend", "main"])
    assert result.exit_code == 0, result.output
    (crd,) = [
        d for d in yaml.safe_load_all(result.stdout) if d and d["metadata"]["name"].startswith("xbackends.")
    ]
    (version,) = crd["spec"]["versions"]
    root: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return root


def test_main_shape_crd_has_mains_fields_and_none_of_v16s() -> None:
    root = main_schema()
    assert set(node(root, "spec.port")["properties"]) == {"number"}
    assert node(root, "spec.port")["minProperties"] == 1
    assert node(root, "spec.type")["enum"] == ["ExternalHostname", "EndpointSelector"]
    assert node(root, "spec.protocol")["enum"][-2:] == ["GRPC", "WSS"]
    labels = node(root, "spec.endpointSelector.matchLabels")
    assert (labels["minProperties"], labels["maxProperties"]) == (1, 64)
    assert labels["additionalProperties"]["maxLength"] == 63
    assert set(node(root, "status")["properties"]) == {"ancestors"}
    assert "ancestorRef" in node(root, "status.ancestors[]")["required"]
    assert node(root, "status.ancestors")["maxItems"] == 32


def test_unknown_shape_is_refused() -> None:
    result = runner.invoke(app, ["crds", "--xbackend", "v2"])
    assert result.exit_code == 2
    assert "the shapes are v1.6 and main" in result.output


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    result = runner.invoke(app, ["crds", "--xbackend", "v1.6"])
    assert result.exit_code == 0, result.output
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


@pytest.fixture(scope="module")
def xbackend_crd(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [d for d in documents if d["metadata"]["name"] == "xbackends.gateway.networking.x-k8s.io"]
    return found


@pytest.fixture(scope="module")
def schema(xbackend_crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = xbackend_crd["spec"]["versions"]
    root: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return root


def node(root: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema node at ``path`` (``a.b[].c``: properties, ``[]`` for items)."""
    current = root
    for part in path.split("."):
        items = part.endswith("[]")
        current = current["properties"][part.removesuffix("[]")]
        if items:
            current = current["items"]
    return current


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], path + "[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], path + "{}")


def test_crds_is_multi_document_yaml_of_crds(documents: list[dict[str, Any]]) -> None:
    assert documents
    for doc in documents:
        assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
        assert doc["kind"] == "CustomResourceDefinition"
        spec = doc["spec"]
        assert doc["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"


def test_xbackend_crd_names_scope_version_and_status(xbackend_crd: dict[str, Any]) -> None:
    spec = xbackend_crd["spec"]
    assert spec["group"] == "gateway.networking.x-k8s.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "XBackend",
        "listKind": "XBackendList",
        "plural": "xbackends",
        "singular": "xbackend",
        "shortNames": ["xbackend"],
        "categories": ["gateway-api"],
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    root = version["schema"]["openAPIV3Schema"]
    assert root["required"] == ["spec"]
    assert set(root["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}


def test_every_upstream_rule_is_at_its_place_with_its_exact_message(schema: dict[str, Any]) -> None:
    expected: dict[str, list[dict[str, str]]] = {}
    for path, rule, message in UPSTREAM_RULES:
        expected.setdefault(path, []).append({"message": message, "rule": rule})
    found = {
        path: n["x-kubernetes-validations"] for path, n in walk(schema) if "x-kubernetes-validations" in n
    }
    assert found == expected
    for path, rules in expected.items():
        assert node(schema, path)["x-kubernetes-validations"] == rules


def rules_in_models(model: type[Any], seen: set[type[Any]] | None = None) -> set[tuple[str, str]]:
    """Every CEL rule ``model`` and the models it contains evaluate."""
    seen = set() if seen is None else seen
    if model in seen:
        return set()
    seen.add(model)
    found: set[tuple[str, str]] = set()
    if issubclass(model, cel.CelModel):
        found |= {(r.rule, r.message) for r in model.cel_rules}
    for info in model.model_fields.values():
        rules = [*info.metadata, *cel._annotated_rules(info.annotation)]
        found |= {(r.rule, r.message) for r in rules if isinstance(r, cel.CelRule)}
        for inner in contained_models(info.annotation):
            found |= rules_in_models(inner, seen)
    return found


def contained_models(annotation: Any) -> list[type[Any]]:
    if isinstance(annotation, type) and issubclass(annotation, xbackend_v1alpha1.Model):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in contained_models(arg)]


@pytest.mark.parametrize("shape", xbackend_v1alpha1.SHAPES)
def test_standalone_validation_runs_the_rules_the_crd_carries(shape: xbackend_v1alpha1.Shape) -> None:
    """One source: the CelRule objects the models of a shape evaluate are those its CRD prints."""
    (version,) = crds.crd(crds.xbackend_resource(shape))["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    in_models = rules_in_models(xbackend_v1alpha1.SCHEMAS[shape].spec)
    in_crd = {
        (r["rule"], r["message"]) for _, n in walk(schema) for r in n.get("x-kubernetes-validations", [])
    }
    upstream = UPSTREAM_RULES if shape == "v1.6" else UPSTREAM_RULES_MAIN
    assert in_models == in_crd == {(rule, message) for _, rule, message in upstream}


# Keys of JSONSchemaProps that a structural schema may use (no $ref, no combinators, no nullable here).
_ALLOWED = frozenset(
    {
        "type", "format", "properties", "required", "items", "additionalProperties", "enum", "default",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
        "pattern", "minItems", "maxItems", "minProperties", "maxProperties", "description",
        "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type", "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
    }
)  # fmt: skip
_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


def _conforms(value: Any, schema: dict[str, Any]) -> bool:
    expected = _TYPES[schema["type"]]
    if isinstance(value, bool) and schema["type"] in ("integer", "number"):
        return False
    if not isinstance(value, expected):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return False
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            return False
    if isinstance(value, list):
        return len(value) <= schema.get("maxItems", len(value)) and all(
            _conforms(item, schema["items"]) for item in value
        )
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return all(k in value for k in schema.get("required", [])) and all(
            _conforms(v, props[k]) for k, v in value.items() if k in props
        )
    return True


@pytest.mark.parametrize(
    "name",
    [
        "xbackends.gateway.networking.x-k8s.io",
        "gatewayclassconfigs.weir.dev",
        "backendcredentialpolicies.weir.dev",
        "backendmcppolicies.weir.dev",
    ],
)
def test_schema_is_structural(documents: list[dict[str, Any]], name: str) -> None:
    (doc,) = [d for d in documents if d["metadata"]["name"] == name]
    (version,) = doc["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    for path, n in walk(schema):
        where = path or "<root>"
        assert set(n) <= _ALLOWED, f"{where}: {sorted(set(n) - _ALLOWED)}"
        assert n.get("type") in _TYPES, f"{where}: type {n.get('type')!r}"
        assert not ("properties" in n and "additionalProperties" in n), where
        if n["type"] == "array":
            assert isinstance(n.get("items"), dict), f"{where}: an array needs one items schema"
        else:
            assert "items" not in n, where
        if n["type"] != "object":
            assert not {"properties", "required", "additionalProperties"} & set(n), where
        for name in n.get("required", []):
            assert name in n.get("properties", {}), f"{where}: required {name!r} is not a property"
        for value in n.get("enum", []):
            assert _conforms(value, {"type": n["type"]}), f"{where}: enum value {value!r}"
        if "default" in n:
            assert n["default"] not in (None, [], {}), f"{where}: a convenience default leaked"
            assert _conforms(n["default"], n), f"{where}: default {n['default']!r} does not fit"
        if n.get("x-kubernetes-list-type") == "map":
            for key in n["x-kubernetes-list-map-keys"]:
                assert key in n["items"].get("required", []), f"{where}: map key {key!r} must be required"
    assert "nullable" not in repr(schema) and "$ref" not in repr(schema) and "anyOf" not in repr(schema)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("spec", {"required": ["type", "port"]}),
        ("spec.type", {"type": "string", "enum": ["ExternalHostname"]}),
        ("spec.port", {"required": ["port"]}),
        ("spec.port.port", {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535}),
        ("spec.port.name", {"type": "string", "maxLength": 63}),
        (
            "spec.externalHostname.hostname",
            {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
            },
        ),
        ("spec.externalHostname", {"required": ["hostname"]}),
        ("spec.protocol", {"type": "string", "enum": ["TCP", "HTTP", "HTTP2", "HTTP11", "H2C", "MCP"]}),
        ("spec.tls", {"required": ["mode"]}),
        ("spec.tls.mode", {"type": "string", "enum": ["None", "ServerOnly", "ClientAndServer"]}),
        ("spec.tls.clientCertificateRef", {"required": ["name"]}),
        ("spec.tls.clientCertificateRef.group", {"default": ""}),
        ("spec.tls.clientCertificateRef.kind", {"default": "Secret"}),
        ("spec.tls.validation", {"required": ["hostname"]}),
        (
            "spec.tls.validation.caCertificateRefs",
            {"type": "array", "maxItems": 8, "x-kubernetes-list-type": "atomic"},
        ),
        ("spec.tls.validation.caCertificateRefs[]", {"required": ["group", "kind", "name"]}),
        (
            "spec.tls.validation.subjectAltNames",
            {"type": "array", "maxItems": 5, "x-kubernetes-list-type": "atomic"},
        ),
        ("spec.tls.validation.subjectAltNames[]", {"required": ["type"]}),
        ("spec.tls.validation.subjectAltNames[].type", {"enum": ["Hostname", "URI"]}),
        (
            "spec.tls.validation.subjectAltNames[].uri",
            {"maxLength": 253, "pattern": r"^(([^:/?#]+):)(//([^/?#]*))([^?#]*)(\?([^#]*))?(#(.*))?"},
        ),
        ("status.parents", {"type": "array", "maxItems": 32}),
        ("status.parents[]", {"required": ["controllerName", "parentRef"]}),
        ("status.parents[].parentRef.group", {"default": "gateway.networking.k8s.io"}),
        ("status.parents[].parentRef.kind", {"default": "Gateway"}),
        (
            "status.parents[].conditions",
            {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        ),
    ],
)
def test_constraints_come_from_the_models(
    schema: dict[str, Any], path: str, expected: dict[str, Any]
) -> None:
    actual = node(schema, path)
    assert {k: actual.get(k) for k in expected} == expected


def test_optional_fields_are_not_required(schema: dict[str, Any]) -> None:
    assert "externalHostname" not in node(schema, "spec")["required"]
    assert "name" not in node(schema, "spec.port")["required"]
    assert "required" not in node(schema, "status")
    assert not any("default" in n for p, n in walk(schema) if p.startswith("spec.tls.validation"))


def test_a_valid_manifest_fits_the_schema(schema: dict[str, Any]) -> None:
    manifest = {
        "type": "ExternalHostname",
        "externalHostname": {"hostname": "api.example.com"},
        "port": {"port": 443, "name": "https"},
        "tls": {
            "mode": "ServerOnly",
            "validation": {"hostname": "api.example.com", "wellKnownCACertificates": "System"},
        },
    }
    assert _conforms(manifest, node(schema, "spec"))
    xbackend_v1alpha1.XBackendSpec.model_validate(manifest)


def test_only_complete_models_get_a_crd() -> None:
    """weir's Gateway API models hold the fields weir reads; a CRD made of them would prune the rest."""
    assert [r.model for r in crds.CRDS] == [
        xbackend_v1alpha1.XBackend,
        weir_v1alpha1.GatewayClassConfig,
        weir_policies_v1alpha1.BackendCredentialPolicy,
        weir_policies_v1alpha1.BackendMCPPolicy,
    ]
    spec = typing.get_type_hints(xbackend_v1alpha1.XBackend)["spec"]
    assert set(typing.get_args(spec)) == {xbackend_v1alpha1.XBackendSpec, xbackend_v1alpha1.XBackendSpecMain}


# ------------------------------------------------------------------ GatewayClassConfig (weir.dev)


@pytest.fixture(scope="module")
def config_crd(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [d for d in documents if d["metadata"]["name"] == "gatewayclassconfigs.weir.dev"]
    return found


@pytest.fixture(scope="module")
def config_schema(config_crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = config_crd["spec"]["versions"]
    root: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return root


def test_gateway_class_config_crd_names_scope_and_version(config_crd: dict[str, Any]) -> None:
    assert config_crd["metadata"] == {"name": "gatewayclassconfigs.weir.dev"}  # no Gateway API channel
    spec = config_crd["spec"]
    assert spec["group"] == "weir.dev"
    assert spec["scope"] == "Cluster"  # like the GatewayClass that names it
    assert spec["names"] == {
        "kind": "GatewayClassConfig",
        "listKind": "GatewayClassConfigList",
        "plural": "gatewayclassconfigs",
        "singular": "gatewayclassconfig",
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert "subresources" not in version  # weir writes no status on it
    root = version["schema"]["openAPIV3Schema"]
    assert set(root["properties"]) == {"apiVersion", "kind", "metadata", "spec"}
    assert "required" not in root, "spec may be omitted: every field has a default"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("spec", {"type": "object", "required": None}),
        ("spec.egress", {"type": "object", "required": None}),
        ("spec.egress.deniedCIDRs", {"type": "array", "maxItems": 64}),
        ("spec.egress.deniedCIDRs[]", {"type": "string", "maxLength": 49}),
        ("spec.egress.allowedHostnames", {"type": "array", "maxItems": 64}),
        ("spec.egress.allowedHostnames[]", {"type": "string", "minLength": 1, "maxLength": 253}),
        ("spec.dns.resolvers", {"type": "array", "maxItems": 8}),
        ("spec.dns.resolvers[]", {"required": ["address"]}),
        ("spec.dns.resolvers[].address", {"type": "string", "maxLength": 45}),
        ("spec.dns.resolvers[].port", {"type": "integer", "minimum": 1, "maximum": 65535, "default": 53}),
        (
            "spec.dns.lookupTimeout",
            {"type": "string", "maxLength": 28, "pattern": weir_v1alpha1._DURATION.pattern},
        ),
    ],
)
def test_gateway_class_config_constraints(
    config_schema: dict[str, Any], path: str, expected: dict[str, Any]
) -> None:
    actual = node(config_schema, path)
    assert {k: actual.get(k) for k in expected} == expected


def test_gateway_class_config_example_fits_schema_and_model(config_schema: dict[str, Any]) -> None:
    spec = {
        "egress": {
            "deniedCIDRs": ["10.0.0.0/8", "169.254.0.0/16", "fc00::/7", "192.0.2.1"],
            "allowedHostnames": ["api.openai.com", "*.example.com"],
        },
        "dns": {
            "resolvers": [{"address": "10.0.0.10", "port": 53}, {"address": "fd00::53"}],
            "lookupTimeout": "2s",
        },
    }
    assert _conforms(spec, node(config_schema, "spec"))
    weir_v1alpha1.GatewayClassConfigSpec.model_validate(spec)
    assert _conforms({}, node(config_schema, "spec"))


def _validator_accepts(field: str, value: str) -> bool:
    data = {
        "cidr": {"egress": {"deniedCIDRs": [value]}},
        "address": {"dns": {"resolvers": [{"address": value}]}},
        "timeout": {"dns": {"lookupTimeout": value}},
    }[field]
    try:
        weir_v1alpha1.GatewayClassConfigSpec.model_validate(data)
    except ValueError:
        return False
    return True


def _schema_accepts(config_schema: dict[str, Any], field: str, value: str) -> bool:
    path = {
        "cidr": "spec.egress.deniedCIDRs[]",
        "address": "spec.dns.resolvers[].address",
        "timeout": "spec.dns.lookupTimeout",
    }[field]
    return _conforms(value, node(config_schema, path))


def _address_spellings(rng: random.Random) -> Iterator[str]:
    """Valid IP addresses in every spelling ipaddress reads (compressed, exploded, dotted IPv4 tail)."""
    fixed = [
        "0.0.0.0",
        "255.255.255.255",
        "::",
        "::1",
        "1::",
        "1:2:3:4:5:6:7::",
        "::2:3:4:5:6:7:8",
        "::1.2.3.4",
        "0000:0000:0000:0000:0000:ffff:255.255.255.255",  # the longest: 45 characters, 49 with /128
    ]
    yield from fixed
    for _ in range(300):
        v4 = ipaddress.IPv4Address(rng.getrandbits(32))
        v6 = ipaddress.IPv6Address(rng.getrandbits(128) >> rng.choice([0, 16, 64, 112]))
        mapped = ipaddress.IPv6Address(f"::ffff:{v4}")
        yield str(v4)
        yield v6.compressed
        yield v6.exploded
        yield v6.exploded.upper()
        yield f"::ffff:{v4}"
        yield f"{mapped.exploded.rsplit(':', 2)[0]}:{v4}"


def test_patterns_accept_every_address_and_network_the_controller_does(config_schema: dict[str, Any]) -> None:
    """The schema is a necessary condition: it never refuses what the controller accepts in CIDR notation.

    IPv4-mapped IPv6 addresses and networks (``::ffff:10.0.0.1``) pass the pattern, and the
    controller refuses them, as the CRD's CEL rules (Kubernetes' ``isIP``/``isCIDR``) do."""
    rng = random.Random(4894)
    for address in _address_spellings(rng):
        ip = ipaddress.ip_address(address)
        mapped = isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None
        assert _validator_accepts("address", address) is not mapped, address
        assert _schema_accepts(config_schema, "address", address), address
        # The address as spelled, bare and as a host network; networks of other sizes, spelled both ways.
        cidrs = {address, f"{address}/{ip.max_prefixlen}"}
        for prefix in (0, rng.randrange(ip.max_prefixlen + 1)):
            net = ipaddress.ip_network(f"{ip}/{prefix}", strict=False).network_address
            cidrs |= {f"{net.compressed}/{prefix}", f"{net.exploded}/{prefix}"}
        for cidr in cidrs:
            network = ipaddress.ip_network(cidr).network_address
            mapped = isinstance(network, ipaddress.IPv6Address) and network.ipv4_mapped is not None
            assert _validator_accepts("cidr", cidr) is not mapped, cidr
            assert _schema_accepts(config_schema, "cidr", cidr), cidr
    for timeout in ["1s", "60s", "1000ms", "1m", "0h1m0s", "00001s", "59s999ms"]:
        assert _validator_accepts("timeout", timeout), timeout
        assert _schema_accepts(config_schema, "timeout", timeout), timeout


@pytest.mark.parametrize(
    ("field", "value", "schema_says"),
    [
        # Refused by both.
        ("cidr", "10.0.0.0/8 ", False),
        ("cidr", "10/8", False),
        ("cidr", "example.com/8", False),
        ("cidr", "10.0.0.0/8/8", False),
        ("cidr", "", False),
        ("address", "dns.example.com", False),
        ("address", "10.0.0.10:53", False),
        ("address", "[fd00::53]", False),
        ("timeout", "2", False),
        ("timeout", "2 s", False),
        ("timeout", "1.5s", False),
        ("timeout", "1d", False),
        # The pattern cannot see these; the controller refuses them.
        ("cidr", "10.0.0.1/8", True),  # bits set beyond the prefix
        ("cidr", "256.0.0.0/8", True),
        ("cidr", "10.0.0.0/33", True),
        ("cidr", "1:2:3:4:5:6:7:8:9/64", True),
        ("address", "010.0.0.10", True),
        ("address", "::1::2", True),
        # Refused as Kubernetes' isIP/isCIDR refuse them (the CRD's CEL rules; the API server's
        # verdict is tests/kube/test_envtest_parity_weir_crds.py's).
        ("address", "::ffff:10.0.0.1", True),
        ("cidr", "::ffff:10.0.0.0/104", True),
        ("cidr", "10.0.0.0/08", True),
        ("timeout", "500ms", True),  # out of range: 1s to 60s
        ("timeout", "2m", True),
    ],
)
def test_invalid_values(config_schema: dict[str, Any], field: str, value: str, schema_says: bool) -> None:
    assert not _validator_accepts(field, value)
    assert _schema_accepts(config_schema, field, value) is schema_says


@pytest.mark.parametrize("value", ["10.0.0.0/255.0.0.0", "fe80::%eth0/64"])
def test_schema_and_validator_refuse_what_is_not_cidr_notation_though_ipaddress_reads_it(
    config_schema: dict[str, Any], value: str
) -> None:
    """A netmask after the ``/`` or a zone: Python's ipaddress reads them, CIDR notation has neither."""
    assert not _validator_accepts("cidr", value)
    assert not _schema_accepts(config_schema, "cidr", value)


def test_a_schema_constraint_must_land_on_a_new_keyword_of_an_existing_field() -> None:
    config = weir_v1alpha1.GatewayClassConfig
    with pytest.raises(KeyError, match="deniedCIDR"):
        crds.crd(crds.CustomResource(config, "x", schema_constraints={"spec.egress.deniedCIDR[]": {}}))
    with pytest.raises(KeyError, match="not a list"):
        crds.crd(crds.CustomResource(config, "x", schema_constraints={"spec.egress[]": {}}))
    with pytest.raises(ValueError, match="already states"):
        crds.crd(
            crds.CustomResource(
                config, "x", schema_constraints={"spec.egress.allowedHostnames[]": {"pattern": "^.*$"}}
            )
        )


def test_test_cluster_crds_cover_every_kind_weir_reads_that_a_crd_defines() -> None:
    """``weir crds --test-cluster``: one CRD per kind weir reads outside the core groups (tests/kube
    installs them on a real API server, which also checks them)."""
    from weir.api import registry

    result = runner.invoke(app, ["crds", "--test-cluster"])
    assert result.exit_code == 0, result.output
    documents = [d for d in yaml.safe_load_all(result.output) if d]
    kinds = {d["spec"]["names"]["kind"] for d in documents}
    core = {"", "discovery.k8s.io"}
    assert kinds == {m.KIND for m in registry.MODELS if m.API_VERSION.rpartition("/")[0] not in core}
    by_kind = {d["spec"]["names"]["kind"]: d for d in documents}
    assert [v["name"] for v in by_kind["ReferenceGrant"]["spec"]["versions"]] == ["v1beta1", "v1"]
    assert by_kind["Gateway"]["spec"]["versions"][0]["subresources"] == {"status": {}}
    gateway_annotations = by_kind["Gateway"]["metadata"]["annotations"]
    assert gateway_annotations["api-approved.kubernetes.io"].startswith("unapproved")

    def walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
        if isinstance(node, dict):
            if "default" in node:
                yield path, node["default"]
            for key, value in node.items():
                yield from walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for item in node:
                yield from walk(item, path)

    def has_null(value: Any) -> bool:
        if isinstance(value, dict):
            return any(v is None or has_null(v) for v in value.values())
        if isinstance(value, list):
            return any(has_null(v) for v in value)
        return False

    for document in documents:
        for path, default in walk(document["spec"], document["metadata"]["name"]):
            assert not has_null(default), f"{path}: a null inside a default, which the API server refuses"
        text = yaml.safe_dump(document)
        assert "propertyNames" not in text and "patternProperties" not in text, document["metadata"]["name"]
