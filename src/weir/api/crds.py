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

Only kinds whose model is complete get a CRD: XBackend, and weir's own
GatewayClassConfig, BackendCredentialPolicy and BackendMCPPolicy. weir's
models of the standard Gateway API kinds hold only the fields weir reads,
and a CRD made from them would prune the rest; install those from the
Gateway API release.

Where a model checks a value with a Python validator instead of a declared
constraint (GatewayClassConfig's CIDRs, IP addresses and duration, which get
messages in the API's words that way), :attr:`CustomResource.schema_constraints`
states the same check for the API server: a pattern and a length, and a CEL
rule that refuses what the validator refuses (checked on a real API server by
tests/kube/test_envtest_parity_weir_crds.py). The validator's message is the
one ``weir validate`` and the controller give.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from weir.api import registry, weir_policies_v1alpha1, weir_v1alpha1, xbackend_v1alpha1
from weir.api.meta import KubeObject

__all__ = [
    "CRDS",
    "TEST_CLUSTER_CRDS",
    "CustomResource",
    "crd",
    "for_cluster",
    "for_test_cluster",
    "openapi_schema",
    "render",
    "xbackend_resource",
]


@dataclass(frozen=True)
class CustomResource:
    """A kind weir defines (or relies on) as a CRD, and the names it is served under."""

    model: type[KubeObject]
    plural: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    #: ``gateway.networking.k8s.io/channel`` of the Gateway API release it comes from.
    channel: str | None = None
    #: Constraints added to the generated schema, by path (``spec.a.b[]``: the items of list
    #: ``b``), for values the model checks in Python only (see the module's docstring). A path
    #: that is not in the schema, or a keyword the model already states, is an error.
    schema_constraints: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    #: A status the model does not describe (weir's partial models of the Gateway API kinds):
    #: the CRD keeps whatever status is written (``x-kubernetes-preserve-unknown-fields``).
    free_status: bool = False
    #: The ``spec`` and ``status`` models, when the kind's are not one model each (XBackend has
    #: one per shape; see :func:`xbackend_resource`).
    spec_model: type[BaseModel] | None = None
    status_model: type[BaseModel] | None = None

    @property
    def group(self) -> str:
        return self.model.API_VERSION.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.model.API_VERSION.rpartition("/")[2]


#: An IPv4 address in dotted decimal, or an IPv6 address (``::`` shorthand and a dotted IPv4
#: tail allowed). A superset: group and octet values and the count of groups are checked by
#: ``ipaddress`` in the controller, which also accepts a zone (``%eth0``) and, for networks, a
#: netmask after the ``/``; neither is CIDR notation, so the schema refuses them.
_IP = r"([0-9]{1,3}(\.[0-9]{1,3}){3}|([0-9a-fA-F]{0,4}:){2,8}([0-9a-fA-F]{0,4}|[0-9]{1,3}(\.[0-9]{1,3}){3}))"
#: The longest IP text: ``0000:0000:0000:0000:0000:ffff:255.255.255.255``.
_IP_MAX = 45

#: GatewayClassConfig: what its Python validators check (weir.api.weir_v1alpha1), stated for the
#: API server: a pattern and a length (a quick necessary condition, and what an older server
#: without CEL's IP library checks) and a CEL rule with the validator's verdict, so that the
#: cluster refuses exactly what ``weir validate`` refuses. The rules use Kubernetes' IP/CIDR CEL
#: library (``isIP``, ``isCIDR``, ``cidr``: Kubernetes 1.31 and later, as Gateway API v1.6's own
#: CRDs do with ``isIP``); the model keeps its Python validators for weir's messages.
_GATEWAY_CLASS_CONFIG_CONSTRAINTS: dict[str, dict[str, Any]] = {
    # A network in CIDR notation with no bits set beyond the prefix; a bare address is taken as
    # /32 or /128.
    "spec.egress.deniedCIDRs[]": {
        "pattern": f"^{_IP}(/[0-9]{{1,3}})?$",
        "maxLength": _IP_MAX + 4,
        "x-kubernetes-validations": [
            {
                "rule": "isIP(self) || (isCIDR(self) && cidr(self).masked() == cidr(self))",
                "message": "must be a network in CIDR notation (like 10.0.0.0/8 or fc00::/7) "
                "with no bits set after the prefix, or an IP address",
            }
        ],
    },
    "spec.dns.resolvers[].address": {
        "pattern": f"^{_IP}$",
        "maxLength": _IP_MAX,
        "x-kubernetes-validations": [{"rule": "isIP(self)", "message": "must be an IP address"}],
    },
    # Gateway API's Duration (GEP-2257), as in its CRDs, from 1s to 60s.
    "spec.dns.lookupTimeout": {
        "pattern": "^([0-9]{1,5}(h|m|s|ms)){1,4}$",
        "maxLength": 28,
        "x-kubernetes-validations": [
            {
                "rule": "duration(self) >= duration('1s') && duration(self) <= duration('60s')",
                "message": "must be from 1s to 60s (DNS counts whole seconds)",
            }
        ],
    },
}


def xbackend_resource(shape: xbackend_v1alpha1.Shape = "v1.6") -> CustomResource:
    """XBackend's CRD in ``shape``: the released one (``v1.6``) or upstream main's (``main``)."""
    schema = xbackend_v1alpha1.SCHEMAS[shape]
    return CustomResource(
        xbackend_v1alpha1.XBackend,
        plural="xbackends",
        short_names=("xbackend",),
        categories=("gateway-api",),
        channel="experimental",
        spec_model=schema.spec,
        status_model=schema.status,
    )


#: The CRDs ``weir crds`` prints.
CRDS: tuple[CustomResource, ...] = (
    xbackend_resource("v1.6"),
    CustomResource(
        weir_v1alpha1.GatewayClassConfig,
        plural="gatewayclassconfigs",
        schema_constraints=_GATEWAY_CLASS_CONFIG_CONSTRAINTS,
    ),
    CustomResource(
        weir_policies_v1alpha1.BackendCredentialPolicy,
        plural="backendcredentialpolicies",
        categories=("weir", "gateway-api-policies"),
    ),
    CustomResource(
        weir_policies_v1alpha1.BackendMCPPolicy,
        plural="backendmcppolicies",
        categories=("weir", "gateway-api-policies"),
    ),
)


#: The Gateway API kinds weir reads, as weir's models describe them: for test clusters only
#: (``weir crds --test-cluster``). The models hold only the fields weir reads, so these CRDs
#: prune everything else and take any status: a real cluster installs the Gateway API release.
#: They carry the models' CEL rules, so an API server running them checks the rules too.
def _gateway_api(kind: str, plural: str, *, status: bool = True) -> CustomResource:
    model = registry.model_for_kind(kind)
    if model is None:
        raise LookupError(f"no model for {kind}")
    return CustomResource(model, plural=plural, categories=("gateway-api",), free_status=status)


GATEWAY_API_CRDS: tuple[CustomResource, ...] = (
    _gateway_api("GatewayClass", "gatewayclasses"),
    _gateway_api("Gateway", "gateways"),
    _gateway_api("ListenerSet", "listenersets"),
    _gateway_api("HTTPRoute", "httproutes"),
    _gateway_api("GRPCRoute", "grpcroutes"),
    _gateway_api("TCPRoute", "tcproutes"),
    _gateway_api("TLSRoute", "tlsroutes"),
    _gateway_api("UDPRoute", "udproutes"),
    _gateway_api("ReferenceGrant", "referencegrants", status=False),
    _gateway_api("BackendTLSPolicy", "backendtlspolicies"),
    _gateway_api("XBackendTrafficPolicy", "xbackendtrafficpolicies"),
)

#: Every kind weir reads that a cluster defines with a CRD: what a test cluster installs.
TEST_CLUSTER_CRDS: tuple[CustomResource, ...] = CRDS + GATEWAY_API_CRDS


class _CrdJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON schema, shaped for a CRD (the rest is done by :func:`_structural`)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        # ``X | None``: optional means "may be absent", which is not being required.
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        json_schema = super().default_schema(schema)
        if "default" in json_schema:
            # An unset field inside a default object is absent, not null (the API server checks a
            # default against the schema, and null is no object).
            json_schema["default"] = _without_nulls(json_schema["default"])
            if json_schema["default"] in (None, [], {}):
                del json_schema["default"]  # a Python convenience, not a CRD default (see meta.crd_default)
        return json_schema

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        # A CRD schema has no keyword for the keys of a map (patternProperties and propertyNames
        # are not structural): the values' schema is ``additionalProperties``, keys are checked by
        # the model alone.
        json_schema = super().dict_schema(schema)
        patterns = json_schema.pop("patternProperties", None)
        json_schema.pop("propertyNames", None)
        if patterns and "additionalProperties" not in json_schema:
            (values,) = patterns.values()
            json_schema["additionalProperties"] = values
        return json_schema

    def literal_schema(self, schema: core_schema.LiteralSchema) -> JsonSchemaValue:
        json_schema = super().literal_schema(schema)
        if "const" in json_schema:
            json_schema["enum"] = [json_schema.pop("const")]
        return json_schema


def _without_nulls(value: Any) -> Any:
    """``value`` with every ``None`` in its mappings left out, however deep."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


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
    spec = resource.spec_model or model.model_fields["spec"].annotation
    if not (isinstance(spec, type) and issubclass(spec, BaseModel)):
        raise TypeError(f"{model.__name__}.spec must be a model, not {spec!r}")
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": openapi_schema(spec),
    }
    status = resource.status_model or getattr(model, "STATUS", None)
    if isinstance(status, type) and issubclass(status, BaseModel):
        properties["status"] = openapi_schema(status)
    elif resource.free_status:
        properties["status"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    root: dict[str, Any] = {"type": "object", "properties": properties}
    if model.model_fields["spec"].is_required():
        root["required"] = ["spec"]
    for path, constraints in resource.schema_constraints.items():
        _constrain(root, path, constraints)
    return root


def _constrain(root: dict[str, Any], path: str, constraints: Mapping[str, Any]) -> None:
    """Add ``constraints`` to the node at ``path`` (``a.b[].c``) of the schema ``root``."""
    node = root
    for part in path.split("."):
        name = part.removesuffix("[]")
        if name not in node.get("properties", {}):
            raise KeyError(f"schema constraint for {path!r}: no property {name!r} (was it renamed?)")
        node = node["properties"][name]
        if part.endswith("[]"):
            if node.get("type") != "array":
                raise KeyError(f"schema constraint for {path!r}: {name!r} is not a list")
            node = node["items"]
    stated = sorted(set(constraints) & set(node))
    if stated:
        raise ValueError(f"schema constraint for {path!r}: the model already states {stated}")
    node.update(constraints)


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
    # Versions the model also reads (ReferenceGrant: v1beta1 and v1), served with the same schema.
    also = [
        {**copy.deepcopy(version), "name": v.rpartition("/")[2], "storage": False}
        for v in resource.model.ALSO_SERVED
    ]
    metadata: dict[str, Any] = {"name": f"{resource.plural}.{resource.group}"}
    if resource.channel:
        metadata["annotations"] = {"gateway.networking.k8s.io/channel": resource.channel}
    if resource.group.endswith((".k8s.io", ".kubernetes.io")):
        # The API server refuses a CRD in a protected group without this annotation; the
        # Gateway API release names its approval, weir's test-cluster copy says it has none.
        metadata["annotations"] = {
            "api-approved.kubernetes.io": "unapproved, weir's partial model for test clusters only"
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": resource.group,
            "names": names,
            "scope": "Namespaced" if resource.model.NAMESPACED else "Cluster",
            "versions": [version, *also],
        },
    }


def for_cluster(*, xbackend: bool | xbackend_v1alpha1.Shape = False) -> tuple[CustomResource, ...]:
    """The CRDs ``weir crds`` prints: weir's own (``weir.dev``) always, XBackend only when asked.

    ``xbackend``: its shape (``v1.6`` or ``main``); ``True`` is ``v1.6``.

    The Gateway API experimental channel (``experimental-install.yaml``, v1.6 and later)
    installs XBackend's CRD under the same name, ``xbackends.gateway.networking.x-k8s.io``.
    Applying weir's copy as well would make the two installs fight over one object (each
    apply replacing the other's schema, annotations and field ownership), so a kind that
    comes from a Gateway API release (:attr:`CustomResource.channel`) is printed only for a
    cluster that installs the standard channel alone.
    """
    if not xbackend:
        return tuple(r for r in CRDS if r.channel is None)
    shape: xbackend_v1alpha1.Shape = "v1.6" if xbackend is True else xbackend
    return tuple(xbackend_resource(shape) if r.model is xbackend_v1alpha1.XBackend else r for r in CRDS)


def for_test_cluster() -> tuple[CustomResource, ...]:
    """Every kind weir reads that a CRD defines, from weir's models (``weir crds --test-cluster``):
    an API server for tests gets all of them from one command, and enforces the models' rules."""
    return TEST_CLUSTER_CRDS


def render(resources: Iterable[CustomResource] = CRDS) -> str:
    """The CRDs as multi-document YAML, keys sorted as ``controller-gen`` writes them."""
    return yaml.safe_dump_all(
        [crd(r) for r in resources], sort_keys=True, width=120, explicit_start=True, allow_unicode=True
    )
