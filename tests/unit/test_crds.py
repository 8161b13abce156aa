"""``weir crds``: the XBackend CRD generated from the models, structural, with every upstream CEL rule."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from weir.api import cel, crds, xbackend_v1alpha1
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


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    result = runner.invoke(app, ["crds"])
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


def test_standalone_validation_runs_the_rules_the_crd_carries(schema: dict[str, Any]) -> None:
    """One source: the CelRule objects the models evaluate are those the CRD prints."""
    in_models: set[tuple[str, str]] = set()
    for model in vars(xbackend_v1alpha1).values():
        if isinstance(model, type) and issubclass(model, cel.CelModel):
            in_models |= {(r.rule, r.message) for r in model.cel_rules}
        if isinstance(model, type) and issubclass(model, xbackend_v1alpha1.Model):
            for info in model.model_fields.values():
                rules = [*info.metadata, *cel._annotated_rules(info.annotation)]
                in_models |= {(r.rule, r.message) for r in rules if isinstance(r, cel.CelRule)}
    in_crd = {
        (r["rule"], r["message"]) for _, n in walk(schema) for r in n.get("x-kubernetes-validations", [])
    }
    assert in_models == in_crd == {(rule, message) for _, rule, message in UPSTREAM_RULES}


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
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return all(k in value for k in schema.get("required", [])) and all(
            _conforms(v, props[k]) for k, v in value.items() if k in props
        )
    return True


def test_schema_is_structural(schema: dict[str, Any]) -> None:
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
    assert [r.model for r in crds.CRDS] == [xbackend_v1alpha1.XBackend]
    assert typing.get_type_hints(xbackend_v1alpha1.XBackend)["spec"] is xbackend_v1alpha1.XBackendSpec
