"""BackendTLSPolicy: which policy a Service port gets, what TLS it means, and the policies' status.

A policy targets Services in its own namespace (``group: ""``, ``kind:
Service``), the whole Service or, with ``sectionName``, one port by name.
For one port, the policies naming that port apply; when there are none,
those naming the whole Service. Among the policies of one target and
``sectionName``, the oldest (creation time, then name) applies and the
others are ``Accepted=False``, ``Conflicted``; a policy with several
targets still applies where it is the oldest (dropping it there would send
plaintext where its author asked for TLS).

``validation`` is XBackend's, evaluated by the same code
(:func:`weir.translate.tls.server_validation`): SNI is ``hostname``; the
certificate must carry one of ``subjectAltNames``, else ``hostname``; it
must chain to the CA references (ConfigMaps or Secrets with ``ca.crt``) or
to the system trust store (``wellKnownCACertificates: System``). As the
Gateway API asks: when no CA reference can be used the policy is
``Accepted=False``, ``NoValidCACertificate``; when only some can, it is
accepted and verifies with the others, and ``ResolvedRefs=False`` names the
ones left out. A policy that is not usable never lets its Service be reached
in plaintext: its share of requests is answered 500.

``options`` weir understands: :data:`MIN_VERSION_OPTION` and
:data:`MAX_VERSION_OPTION` (``"1.2"`` or ``"1.3"``). Any other key makes the
policy ``Accepted=False``, ``Invalid``: an option weir would ignore could be
a security setting its author relies on.

Status: one ``ancestors`` entry per Gateway whose routes reach a Service
port the policy targets (the policy that applies there and the ones that
lost to it), as for XBackends' ``parents``.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal, cast

from weir.api.core_v1 import Service, ServicePort
from weir.api.gateway_v1 import GROUP as GATEWAY_GROUP
from weir.api.gateway_v1_backendtlspolicy import BackendTLSPolicy
from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate import status as st
from weir.translate import tls
from weir.translate.settings import Settings

KIND = "BackendTLSPolicy"
MIN_VERSION_OPTION = "weir.dev/tls-min-version"
MAX_VERSION_OPTION = "weir.dev/tls-max-version"
_VERSIONS = ("1.2", "1.3")

#: (namespace, Service name, sectionName or None)
Target = tuple[str, str, str | None]
Conditions = tuple[tuple[str, bool, str, str], ...]  # (type, ok, reason, message)


@dataclass(frozen=True)
class PolicyVerdict:
    """A policy evaluated on its own: the TLS it asks for (``None``: unusable) and its conditions."""

    origination: tls.TlsOrigination | None
    conditions: Conditions


@dataclass(frozen=True)
class AppliedPolicy:
    """The policy a Service port gets. ``origination`` ``None``: the policy is unusable, requests fail."""

    policy: BackendTLSPolicy
    origination: tls.TlsOrigination | None


class BackendTLSPolicies:
    """The BackendTLSPolicies of one translation, indexed by target."""

    def __init__(self, resources: Resources, settings: Settings) -> None:
        self._resources = resources
        self._settings = settings
        groups: dict[Target, list[BackendTLSPolicy]] = defaultdict(list)
        for policy in resources.backend_tls_policies:
            for ref in policy.spec.target_refs:
                if (ref.group, ref.kind) == ("", "Service"):
                    groups[(policy.namespace, ref.name, ref.section_name or None)].append(policy)
        self._groups = {
            target: sorted(policies, key=_age) for target, policies in sorted(groups.items(), key=_target_key)
        }
        self._verdicts: dict[ObjectKey, PolicyVerdict] = {}
        self._users: dict[ObjectKey, set[ObjectKey]] = defaultdict(set)

    def for_port(self, service: Service, port: ServicePort, gateways: set[ObjectKey]) -> AppliedPolicy | None:
        """The policy for ``port`` of ``service``, or ``None``.

        ``gateways`` (whose routes use the port) become ancestors of the policies targeting it.
        """
        policies = None
        if port.name:
            policies = self._groups.get((service.namespace, service.name, port.name))
        if not policies:
            policies = self._groups.get((service.namespace, service.name, None))
        if not policies:
            return None
        for policy in policies:
            self._users[policy.key].update(gateways)
        winner = policies[0]
        return AppliedPolicy(winner, self._verdict(winner).origination)

    def statuses(self, controller_name: str) -> dict[ObjectKey, dict[str, Any]]:
        """``status.ancestors`` of every policy: one entry per Gateway using a port it targets.

        Entries of other controllers are kept; weir's entries for Gateways that
        no longer use the policy's targets disappear. At most 16.
        """
        out: dict[ObjectKey, dict[str, Any]] = {}
        for policy in self._resources.backend_tls_policies:
            users = sorted(self._users.get(policy.key, ()))
            gen = policy.metadata.generation
            conditions = self._conditions(policy)
            ours = [
                {
                    "ancestorRef": {
                        "group": GATEWAY_GROUP,
                        "kind": "Gateway",
                        "namespace": gw.namespace,
                        "name": gw.name,
                    },
                    "controllerName": controller_name,
                    "conditions": [st.condition(t, ok, r, m, gen) for t, ok, r, m in conditions],
                }
                for gw in users
            ]
            status = st.parents_status(
                policy.status, controller_name, ours, key="ancestors", limit=st.MAX_ANCESTORS
            )
            if status is not None:
                out[policy.key] = status
        return out

    # ------------------------------------------------------------ evaluation

    def _verdict(self, policy: BackendTLSPolicy) -> PolicyVerdict:
        if policy.key not in self._verdicts:
            self._verdicts[policy.key] = _evaluate(self._resources, self._settings, policy)
        return self._verdicts[policy.key]

    def _conditions(self, policy: BackendTLSPolicy) -> Conditions:
        """Its conditions; ``Accepted`` is ``Conflicted`` if an older policy wins one of its targets."""
        conditions = self._verdict(policy).conditions
        lost = [
            (target, policies[0])
            for target, policies in self._groups.items()
            if any(p is policy for p in policies[1:])
        ]
        if not lost:
            return conditions
        parts = []
        for (_, service, section), winner in lost:
            where = f"Service {policy.namespace}/{service}" + (f" port {section}" if section else "")
            older = f"{where} is also targeted by the older BackendTLSPolicy {winner.name}, which applies"
            parts.append(older)
        message = (
            "; ".join(parts) + ": when several policies target the same Service and sectionName, the oldest "
            "(then the first by name) applies; remove this policy or target another sectionName"
        )
        accepted = (st.ACCEPTED, False, st.R_CONFLICTED, message)
        return (accepted, *(c for c in conditions if c[0] != st.ACCEPTED))


def _evaluate(resources: Resources, settings: Settings, policy: BackendTLSPolicy) -> PolicyVerdict:
    validation = policy.spec.validation
    resolved_ok = (st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved")
    versions = _tls_versions(policy.spec.options)
    if isinstance(versions, str):
        return PolicyVerdict(None, ((st.ACCEPTED, False, st.R_INVALID, versions), resolved_ok))
    result = tls.server_validation(
        resources,
        settings,
        namespace=policy.namespace,
        validation=validation,
        default_hostname=validation.hostname,
        secret_prefix=f"backendtlspolicy/{policy.namespace}/{policy.name}",
    )
    if isinstance(result, tls.TlsProblem):
        # The Gateway API's reason for a value weir does not support (wellKnownCACertificates) is Invalid.
        reason = st.R_INVALID if result.accepted_reason == st.R_UNSUPPORTED_VALUE else result.accepted_reason
        accepted = (st.ACCEPTED, False, reason, result.message)
        if result.resolved_reason is None:
            return PolicyVerdict(None, (accepted, resolved_ok))
        resolved = (st.RESOLVED_REFS, False, result.resolved_reason, result.message)
        return PolicyVerdict(None, (accepted, resolved))
    origination = dataclasses.replace(
        result, tls=dataclasses.replace(result.tls, min_version=versions[0], max_version=versions[1])
    )
    names = ", ".join(san.value for san in origination.tls.subject_alt_names)
    message = f"Connections use TLS with SNI {origination.tls.sni}; the certificate must name {names}"
    if result.skipped:
        skipped = "; ".join(problem.message for problem in result.skipped)
        message += f". Left out of the trusted CAs: {skipped}"
        resolved = (st.RESOLVED_REFS, False, result.skipped[0].resolved_reason or st.R_INVALID, skipped)
    else:
        resolved = resolved_ok
    return PolicyVerdict(origination, ((st.ACCEPTED, True, st.R_ACCEPTED, message), resolved))


Version = Literal["1.2", "1.3"]


def _tls_versions(options: dict[str, str]) -> tuple[Version, Version] | str:
    """The TLS versions ``options`` allow, or why they are not valid."""
    unknown = sorted(set(options) - {MIN_VERSION_OPTION, MAX_VERSION_OPTION})
    if unknown:
        return (
            f"options {', '.join(unknown)} not supported; weir supports {MIN_VERSION_OPTION} and "
            f"{MAX_VERSION_OPTION} (1.2 or 1.3)"
        )
    low = options.get(MIN_VERSION_OPTION, "1.2")
    high = options.get(MAX_VERSION_OPTION, "1.3")
    for key, value in ((MIN_VERSION_OPTION, low), (MAX_VERSION_OPTION, high)):
        if value not in _VERSIONS:
            return f"option {key} is {value!r}; use 1.2 or 1.3"
    if low > high:
        return f"option {MIN_VERSION_OPTION} ({low}) is above {MAX_VERSION_OPTION} ({high})"
    return cast(Version, low), cast(Version, high)


def _age(policy: BackendTLSPolicy) -> tuple[str, str]:
    return (policy.metadata.creation_timestamp or "", policy.name)


def _target_key(item: tuple[Target, list[BackendTLSPolicy]]) -> tuple[str, str, str]:
    namespace, name, section = item[0]
    return (namespace, name, section or "")
