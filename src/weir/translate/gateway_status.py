"""The status of Gateways and ListenerSets once routes have attached (their listeners' conditions and
``attachedRoutes``)."""

from __future__ import annotations

from typing import Any

from weir.api.gateway_v1 import GROUP
from weir.translate import frontendtls
from weir.translate import status as st
from weir.translate.listener_contexts import (
    SUPPORTED_KINDS,
    GatewayContext,
    ListenerContext,
    ListenerSetContext,
)


def gateway_status(ctx: GatewayContext) -> dict[str, Any]:
    """The status of a Gateway once routes have attached (``attachedRoutes`` is final)."""
    gen = ctx.gateway.metadata.generation
    conditions = list(ctx.conditions)
    if not ctx.addresses:
        conditions.append(
            st.condition(st.PROGRAMMED, False, st.R_INVALID, "The Gateway is not accepted", gen)
        )
    elif any(lc.served for lc in ctx.own_listeners):
        conditions.append(st.condition(st.PROGRAMMED, False, st.R_PENDING, st.PENDING_MESSAGE, gen))
    else:
        conditions.append(
            st.condition(
                st.PROGRAMMED,
                False,
                st.R_INVALID,
                "No listener can be served; see each listener's conditions",
                gen,
            )
        )
    listeners = _listener_entries(ctx.own_listeners, gen)
    if ctx.resolved_refs is not None:
        conditions.append(ctx.resolved_refs)
    if frontendtls.insecure_fallback(ctx.gateway):
        conditions.append(
            st.condition(
                st.INSECURE_FRONTEND_VALIDATION_MODE,
                True,
                st.R_CONFIGURATION_CHANGED,
                "spec.tls.frontend uses AllowInsecureFallback: HTTPS clients without a valid "
                "certificate are let in, and backends must authorize them",
                gen,
            )
        )
    status: dict[str, Any] = {"conditions": st.conditions_data(conditions), "listeners": listeners}
    if ctx.listener_sets:
        status["attachedListenerSets"] = sum(1 for lsc in ctx.listener_sets if lsc.refusal is None)
    if ctx.published is not None:
        status["addresses"] = [{"type": kind, "value": value} for kind, value in ctx.published]
    elif ctx.addresses:
        status["addresses"] = [{"type": "IPAddress", "value": a} for a in ctx.addresses]
    return status


def _listener_entries(listeners: list[ListenerContext], gen: int) -> list[dict[str, Any]]:
    """``status.listeners`` of a Gateway or a ListenerSet (the same shape for both)."""
    return [
        {
            "name": lc.name,
            "supportedKinds": [{"group": GROUP, "kind": k} for k in lc.kinds],
            "attachedRoutes": lc.attached,
            "conditions": st.conditions_data(_listener_conditions(lc, gen)),
        }
        for lc in listeners
    ]


def listener_set_status(lsc: ListenerSetContext) -> dict[str, Any]:
    """The status of a ListenerSet once routes have attached (``attachedRoutes`` is final).

    ``Programmed`` is ``Pending`` while any of its listeners is served (the
    data plane settles it, as for Gateways).
    """
    gen = lsc.listener_set.metadata.generation
    if lsc.refusal is not None:
        reason, message = lsc.refusal
        # A set its Gateway does not allow is NotAllowed in both conditions (upstream's
        # ListenerSetDefaultNotAllowed checks Programmed's reason too); otherwise Invalid.
        not_programmed = st.R_NOT_ALLOWED if reason == st.R_NOT_ALLOWED else st.R_INVALID
        return {
            "conditions": st.conditions_data(
                [
                    st.condition(st.ACCEPTED, False, reason, message, gen),
                    st.condition(
                        st.PROGRAMMED, False, not_programmed, "The ListenerSet is not accepted", gen
                    ),
                ]
            ),
            "listeners": [],
        }
    served = [lc for lc in lsc.listeners if lc.served]
    bad = ", ".join(lc.name for lc in lsc.listeners if not lc.served)
    if not bad:
        accepted = st.condition(
            st.ACCEPTED, True, st.R_ACCEPTED, "ListenerSet is attached to its Gateway", gen
        )
    else:
        message = f"Listeners not valid: {bad}; see each listener's conditions"
        valid = any(lc.valid for lc in lsc.listeners)
        accepted = st.condition(st.ACCEPTED, valid, st.R_LISTENERS_NOT_VALID, message, gen)
    if served:
        programmed = st.condition(st.PROGRAMMED, False, st.R_PENDING, st.PENDING_MESSAGE, gen)
    else:
        message = "No listener can be served; see each listener's conditions"
        programmed = st.condition(st.PROGRAMMED, False, st.R_INVALID, message, gen)
    return {
        "conditions": st.conditions_data([accepted, programmed]),
        "listeners": _listener_entries(lsc.listeners, gen),
    }


def _listener_conditions(lc: ListenerContext, gen: int) -> list[st.Condition]:
    not_accepted = st.condition(st.PROGRAMMED, False, st.R_INVALID, "The listener is not accepted", gen)
    no_refs = st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "No references to resolve", gen)
    if lc.conflict is not None:
        conds = [
            st.condition(st.ACCEPTED, False, lc.conflict.reason, lc.conflict.message, gen),
            not_accepted,
            no_refs,
        ]
        if lc.conflict.conflicted is not None:
            conds.append(st.condition(st.CONFLICTED, True, lc.conflict.conflicted, lc.conflict.message, gen))
        return conds
    if not lc.valid:
        if lc.unsupported is not None:
            accepted = st.condition(
                st.ACCEPTED, False, st.R_UNSUPPORTED_VALUE, f"Not supported: {lc.unsupported}", gen
            )
        else:
            message = (
                f"Protocol {lc.spec.protocol} is not supported by weir yet; "
                f"supported: {', '.join(sorted(SUPPORTED_KINDS))}"
            )
            accepted = st.condition(st.ACCEPTED, False, st.R_UNSUPPORTED_PROTOCOL, message, gen)
        return [accepted, not_accepted, no_refs]
    accepted = st.condition(st.ACCEPTED, True, st.R_ACCEPTED, "Listener is valid", gen)
    programmed = st.condition(st.PROGRAMMED, False, st.R_PENDING, st.PENDING_MESSAGE, gen)
    problems: list[tuple[str, str]] = []
    if lc.client_ca_problem is not None:
        problem = lc.client_ca_problem
        problems.append((problem.reason, problem.message))
        accepted = st.condition(
            st.ACCEPTED,
            False,
            st.R_NO_VALID_CA_CERTIFICATE,
            "Client certificates cannot be validated as spec.tls.frontend asks: the listener serves "
            "nothing rather than let clients in unchecked; see ResolvedRefs",
            gen,
        )
        programmed = st.condition(st.PROGRAMMED, False, st.R_INVALID, "The listener is not accepted", gen)
    elif lc.certificate_problem is not None:
        problems.append((lc.certificate_problem.reason, lc.certificate_problem.message))
        programmed = st.condition(
            st.PROGRAMMED,
            False,
            st.R_INVALID,
            "The listener serves nothing until its certificates resolve; see ResolvedRefs",
            gen,
        )
    conds = [accepted, programmed]
    wanted = [f"{k.group}/{k.kind}" for k in lc.spec.allowed_routes.kinds]
    invalid = [w for w in wanted if w.split("/", 1)[1] not in lc.kinds or not w.startswith(GROUP + "/")]
    if invalid:
        problems.append(
            (
                st.R_INVALID_ROUTE_KINDS,
                f"Route kinds not supported on a {lc.spec.protocol} listener: {', '.join(invalid)}",
            )
        )
    if problems:
        message = "; ".join(message for _, message in problems)
        conds.append(st.condition(st.RESOLVED_REFS, False, problems[0][0], message, gen))
    else:
        conds.append(st.condition(st.RESOLVED_REFS, True, st.R_RESOLVED_REFS, "All references resolved", gen))
    if lc.overlapping:
        conds.append(
            st.condition(
                st.OVERLAPPING_TLS_CONFIG,
                True,
                st.R_OVERLAPPING_HOSTNAMES,
                f"Hostname {lc.hostname or '(none: every name)'} overlaps on port {lc.spec.port} with "
                + ", ".join(lc.overlapping)
                + "; a certificate may cover several of these names, and an HTTPS request on a "
                "connection made for another listener's name is answered 421 (Misdirected Request)",
                gen,
            )
        )
    return conds
