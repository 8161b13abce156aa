"""CustomResourceDefinitions generated from the models (``weir crds``).

The CRD's ``openAPIV3Schema`` is the JSON schema of the same pydantic models
that standalone validation runs (:mod:`weir.api`), made structural as the
API server requires (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#specifying-a-structural-schema):

* every ``$ref`` inlined, no ``anyOf``/``oneOf``/``allOf``: an optional
  field is a property that is not ``required``, never ``nullable``;
* a ``type`` on every node; ``Literal`` values as ``enum``;
* constraints as pydantic states them (``pattern``, ``minLength``,
  ``maxLength``, ``minimum``, ``maximum``, ``maxItems``), defaults as the
  CRD declares them (:func:`weir.api.meta.crd_default`: no ``default: null``
  or ``default: []``), and the CEL rules of :mod:`weir.api.cel` as
  ``x-kubernetes-validations`` at the node that carries them;
* no titles or descriptions (weir's docstrings are about weir, not the API).

Only kinds whose model is complete get a CRD: weir's models of the standard
Gateway API kinds hold only the fields weir reads, and a CRD made from them
would prune the rest; install those from the Gateway API release.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from weir.api import xbackend_v1alpha1
from weir.api.meta import KubeObject

__all__ = ["CRDS", "CustomResource", "crd", "openapi_schema", "render"]


@dataclass(frozen=True)
class CustomResource:
    """A kind weir defines (or relies on) as a CRD, and the names it is served under."""

    model: type[KubeObject]
    plural: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    #: ``gateway.networking.k8s.io/channel`` of the Gateway API release it comes from.
    channel: str | None = None

    @property
    def group(self) -> str:
        return self.model.API_VERSION.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.model.API_VERSION.rpartition("/")[2]


#: The CRDs ``weir crds`` prints.
CRDS: tuple[CustomResource, ...] = (
    CustomResource(
        xbackend_v1alpha1.XBackend,
        plural="xbackends",
        short_names=("xbackend",),
        categories=("gateway-api",),
        channel="experimental",
    ),
)


class _CrdJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON schema, shaped for a CRD (the rest is done by :func:`_structural`)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        # ``X | None``: optional means "may be absent", which is not being required.
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        json_schema = super().default_schema(schema)
        if "default" in json_schema and json_schema["default"] in (None, [], {}):
            del json_schema["default"]  # a Python convenience, not a CRD default (see meta.crd_default)
        return json_schema

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        json_schema = super().literal_schema(schema)
        if "const" in json_schema:
            json_schema["enum"] = [json_schema.pop("const")]
        return json_schema


_DROPPED = frozenset({"title", "description", "$defs"})
_COMBINATORS = frozenset({"anyOf", "oneOf", "allOf", "not"})


def _structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``node`` with every ``$ref`` inlined and the keywords a CRD has no use for dropped."""
    if "$ref" in node:
        name = node["$ref"].rpartition("/")[2]
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return _structural({**defs[name], **siblings}, defs)
    combined = _COMBINATORS & node.keys()
    if combined:
        raise ValueError(f"a CRD schema cannot use {sorted(combined)}: {node}")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value, defs)
        else:
            out[key] = value
    return out


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of ``model`` (CEL rules included)."""
    raw = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_CrdJsonSchema)
    return _structural(raw, raw.get("$defs", {}))


def _object_schema(resource: CustomResource) -> dict[str, Any]:
    model = resource.model
    spec = model.model_fields["spec"].annotation
    if not (isinstance(spec, type) and issubclass(spec, BaseModel)):
        raise TypeError(f"{model.__name__}.spec must be a model, not {spec!r}")
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": openapi_schema(spec),
    }
    status = getattr(model, "STATUS", None)
    if isinstance(status, type) and issubclass(status, BaseModel):
        properties["status"] = openapi_schema(status)
    return {"type": "object", "required": ["spec"], "properties": properties}


def crd(resource: CustomResource) -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of ``resource``."""
    kind = resource.model.KIND
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": resource.plural,
        "singular": kind.lower(),
    }
    if resource.short_names:
        names["shortNames"] = list(resource.short_names)
    if resource.categories:
        names["categories"] = list(resource.categories)
    version: dict[str, Any] = {
        "name": resource.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": _object_schema(resource)},
        "additionalPrinterColumns": [
            {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}
        ],
    }
    if "status" in version["schema"]["openAPIV3Schema"]["properties"]:
        version["subresources"] = {"status": {}}
    metadata: dict[str, Any] = {"name": f"{resource.plural}.{resource.group}"}
    if resource.channel:
        metadata["annotations"] = {"gateway.networking.k8s.io/channel": resource.channel}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": resource.group,
            "names": names,
            "scope": "Namespaced" if resource.model.NAMESPACED else "Cluster",
            "versions": [version],
        },
    }


def render(resources: Iterable[CustomResource] = CRDS) -> str:
    """The CRDs as multi-document YAML, keys sorted as ``controller-gen`` writes them."""
    return yaml.safe_dump_all(
        [crd(r) for r in resources], sort_keys=True, width=120, explicit_start=True, allow_unicode=True
    )
