"""XBackendTrafficPolicy: a retry budget and session persistence for the backends it targets.

A policy targets Services and XBackends of its own namespace, whole (the
Gateway API's ``targetRefs`` name no port here). Which policy applies where,
conflicts and the shape of the status: :mod:`weir.translate.policies`.

**Retry budget** (``retryConstraint``). Envoy's retry budget on the
backend's cluster: at most ``budget.percent`` of the requests in flight may
be retries, with at least ``minRetryRate.count`` retries allowed at any
time, so that retries still happen at low traffic. Envoy measures the
budget over the requests in flight rather than over ``budget.interval``, and
the minimum as concurrent retries rather than per ``minRetryRate.interval``;
both intervals are read and validated, not applied. A retry over the budget
is not made: the client gets the failed attempt's answer (and the cluster's
``upstream_rq_retry_overflow`` counts it), where the Gateway API asks for 503.

**Session persistence.** As a route rule's ``sessionPersistence``
(:func:`weir.translate.filters.session_affinity`), for the routes whose
backends are all targets with the same setting; a rule's own setting wins.

**Status.** An entry per Gateway using a target, ``Accepted=True``; one per
target that does not exist (``TargetNotFound``) or is an XBackend of protocol
``TCP`` (``Invalid``: raw bytes have neither retries nor sessions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from weir import ir
from weir.api.core_v1 import Service
from weir.api.meta import ObjectKey
from weir.api.xbackend_v1alpha1 import XBackend
from weir.api.xbackendtrafficpolicy_v1alpha1 import XBackendTrafficPolicy
from weir.resources import Resources
from weir.translate import filters
from weir.translate import status as st
from weir.translate.policies import SERVICE, XBACKEND, Conditions, PolicyTargets, statuses

KIND = "XBackendTrafficPolicy"

_ACCEPTED: Conditions = ((st.ACCEPTED, True, st.R_ACCEPTED, "Policy is accepted"),)


@dataclass(frozen=True)
class AppliedTraffic:
    """What the policy that applies to a backend asks: its cluster's retry budget, its session."""

    retry_budget: ir.RetryBudget | None
    session: ir.SessionAffinity | None


class TrafficPolicies:
    """The XBackendTrafficPolicies of one translation, indexed by target."""

    def __init__(self, resources: Resources) -> None:
        self._resources = resources
        self._policies = resources.all(XBackendTrafficPolicy)
        self._targets = PolicyTargets(self._policies, (SERVICE, XBACKEND))

    def for_service(self, service: Service, gateways: set[ObjectKey]) -> AppliedTraffic | None:
        """The policy for ``service`` (any of its ports), or ``None``; ``gateways`` become its ancestors."""
        found = self._targets.policies_for(SERVICE, service.namespace, service.name, None, gateways)
        return _applied(found[0]) if found else None

    def for_xbackend(
        self, xbackend: XBackend, gateways: set[ObjectKey] | None = None
    ) -> AppliedTraffic | None:
        """The policy for ``xbackend``, or ``None`` (always for protocol ``TCP``)."""
        if xbackend.spec.protocol == "TCP":
            return None
        found = self._targets.policies_for(XBACKEND, xbackend.namespace, xbackend.name, None, gateways or ())
        return _applied(found[0]) if found else None

    def statuses(self, controller_name: str) -> dict[ObjectKey, dict[str, Any]]:
        """``status.ancestors`` of every policy (see the module's docstring)."""
        return statuses(
            self._resources,
            self._targets,
            self._policies,
            controller_name,
            conditions=lambda policy: _ACCEPTED,
            refuses=_refuses,
        )


def _applied(policy: XBackendTrafficPolicy) -> AppliedTraffic:
    spec = policy.spec
    budget = None
    if spec.retry_constraint is not None:
        constraint = spec.retry_constraint
        budget = ir.RetryBudget(constraint.budget.percent, constraint.min_retry_rate.count or 0)
    session = filters.session_affinity(spec.session_persistence, f"{KIND}/{policy.namespace}/{policy.name}")
    return AppliedTraffic(budget, session)


def _refuses(target: Service | XBackend) -> str | None:
    if isinstance(target, XBackend) and target.spec.protocol == "TCP":
        return (
            f"XBackend {target.namespace}/{target.name} has protocol TCP: raw bytes have neither retries "
            "nor sessions; target an XBackend that speaks HTTP, or remove this one"
        )
    return None
