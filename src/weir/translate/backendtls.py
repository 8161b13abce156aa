"""BackendTLSPolicy: which policy a Service port gets, what TLS it means, and the policies' status.

A policy targets Services in its own namespace (``group: ""``, ``kind:
Service``), the whole Service or, with ``sectionName``, one port by name.
Which policy applies to a port, conflicts (oldest first, the others
``Conflicted``) and the shape of the status are those of every policy
attaching to backends: :mod:`weir.translate.policies`.

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
lost to it), as for XBackends' ``parents``. A policy whose targets no route
reaches has none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, cast

from weir.api.core_v1 import Service, ServicePort
from weir.api.gateway_v1_backendtlspolicy import BackendTLSPolicy
from weir.api.meta import ObjectKey
from weir.resources import Resources
from weir.translate import status as st
from weir.translate import tls
from weir.translate.policies import SERVICE, Conditions, PolicyTargets, ancestors_status, gateway_ref
from weir.translate.settings import Settings

KIND = "BackendTLSPolicy"
MIN_VERSION_OPTION = "weir.dev/tls-min-version"
MAX_VERSION_OPTION = "weir.dev/tls-max-version"
_VERSIONS = ("1.2", "1.3")


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
        self._targets = PolicyTargets(resources.backend_tls_policies, (SERVICE,))
        self._verdicts: dict[ObjectKey, PolicyVerdict] = {}

    def for_port(self, service: Service, port: ServicePort, gateways: set[ObjectKey]) -> AppliedPolicy | None:
        """The policy for ``port`` of ``service``, or ``None``.

        ``gateways`` (whose routes use the port) become ancestors of the policies targeting it.
        """
        policies = self._targets.policies_for(SERVICE, service.namespace, service.name, port.name, gateways)
        if not policies:
            return None
        winner = policies[0]
        return AppliedPolicy(winner, self._verdict(winner).origination)

    def statuses(self, controller_name: str) -> dict[ObjectKey, dict[str, Any]]:
        """``status.ancestors`` of every policy: one entry per Gateway using a port it targets."""
        out: dict[ObjectKey, dict[str, Any]] = {}
        for policy in self._resources.backend_tls_policies:
            conditions = self._targets.conflicted(policy, self._verdict(policy).conditions)
            entries = [(gateway_ref(gw), conditions) for gw in self._targets.ancestors(policy)]
            status = ancestors_status(policy, controller_name, entries)
            if status is not None:
                out[policy.key] = status
        return out

    # ------------------------------------------------------------ evaluation

    def _verdict(self, policy: BackendTLSPolicy) -> PolicyVerdict:
        if policy.key not in self._verdicts:
            self._verdicts[policy.key] = _evaluate(self._resources, self._settings, policy)
        return self._verdicts[policy.key]


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
