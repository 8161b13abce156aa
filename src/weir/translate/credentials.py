"""BackendCredentialPolicy: the credential the gateway adds to requests to a backend, and its status.

A policy targets XBackends and Services in its own namespace (a Service
whole, or one port by ``sectionName``; an XBackend whole, or by its
``spec.port.name``). Which policy applies where, conflicts and the shape of
the status: :mod:`weir.translate.policies`.

**What it does.** Every request the gateway sends to a target carries
header ``header.name`` (default ``Authorization``) with the value
``header.valuePrefix`` + the value of key ``secretRef.key`` of Secret
``secretRef.name`` (the policy's namespace). With ``overwrite`` (the
default) it replaces a header of that name sent by the client; without, a
client's own header is kept. It applies to HTTP only: every route kind that
sends requests (HTTPRoute, GRPCRoute); the bytes a TCPRoute or TLSRoute
relays to a Service carry no headers and are left alone, and an XBackend of
protocol ``TCP`` cannot be a target (``Invalid``).

**The value never shows.** It travels to Envoy in an SDS secret of its own,
``credential/NS/POLICY`` (:class:`weir.ir.GenericSecret`), whose name does
not change with the value: rotating the Secret changes that one SDS
resource, and Envoy injects the new value from the next request on, with no
cluster replaced and no request failed. ``weir.ir.to_data`` and
:func:`weir.xds.build.to_data` redact it; no status message, log line or
error here ever includes it (problems are described by key and kind
of character, never by content).

**Fail closed.** A policy that cannot be used (Secret or key missing, a
value no header can carry) is ``Accepted=False``, reason ``Invalid``
(GEP-713's reason for a policy that cannot be carried out), and
``ResolvedRefs=False``, reason ``InvalidCertificateRef``: the Gateway API's
reason for a Secret reference that cannot be used, the nearest standard
word (the Gateway API has none for a credential). Requests to its targets
are then answered 500 by the gateway, as for an unusable BackendTLSPolicy:
none leaves without the credential. A policy that lost a conflict has no
effect, so a problem of its own does not refuse anything.

**Status.** As :func:`weir.translate.policies.statuses` says: an entry per
Gateway using a target, and one per target that does not exist
(``TargetNotFound``) or is an XBackend of protocol ``TCP`` (``Invalid``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from weir import ir
from weir.api.core_v1 import Service, ServicePort
from weir.api.meta import ObjectKey
from weir.api.weir_policies_v1alpha1 import BackendCredentialPolicy
from weir.api.xbackend_v1alpha1 import XBackend
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.policies import SERVICE, XBACKEND, Conditions, PolicyTargets, statuses

KIND = "BackendCredentialPolicy"


@dataclass(frozen=True)
class CredentialVerdict:
    """A policy evaluated on its own: what to inject (``None``: unusable) and its conditions."""

    injection: ir.CredentialInjection | None
    secret: ir.GenericSecret | None
    conditions: Conditions


@dataclass(frozen=True)
class AppliedCredential:
    """The policy a backend gets. ``injection`` ``None``: the policy is unusable, requests are refused."""

    policy: BackendCredentialPolicy
    injection: ir.CredentialInjection | None
    secret: ir.GenericSecret | None


class CredentialPolicies:
    """The BackendCredentialPolicies of one translation, indexed by target."""

    def __init__(self, resources: Resources) -> None:
        self._resources = resources
        self._targets = PolicyTargets(resources.backend_credential_policies, (SERVICE, XBACKEND))
        self._verdicts: dict[ObjectKey, CredentialVerdict] = {}

    def for_service_port(
        self, service: Service, port: ServicePort, gateways: set[ObjectKey]
    ) -> AppliedCredential | None:
        """The policy for the HTTP use of ``port`` of ``service``, or ``None``.

        ``gateways`` (whose routes use the port) become ancestors of the policies targeting it.
        """
        found = self._targets.policies_for(SERVICE, service.namespace, service.name, port.name, gateways)
        return self._applied(found[0]) if found else None

    def for_xbackend(
        self, xbackend: XBackend, gateways: set[ObjectKey] | None = None
    ) -> AppliedCredential | None:
        """The policy for ``xbackend``, or ``None`` (always for protocol ``TCP``: no headers).

        ``gateways`` (whose routes use it) become ancestors of the policies targeting it.
        """
        if xbackend.spec.protocol == "TCP":
            return None
        found = self._targets.policies_for(
            XBACKEND, xbackend.namespace, xbackend.name, xbackend.spec.port.name, gateways or ()
        )
        return self._applied(found[0]) if found else None

    def statuses(self, controller_name: str) -> dict[ObjectKey, dict[str, Any]]:
        """``status.ancestors`` of every policy (see the module's docstring)."""
        return statuses(
            self._resources,
            self._targets,
            self._resources.backend_credential_policies,
            controller_name,
            conditions=lambda policy: self._verdict(policy).conditions,
            refuses=_refuses,
        )

    def _applied(self, policy: BackendCredentialPolicy) -> AppliedCredential:
        verdict = self._verdict(policy)
        return AppliedCredential(policy, verdict.injection, verdict.secret)

    def _verdict(self, policy: BackendCredentialPolicy) -> CredentialVerdict:
        if policy.key not in self._verdicts:
            self._verdicts[policy.key] = _evaluate(self._resources, policy)
        return self._verdicts[policy.key]


def secret_name(policy: BackendCredentialPolicy) -> str:
    """The SDS secret of ``policy``'s credential: named after the policy, never after the value."""
    return f"credential/{policy.namespace}/{policy.name}"


def _refuses(target: Service | XBackend) -> str | None:
    if isinstance(target, XBackend) and target.spec.protocol == "TCP":
        return (
            f"XBackend {target.namespace}/{target.name} has protocol TCP: the bytes it is sent carry no "
            "HTTP headers to put a credential in; target an XBackend that speaks HTTP, or remove this one"
        )
    return None


def _evaluate(resources: Resources, policy: BackendCredentialPolicy) -> CredentialVerdict:
    spec = policy.spec
    where = f"Secret {policy.namespace}/{spec.secret_ref.name}"
    raw = _credential(resources, policy)
    if isinstance(raw, str):
        accepted = (
            f"{raw}. Until this is fixed, requests to the targets are answered 500 by the gateway: none "
            "is sent without the credential"
        )
        return CredentialVerdict(
            None,
            None,
            (
                (st.ACCEPTED, False, st.R_INVALID, accepted),
                (st.RESOLVED_REFS, False, st.R_INVALID_CERTIFICATE_REF, raw),
            ),
        )
    header = spec.header
    generic = ir.GenericSecret(secret_name(policy), (header.value_prefix or "") + raw.decode("ascii"))
    injection = ir.CredentialInjection(generic.name, header=header.name, overwrite=spec.overwrite)
    prefix = f", after the prefix {header.value_prefix!r}" if header.value_prefix else ""
    client = "replaced (overwrite: true)" if spec.overwrite else "kept as sent (overwrite: false)"
    message = (
        f"Requests to the targets carry the value of key {spec.secret_ref.key} of {where} in header "
        f"{header.name}{prefix}; a client's own {header.name} header is {client}"
    )
    return CredentialVerdict(
        injection,
        generic,
        (
            (st.ACCEPTED, True, st.R_ACCEPTED, message),
            (st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved"),
        ),
    )


def _credential(resources: Resources, policy: BackendCredentialPolicy) -> bytes | str:
    """The Secret's value for ``policy``, or what is wrong with it (a message that never quotes it)."""
    ref = policy.spec.secret_ref
    where = f"Secret {policy.namespace}/{ref.name}"
    secret = resources.secret(policy.namespace, ref.name)
    if secret is None:
        return f"{where} does not exist; create it with the credential under key {ref.key}"
    raw = secret.value(ref.key)
    if raw is None:
        keys = ", ".join(sorted({*secret.data, *secret.string_data})) or "none"
        return f"{where} has no key {ref.key} (its keys: {keys}); add the credential under that key"
    why = value_problem(raw)
    return raw if why is None else f"The value of key {ref.key} of {where} {why}"


def value_problem(value: bytes) -> str | None:
    """Why ``value`` cannot be (the end of) an HTTP header value, or ``None``.

    The answer never quotes the value: it names what is wrong (empty, a line
    break, a control character, non-ASCII bytes, surrounding whitespace),
    which is enough to fix it.
    """
    if not value:
        return "is empty"
    if b"\n" in value or b"\r" in value:
        return (
            "contains a line break, which a header value cannot carry (a trailing newline, as `echo` "
            "without -n adds, counts); store the value without it"
        )
    if any((b < 0x20 and b != 0x09) or b == 0x7F for b in value):
        return "contains a control character, which a header value cannot carry"
    if any(b >= 0x80 for b in value):
        return "contains bytes that are not ASCII, which header values cannot carry reliably"
    if value[:1] in (b" ", b"\t") or value[-1:] in (b" ", b"\t"):
        return "starts or ends with a space or tab, which HTTP drops from header values; remove them"
    return None
