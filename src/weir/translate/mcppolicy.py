"""BackendMCPPolicy: which tools a ``tools/call`` may name on an MCP XBackend, and the policies' status.

A policy targets XBackends of protocol ``MCP`` in its own namespace (whole,
or by their ``spec.port.name``). Which policy applies where, conflicts and
the shape of the status: :mod:`weir.translate.policies`.

**What it does.** The XBackend's upstream gets
:class:`weir.ir.McpToolPolicy`: a ``tools/call`` naming a tool that
``allowedTools`` does not match (when it is set), or that ``deniedTools``
matches, is refused by the gateway and never reaches the server, and the
answers to ``tools/list`` leave such tools out; other MCP methods pass
(enforcement: :mod:`weir.xds.mcp`, :mod:`weir.xds.mcp_list`). Patterns are tool names in
which ``*`` matches any run of characters; they are kept sorted and without
repeats, so that the order they are written in changes nothing.

**Per caller.** With ``rules``, the upstream's policy is per caller:
``allowedTools`` is what every caller gets, and each rule's tools go to the
callers its ``from`` matches (a verified token's subject and claims, or a
client certificate's SAN). ``jwt`` becomes :class:`weir.ir.McpJwtProvider`
with the key set read from the ConfigMap or Secret it names; a key set that
cannot be read, or holds private keys, is reported (``Accepted: False``,
reason ``Invalid``, naming the object, key and field) and the policy applies
without its token rules, fail closed.

**Status.** As :func:`weir.translate.policies.statuses` says: an entry per
Gateway using a target (``Accepted=True``, or ``Conflicted`` when an older
policy applies), and one per target that does not exist
(``TargetNotFound``) or is an XBackend of another protocol (``Invalid``:
tool calls exist in MCP only, and weir does not look for them in other
traffic). A policy has no references to resolve, so no ``ResolvedRefs``.
"""

from __future__ import annotations

import json
from typing import Any

from weir import ir
from weir.api.core_v1 import Service
from weir.api.meta import ObjectKey
from weir.api.weir_policies_v1alpha1 import BackendMCPPolicy, McpCaller
from weir.api.xbackend_v1alpha1 import XBackend
from weir.resources import Resources
from weir.translate import status as st
from weir.translate.policies import XBACKEND, Conditions, PolicyTargets, statuses

KIND = "BackendMCPPolicy"


class McpPolicies:
    """The BackendMCPPolicies of one translation, indexed by target."""

    def __init__(self, resources: Resources) -> None:
        self._resources = resources
        self._targets = PolicyTargets(resources.backend_mcp_policies, (XBACKEND,))

    def for_xbackend(
        self, xbackend: XBackend, gateways: set[ObjectKey] | None = None
    ) -> ir.McpToolPolicy | None:
        """The tool policy of ``xbackend``, or ``None`` (always for a protocol other than ``MCP``).

        ``gateways`` (whose routes use it) become ancestors of the policies targeting it.
        """
        if xbackend.spec.protocol != "MCP":
            return None
        found = self._targets.policies_for(
            XBACKEND, xbackend.namespace, xbackend.name, xbackend.spec.port.name, gateways or ()
        )
        return tool_policy(found[0], self._resources)[0] if found else None

    def statuses(self, controller_name: str) -> dict[ObjectKey, dict[str, Any]]:
        """``status.ancestors`` of every policy (see the module's docstring)."""
        return statuses(
            self._resources,
            self._targets,
            self._resources.backend_mcp_policies,
            controller_name,
            conditions=lambda policy: _conditions(policy, self._resources),
            refuses=_refuses,
        )


def tool_policy(policy: BackendMCPPolicy, resources: Resources) -> tuple[ir.McpToolPolicy, str | None]:
    """The IR of ``policy``, and what is wrong with its JWKS reference (``None``: nothing).

    When the key set cannot be read the policy still applies, fail closed:
    without ``jwt``, so that no token is believed and the rules that match
    on tokens grant nothing (those callers get the tools that need no
    identity).
    """
    spec = policy.spec
    jwt, problem = _jwt_provider(policy, resources) if spec.jwt is not None else (None, None)
    # Without a provider (its keys could not be read) no token is believed: the rules on tokens
    # grant nothing, and still make the policy per caller (fail closed).
    grants = tuple(
        ir.McpToolGrant(_caller(rule.from_, jwt), tuple(sorted(set(rule.allowed_tools))))
        for rule in spec.rules or ()
        if rule.from_.jwt is None or jwt is not None
    )
    tools = ir.McpToolPolicy(
        allowed=tuple(sorted(set(spec.allowed_tools or ()))),
        denied=tuple(sorted(set(spec.denied_tools or ()))),
        per_caller=bool(spec.rules),
        grants=grants,
        jwt=jwt,
    )
    return tools, problem


def _caller(caller: McpCaller, jwt: ir.McpJwtProvider | None) -> ir.McpCaller:
    if caller.jwt is None or jwt is None:
        sans = caller.client_certificate.subject_alt_names if caller.client_certificate else ()
        return ir.McpCaller(subject_alt_names=tuple(sorted(set(sans))))
    claims = tuple(sorted((c.name, tuple(sorted(set(c.values)))) for c in caller.jwt.claims or ()))
    return ir.McpCaller(jwt=jwt.name, subjects=tuple(sorted(set(caller.jwt.subjects or ()))), claims=claims)


def _jwt_provider(
    policy: BackendMCPPolicy, resources: Resources
) -> tuple[ir.McpJwtProvider | None, str | None]:
    jwt = policy.spec.jwt
    assert jwt is not None
    source = jwt.jwks
    ref = source.config_map_ref or source.secret_ref
    assert ref is not None  # the CEL rule: exactly one
    text: str | None
    if source.config_map_ref is not None:
        where = f"ConfigMap {policy.namespace}/{ref.name}"
        config_map = resources.config_map(policy.namespace, ref.name)
        found = None if config_map is None else config_map.data
        text = None if config_map is None else config_map.data.get(ref.key)
    else:
        where = f"Secret {policy.namespace}/{ref.name}"
        secret = resources.secret(policy.namespace, ref.name)
        found = None if secret is None else {**secret.data, **secret.string_data}
        raw = None if secret is None else secret.value(ref.key)
        text = None if raw is None else raw.decode("utf-8", errors="replace")
    field = "spec.jwt.jwks." + ("configMapRef" if source.config_map_ref is not None else "secretRef")
    if found is None:
        return (
            None,
            f"{field}: {where} does not exist; create it with the JSON Web Key Set under key {ref.key}",
        )
    if text is None:
        keys = ", ".join(sorted(found)) or "none"
        return (
            None,
            f"{field}: {where} has no key {ref.key} (its keys: {keys}); put the JSON Web Key Set there",
        )
    why = jwks_problem(text)
    if why is not None:
        return None, f"{field}: key {ref.key} of {where} {why}"
    name = f"{policy.namespace}/{policy.name}"
    claims = sorted(
        {c.name for rule in policy.spec.rules or () if rule.from_.jwt for c in rule.from_.jwt.claims or ()}
    )
    audiences = tuple(sorted(set(jwt.audiences or ())))
    return ir.McpJwtProvider(name, jwt.issuer, audiences, text, tuple(claims)), None


def jwks_problem(text: str) -> str | None:
    """Why ``text`` is not a JSON Web Key Set (RFC 7517: an object whose ``keys`` lists keys that
    each have a ``kty``), or ``None``. Only public material is expected; nothing is quoted."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list) or not data["keys"]:
        return 'is not a JSON Web Key Set: it needs a non-empty "keys" list'
    for i, key in enumerate(data["keys"]):
        if not isinstance(key, dict) or not isinstance(key.get("kty"), str):
            return f'is not a JSON Web Key Set: keys[{i}] is not an object with a "kty" string'
        if any(private in key for private in ("d", "p", "q", "k")):
            return (
                f"holds private or symmetric key material (keys[{i}]); the gateway verifies tokens with "
                "public keys only: publish the public JWKS"
            )
    return None


def _conditions(policy: BackendMCPPolicy, resources: Resources) -> Conditions:
    tools, problem = tool_policy(policy, resources)
    if tools.per_caller:
        anyone = (
            f"every caller may name tools matching {', '.join(tools.allowed)}"
            if tools.allowed
            else "callers no rule matches may name no tool"
        )
        rules = "; ".join(f"{_describe(g.caller)} may also name {', '.join(g.allowed)}" for g in tools.grants)
        allowed = f"tools/call: {anyone}; {rules}"
    elif tools.allowed:
        allowed = f"tools/call may name tools matching {', '.join(tools.allowed)}"
    else:
        allowed = "tools/call may name any tool"
    denied = f", except those matching {', '.join(tools.denied)}" if tools.denied else ""
    tokens = (
        f". Bearer tokens are verified against the keys of the policy (issuer {policy.spec.jwt.issuer}); a "
        "request with an invalid or expired token is refused with HTTP 401"
        if tools.jwt is not None and policy.spec.jwt is not None
        else ""
    )
    shown = "the caller may call" if tools.per_caller else "may be called"
    message = (
        f"{allowed}{denied}; other calls are refused by the gateway and never reach the server, and "
        f"tools/list answers show only the tools that {shown}. Other MCP methods pass{tokens}"
    )
    if problem is not None:
        message = (
            f"{problem}. Until this is fixed no token is verified: the rules that match on jwt grant "
            "nothing, and callers get only the tools that need no identity"
        )
        return ((st.ACCEPTED, False, st.R_INVALID, message),)
    return ((st.ACCEPTED, True, st.R_ACCEPTED, message),)


def _describe(caller: ir.McpCaller) -> str:
    if caller.jwt is None:
        return f"callers whose client certificate has SAN {' or '.join(caller.subject_alt_names)}"
    parts = ["callers with a valid token"]
    if caller.subjects:
        parts.append(f"of subject {' or '.join(caller.subjects)}")
    for name, values in caller.claims:
        parts.append(f"whose {name} has {' or '.join(values)}")
    return " ".join(parts)


def _refuses(target: Service | XBackend) -> str | None:
    if isinstance(target, XBackend) and target.spec.protocol == "MCP":
        return None
    if isinstance(target, XBackend):
        protocol = target.spec.protocol or "unset (HTTP)"
        return (
            f"XBackend {target.namespace}/{target.name} has protocol {protocol}; a BackendMCPPolicy acts on "
            "the tool calls of XBackends of protocol MCP only: set its protocol to MCP, or remove it "
            "from targetRefs"
        )
    return f"Service {target.namespace}/{target.name}: a BackendMCPPolicy acts on MCP XBackends only"
