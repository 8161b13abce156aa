"""Gateway API experimental ``gateway.networking.x-k8s.io/v1alpha1``: XBackendTrafficPolicy.

How traffic to a backend (a Service or an XBackend, whole: a target names no
port) is handled: a retry budget (``retryConstraint``) and session
persistence. Constraints follow the v1.6 experimental CRD: 1 to 16
``targetRefs`` unique by group, kind and name; ``budget.percent`` 0 to 100;
``budget.interval`` from 1 s to 1 h; ``minRetryRate.count`` 1 to 1,000,000 and
its ``interval`` above 0 and at most 1 h (each rule with the CRD's message, at
the field the CRD puts it on).
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, field_validator, model_validator

from weir.api.gateway_v1 import Duration, SessionPersistence, duration_ms
from weir.api.meta import Group, Kind, KubeObject, Model, ObjectName
from weir.api.xbackend_v1alpha1 import GROUP

API_VERSION = f"{GROUP}/v1alpha1"


class LocalPolicyTargetReference(Model):
    """An object in the policy's namespace, whole."""

    group: Group
    kind: Kind
    name: ObjectName


class BudgetDetails(Model):
    percent: int = Field(default=20, ge=0, le=100, strict=True)
    interval: Duration = "10s"

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        if not 1_000 <= duration_ms(value) <= 3_600_000:
            raise ValueError("interval cannot be greater than one hour or less than one second")
        return value


class RequestRate(Model):
    count: int | None = Field(default=None, ge=1, le=1_000_000, strict=True)
    interval: Duration | None = None

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str | None) -> str | None:
        if value is not None and not 0 < duration_ms(value) <= 3_600_000:
            raise ValueError("interval cannot be greater than one hour")
        return value


class RetryConstraint(Model):
    budget: BudgetDetails = BudgetDetails()
    min_retry_rate: RequestRate = RequestRate(count=10, interval="1s")


TargetRefs = Annotated[
    tuple[LocalPolicyTargetReference, ...],
    Field(
        min_length=1,
        max_length=16,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["group", "kind", "name"],
        },
    ),
]


class XBackendTrafficPolicySpec(Model):
    target_refs: TargetRefs
    retry_constraint: RetryConstraint | None = None
    session_persistence: SessionPersistence | None = None

    @model_validator(mode="after")
    def _unique_targets(self) -> XBackendTrafficPolicySpec:
        keys = [(t.group, t.kind, t.name) for t in self.target_refs]
        if len(keys) != len(set(keys)):
            raise ValueError("targetRefs must be unique by group, kind and name")
        return self


class XBackendTrafficPolicy(KubeObject):
    """Retry budget and session persistence for the Services and XBackends it targets."""

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "XBackendTrafficPolicy"

    spec: XBackendTrafficPolicySpec
