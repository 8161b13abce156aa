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

**Status.** As :func:`weir.translate.policies.statuses` says: an entry per
Gateway using a target (``Accepted=True``, or ``Conflicted`` when an older
policy applies), and one per target that does not exist
(``TargetNotFound``) or is an XBackend of another protocol (``Invalid``:
tool calls exist in MCP only, and weir does not look for them in other
traffic). A policy has no references to resolve, so no ``ResolvedRefs``.
"""

from __future__ import annotations

from typing import Any

from weir import ir
from weir.api.core_v1 import Service
from weir.api.meta import ObjectKey
from weir.api.weir_policies_v1alpha1 import BackendMCPPolicy
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
        return tool_policy(found[0]) if found else None

    def statuses(self, controller_name: str) -> dict[ObjectKey, dict[str, Any]]:
        """``status.ancestors`` of every policy (see the module's docstring)."""
        return statuses(
            self._resources,
            self._targets,
            self._resources.backend_mcp_policies,
            controller_name,
            conditions=_conditions,
            refuses=_refuses,
        )


def tool_policy(policy: BackendMCPPolicy) -> ir.McpToolPolicy:
    spec = policy.spec
    return ir.McpToolPolicy(
        allowed=tuple(sorted(set(spec.allowed_tools or ()))),
        denied=tuple(sorted(set(spec.denied_tools or ()))),
    )


def _conditions(policy: BackendMCPPolicy) -> Conditions:
    tools = tool_policy(policy)
    allowed = (
        f"tools/call may name tools matching {', '.join(tools.allowed)}"
        if tools.allowed
        else "tools/call may name any tool"
    )
    denied = f", except those matching {', '.join(tools.denied)}" if tools.denied else ""
    message = (
        f"{allowed}{denied}; other calls are refused by the gateway and never reach the server, and "
        "tools/list answers show only the tools that may be called. Other MCP methods pass"
    )
    return ((st.ACCEPTED, True, st.R_ACCEPTED, message),)


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
