"""Gateway API ``gateway.networking.k8s.io/v1``: BackendTLSPolicy.

Kept out of :mod:`weir.api.gateway_v1` because its ``validation`` block is
XBackend's (:class:`weir.api.xbackend_v1alpha1.TLSValidation`: the same
schema and CEL rules upstream, one declaration here), and XBackend's module
already depends on :mod:`weir.api.gateway_v1`. Constraints follow the
upstream CRD (v1.6): 1 to 16 ``targetRefs`` with its two CEL rules on
``sectionName``, at most 16 ``options``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from weir.api.cel import CelChecked, CelRule
from weir.api.gateway_v1 import GROUP
from weir.api.meta import AnnotationValue, Group, Kind, KubeObject, Model, ObjectName, SectionName
from weir.api.xbackend_v1alpha1 import TLSValidation

API_VERSION = f"{GROUP}/v1"

_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}


class PolicyTargetReference(Model):
    """Gateway API ``LocalPolicyTargetReferenceWithSectionName``: an object in the policy's namespace."""

    group: Group
    kind: Kind
    name: ObjectName
    section_name: SectionName | None = None


TargetRefs = Annotated[
    tuple[PolicyTargetReference, ...],
    Field(min_length=1, max_length=16, json_schema_extra=_ATOMIC),
    CelRule(
        "self.all(p1, self.all(p2, p1.group == p2.group && p1.kind == p2.kind && p1.name == p2.name ? "
        "((!has(p1.sectionName) || p1.sectionName == '') == (!has(p2.sectionName) || p2.sectionName == '')) "
        ": true))",
        "sectionName must be specified when targetRefs includes 2 or more references to the same target",
    ),
    CelRule(
        "self.all(p1, self.exists_one(p2, p1.group == p2.group && p1.kind == p2.kind && "
        "p1.name == p2.name && (((!has(p1.sectionName) || p1.sectionName == '') && "
        "(!has(p2.sectionName) || p2.sectionName == '')) "
        "|| (has(p1.sectionName) && has(p2.sectionName) && p1.sectionName == p2.sectionName))))",
        "sectionName must be unique when targetRefs includes 2 or more references to the same target",
    ),
]


class BackendTLSPolicySpec(Model):
    target_refs: TargetRefs
    validation: TLSValidation
    #: Implementation-specific settings; weir's keys are in :mod:`weir.translate.backendtls`.
    #: Keys are Gateway API ``AnnotationKey``s, but the CRD cannot check a map's keys and the API
    #: server takes any: so does weir (values are checked, at most 4096 characters).
    options: dict[str, AnnotationValue] = Field(default_factory=dict, max_length=16)


class BackendTLSPolicy(CelChecked, KubeObject):
    """How a Gateway connects to the Services it targets: TLS, verified as ``validation`` says."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "BackendTLSPolicy"

    spec: BackendTLSPolicySpec
