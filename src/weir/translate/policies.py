"""Policy attachment for the policies that target backends: BackendTLSPolicy, BackendCredentialPolicy,
BackendMCPPolicy, XBackendTrafficPolicy.

The three follow the Gateway API's direct policy attachment (GEP-713,
GEP-2648), and this module holds what they share:

- **Targets.** A ``targetRef`` names an object in the policy's own
  namespace, whole or, with ``sectionName``, one port of it (a Service port
  by name, an XBackend's ``spec.port.name``). For a port, the policies
  naming that port apply; when there are none, those naming the whole
  object (:meth:`PolicyTargets.policies_for`).
- **Conflicts.** Among the policies of one kind with the same target and
  ``sectionName``, the oldest (``creationTimestamp``, then name) applies;
  the others are ``Accepted=False``, ``Conflicted``, naming the one that
  applies. A policy with several targets still applies where it is the
  oldest: dropping it there would undo what its author asked for
  (:meth:`PolicyTargets.conflicted`).
- **Status** (``PolicyStatus``). One ``ancestors`` entry per Gateway whose
  routes reach a target of the policy, for the policy that applies there and
  the ones that lost to it. Entries of other controllers are kept, weir's
  for Gateways that no longer reach a target disappear, at most 16
  (:func:`ancestors_status`). The Gateway API names the target itself as
  the first of a policy's ancestors (a Service, its routes, their
  Gateways); the kinds weir defines use it for a target no Gateway can
  reach because it does not exist (:func:`find_target`): that entry is
  ``Accepted=False``, ``TargetNotFound``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from weir.api.core_v1 import Service
from weir.api.gateway_v1 import GROUP as GATEWAY_GROUP
from weir.api.gateway_v1_backendtlspolicy import BackendTLSPolicy
from weir.api.meta import MAX_ANCESTORS, KubeObject, ObjectKey
from weir.api.weir_policies_v1alpha1 import BackendCredentialPolicy, BackendMCPPolicy
from weir.api.xbackend_v1alpha1 import GROUP as XBACKEND_GROUP
from weir.api.xbackend_v1alpha1 import XBackend
from weir.api.xbackendtrafficpolicy_v1alpha1 import XBackendTrafficPolicy
from weir.resources import Resources
from weir.translate import status as st

#: A policy kind that targets backends.
P = TypeVar("P", BackendTLSPolicy, BackendCredentialPolicy, BackendMCPPolicy, XBackendTrafficPolicy)

#: ``(type, ok, reason, message)`` of each condition.
Conditions = tuple[tuple[str, bool, str, str], ...]

#: GEP-713's reason for a policy whose target does not exist.
R_TARGET_NOT_FOUND = "TargetNotFound"

SERVICE = ("", "Service")
XBACKEND = (XBACKEND_GROUP, "XBackend")


@dataclass(frozen=True, order=True)
class Target:
    """What one ``targetRef`` names: an object, whole (``section`` ``""``) or one of its ports."""

    group: str
    kind: str
    namespace: str
    name: str
    section: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" + (f" port {self.section}" if self.section else "")


def targets(policy: P) -> tuple[Target, ...]:
    """The targets of ``policy``, in the order of its ``targetRefs``."""
    return tuple(
        Target(ref.group, ref.kind, policy.namespace, ref.name, getattr(ref, "section_name", None) or "")
        for ref in policy.spec.target_refs
    )


def age(policy: KubeObject) -> tuple[str, str]:
    """The order in which policies of one target win: oldest, then first by name."""
    return (policy.metadata.creation_timestamp or "", policy.name)


class PolicyTargets(Generic[P]):
    """The policies of one kind in one translation, by target, and the Gateways using each.

    ``kinds``: the ``(group, kind)`` the policies act on; references to
    anything else are not indexed.
    """

    def __init__(self, policies: Iterable[P], kinds: Collection[tuple[str, str]]) -> None:
        groups: dict[Target, list[P]] = defaultdict(list)
        for policy in policies:
            for target in targets(policy):
                if (target.group, target.kind) in kinds:
                    groups[target].append(policy)
        self._groups: dict[Target, tuple[P, ...]] = {
            target: tuple(sorted(found, key=age)) for target, found in sorted(groups.items())
        }
        self._users: dict[ObjectKey, set[ObjectKey]] = defaultdict(set)

    def policies_for(
        self,
        kind: tuple[str, str],
        namespace: str,
        name: str,
        section: str | None,
        gateways: Iterable[ObjectKey] = (),
    ) -> tuple[P, ...]:
        """The policies for port ``section`` of object ``kind`` ``namespace/name``, oldest first.

        The first applies. Those naming the port when there are any, else
        those naming the whole object. ``gateways`` (whose routes use the
        port) become ancestors of every policy returned.
        """
        group, kind_name = kind
        found: tuple[P, ...] = ()
        if section:
            found = self._groups.get(Target(group, kind_name, namespace, name, section), ())
        if not found:
            found = self._groups.get(Target(group, kind_name, namespace, name), ())
        gateways = tuple(gateways)
        for policy in found:
            self._users[policy.key].update(gateways)
        return found

    def ancestors(self, policy: P) -> list[ObjectKey]:
        """The Gateways using a target of ``policy``, sorted."""
        return sorted(self._users.get(policy.key, ()))

    def conflicted(self, policy: P, conditions: Conditions) -> Conditions:
        """``conditions`` with ``Accepted`` ``Conflicted`` if an older policy wins one of its targets."""
        lost = [
            (target, found[0])
            for target, found in self._groups.items()
            if any(p is policy for p in found[1:])
        ]
        if not lost:
            return conditions
        parts = [
            f"{target} is also targeted by the older {winner.KIND} {winner.name}, which applies"
            for target, winner in lost
        ]
        kinds = " or ".join(sorted({target.kind for target, _ in lost}))
        message = (
            "; ".join(parts) + f": when several policies target the same {kinds} and sectionName, the "
            "oldest (then the first by name) applies; remove this policy or target another sectionName"
        )
        accepted = (st.ACCEPTED, False, st.R_CONFLICTED, message)
        return (accepted, *(c for c in conditions if c[0] != st.ACCEPTED))


def find_target(resources: Resources, target: Target) -> Service | XBackend | str:
    """The Service or XBackend ``target`` names, or why it names nothing (a message).

    A ``sectionName`` must name a port: one of a Service's by name, an
    XBackend's ``spec.port.name``.
    """
    if (target.group, target.kind) == SERVICE:
        service = resources.service(target.namespace, target.name)
        if service is None:
            return f"Service {target.namespace}/{target.name} does not exist"
        names = [port.name for port in service.spec.ports if port.name]
        if target.section and target.section not in names:
            have = ", ".join(names) or "none"
            return (
                f"Service {target.namespace}/{target.name} has no port named {target.section} "
                f"(its named ports: {have})"
            )
        return service
    if (target.group, target.kind) == XBACKEND:
        xbackend = resources.get(XBackend, target.namespace, target.name)
        if xbackend is None:
            return f"XBackend {target.namespace}/{target.name} does not exist"
        port_name = xbackend.spec.port.name
        if target.section and target.section != port_name:
            have = f"its port is named {port_name}" if port_name else "its port has no name"
            return f"XBackend {target.namespace}/{target.name} has no port named {target.section} ({have})"
        return xbackend
    return f"{target.kind} is not a kind this policy can target"


def gateway_ref(gateway: ObjectKey) -> dict[str, Any]:
    return {"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": gateway.namespace, "name": gateway.name}


def target_ref(target: Target) -> dict[str, Any]:
    """A target as an ``ancestorRef`` (the Gateway API counts it among the policy's ancestors)."""
    ref: dict[str, Any] = {
        "group": target.group,
        "kind": target.kind,
        "namespace": target.namespace,
        "name": target.name,
    }
    if target.section:
        ref["sectionName"] = target.section
    return ref


def ancestors_status(
    policy: KubeObject, controller_name: str, entries: Iterable[tuple[dict[str, Any], Conditions]]
) -> dict[str, Any] | None:
    """``status.ancestors`` of ``policy``: other controllers' entries, then weir's ``entries``.

    ``entries``: ``(ancestorRef, conditions)``. ``None`` when there is
    nothing to write (see :func:`weir.translate.status.parents_status`).
    """
    generation = policy.metadata.generation
    ours = [
        st.AncestorStatus(
            st.ref_of(ref),
            controller_name,
            tuple(st.condition(t, ok, r, m, generation) for t, ok, r, m in conditions),
        )
        for ref, conditions in entries
    ]
    return st.parents_status(policy.status, controller_name, ours, key="ancestors", limit=MAX_ANCESTORS)


def statuses(
    resources: Resources,
    index: PolicyTargets[P],
    policies: Iterable[P],
    controller_name: str,
    *,
    conditions: Callable[[P], Conditions],
    refuses: Callable[[Service | XBackend], str | None],
) -> dict[ObjectKey, dict[str, Any]]:
    """``status.ancestors`` of ``policies``, for the kinds that also report on their targets.

    One entry per Gateway using a target (``conditions`` of the policy, made
    ``Conflicted`` where an older policy wins a target), then one per target
    the policy cannot act on, the target itself as ancestor: one that does
    not exist (``TargetNotFound``), or one ``refuses`` gives a reason for
    (``Invalid``, with that reason as the message). The conditions other
    than ``Accepted`` are the policy's in every entry.
    """
    out: dict[ObjectKey, dict[str, Any]] = {}
    for policy in policies:
        own = conditions(policy)
        at_gateways = index.conflicted(policy, own)
        entries = [(gateway_ref(gw), at_gateways) for gw in index.ancestors(policy)]
        others: Conditions = tuple(c for c in own if c[0] != st.ACCEPTED)
        for i, target in enumerate(targets(policy)):
            found = find_target(resources, target)
            if isinstance(found, str):
                message = (
                    f"targetRefs[{i}]: {found}, so this policy applies to nothing there; "
                    "create it or correct the reference"
                )
                entries.append(
                    (target_ref(target), ((st.ACCEPTED, False, R_TARGET_NOT_FOUND, message), *others))
                )
                continue
            why = refuses(found)
            if why is not None:
                message = f"targetRefs[{i}]: {why}"
                entries.append((target_ref(target), ((st.ACCEPTED, False, st.R_INVALID, message), *others)))
        status = ancestors_status(policy, controller_name, entries)
        if status is not None:
            out[policy.key] = status
    return out
