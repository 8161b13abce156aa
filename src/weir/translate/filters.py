"""HTTPRoute rules beyond matching: filters, timeouts and retries, in IR terms.

:func:`rule_problems` says what in a rule weir cannot serve (the route is
then not accepted, reason ``UnsupportedValue``); the other functions turn a
rule without problems into IR pieces. Mirror targets are backend references
and are resolved by :mod:`weir.translate.routes`, like the rule's backends.

Regular expressions (path, header and query parameter matches) are RE2, the
engine Envoy runs, checked here with the same library (``google-re2``) and
Envoy's limit on compiled program size, so that a bad expression refuses
its route with RE2's own error instead of making Envoy reject the whole
configuration.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from types import MappingProxyType

import re2

from weir import ir
from weir.api.gateway_v1 import (
    BackendObjectReference,
    HTTPCORSFilter,
    HTTPHeaderFilter,
    HTTPPathModifier,
    HTTPRequestRedirectFilter,
    HTTPRouteFilter,
    HTTPRouteMatch,
    HTTPRouteRule,
    SessionPersistence,
    duration_ms,
)

#: Envoy refuses a regular expression whose compiled RE2 program is larger
#: than this (runtime key ``re2.max_program_size.error_level``, default 100).
MAX_REGEX_PROGRAM_SIZE = 100

#: Filters weir applies per backendRef (the others only apply to a whole rule).
PER_BACKEND_FILTERS = ("RequestHeaderModifier", "ResponseHeaderModifier")

#: What an unset ``retry.attempts`` means: one retry (Envoy's own default).
DEFAULT_RETRY_ATTEMPTS = 1

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=4096)
def regex_problem(pattern: str) -> str | None:
    """Why Envoy would refuse ``pattern`` as an RE2 regular expression, or ``None``."""
    try:
        compiled = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
        return f"invalid RE2 regular expression {pattern!r}: {text}"
    size = int(compiled.programsize)
    if size > MAX_REGEX_PROGRAM_SIZE:
        return (
            f"regular expression {pattern!r} is too complex: its RE2 program size is {size}, "
            f"Envoy accepts at most {MAX_REGEX_PROGRAM_SIZE}"
        )
    return None


def rule_problems(rule: HTTPRouteRule, where: str) -> list[str]:
    """What in ``rule`` (at ``where``, e.g. ``spec.rules[0]``) weir cannot serve."""
    found: list[str] = []
    session = rule.session_persistence
    if session is not None and session.idle_timeout is not None:
        found.append(
            f"{where}.sessionPersistence.idleTimeout is not supported (Envoy ends a session only by its "
            "cookie's lifetime): remove it, or bound the session with absoluteTimeout"
        )
    for mi, match in enumerate(rule.matches):
        found.extend(_match_problems(match, f"{where}.matches[{mi}]"))
    for fi, f in enumerate(rule.filters):
        found.extend(_filter_problems(f, f"{where}.filters[{fi}]"))
    for bi, backend in enumerate(rule.backend_refs):
        for fi, f in enumerate(backend.filters):
            at = f"{where}.backendRefs[{bi}].filters[{fi}]"
            if f.type not in PER_BACKEND_FILTERS:
                found.append(
                    f"{at}: a {f.type} filter per backendRef is not supported (weir applies "
                    f"{' and '.join(PER_BACKEND_FILTERS)} per backendRef); put it in the rule's filters"
                )
            else:
                found.extend(_filter_problems(f, at))
    return found


def _match_problems(match: HTTPRouteMatch, where: str) -> list[str]:
    found = []
    if match.path.type == "RegularExpression":
        problem = regex_problem(match.path.value)
        if problem:
            found.append(f"{where}.path: {problem}")
    for hi, header in enumerate(match.headers):
        if header.type == "RegularExpression":
            problem = regex_problem(header.value)
            if problem:
                found.append(f"{where}.headers[{hi}]: {problem}")
    for qi, query in enumerate(match.query_params):
        if query.type == "RegularExpression":
            problem = regex_problem(query.value)
            if problem:
                found.append(f"{where}.queryParams[{qi}]: {problem}")
    return found


#: What Envoy refuses in an HTTP header value, and in every field it checks as one (a header
#: edit's value; a rewritten or redirected path, which becomes ``:path``). One such value in a
#: route configuration makes Envoy refuse the whole configuration: every route of the listener
#: would stop getting updates, so the route holding it is not accepted instead.
NOT_IN_HEADER_VALUE = ("\r", "\n", "\0")


def header_value_problem(where: str, what: str, value: str) -> str | None:
    """The problem of ``value`` (``what`` it is, at ``where``) as text Envoy takes as a header
    value, or ``None``: every value weir sends to Envoy as one goes through here."""
    if not any(c in value for c in NOT_IN_HEADER_VALUE):
        return None
    return (
        f"{where}: {what} contains CR, LF or NUL, which Envoy refuses in a header value; "
        "write it on one line, without them"
    )


def _filter_problems(f: HTTPRouteFilter, where: str) -> list[str]:
    if f.type == "ExtensionRef":
        return [f"{where}: ExtensionRef filters are not supported (weir has no extension filters)"]
    if f.type == "ExternalAuth":
        return [f"{where}: ExternalAuth filters are not supported"]
    if f.request_header_modifier is not None:
        return _header_problems(f.request_header_modifier, f"{where}.requestHeaderModifier")
    if f.response_header_modifier is not None:
        return _header_problems(f.response_header_modifier, f"{where}.responseHeaderModifier")
    if f.url_rewrite is not None:
        return _path_problems(f.url_rewrite.path, f"{where}.urlRewrite.path")
    if f.request_redirect is not None:
        return _path_problems(f.request_redirect.path, f"{where}.requestRedirect.path")
    return []


def _path_problems(path: HTTPPathModifier | None, where: str) -> list[str]:
    """A rewritten or redirected path: Envoy checks it as a header value."""
    if path is None:
        return []
    values = (("replaceFullPath", path.replace_full_path), ("replacePrefixMatch", path.replace_prefix_match))
    found = (header_value_problem(f"{where}.{name}", "the path", v) for name, v in values if v is not None)
    return [problem for problem in found if problem]


def _header_problems(config: HTTPHeaderFilter, where: str) -> list[str]:
    """Header names used twice (case-insensitive, across set/add/remove), Host, and unsafe values."""
    found = []
    seen: set[str] = set()
    named = [
        *(("set", h.name, h.value) for h in config.set),
        *(("add", h.name, h.value) for h in config.add),
        *(("remove", name, "") for name in config.remove),
    ]
    for action, name, value in named:
        lower = name.lower()
        if lower in seen:
            found.append(f"{where}: header {name!r} is named more than once; give each header one action")
        seen.add(lower)
        if lower == "host" or lower.startswith(":"):
            found.append(
                f"{where}.{action}: header {name!r} cannot be modified here; "
                "use a URLRewrite filter's hostname to change Host"
            )
        problem = header_value_problem(f"{where}.{action}", f"the value of header {name!r}", value)
        if problem:
            found.append(problem)
    return found


# ---------------------------------------------------------------- rule → IR pieces


@dataclass(frozen=True)
class RuleFilters:
    """The filters of one rule (already free of :func:`rule_problems`), in IR terms.

    ``redirect`` stays in API terms: its default port depends on the
    listener, see :func:`redirect_action`. ``mirrors`` are the references
    to resolve and the share of requests each gets.
    """

    request_headers: ir.HeaderEdits | None = None
    response_headers: ir.HeaderEdits | None = None
    rewrite: ir.Rewrite | None = None
    redirect: HTTPRequestRedirectFilter | None = None
    mirrors: tuple[tuple[BackendObjectReference, int, int], ...] = ()
    cors: ir.Cors | None = None


def rule_filters(filters: tuple[HTTPRouteFilter, ...]) -> RuleFilters:
    """Filters of a rule (or of a backendRef: only the header edits apply there)."""
    request_headers = response_headers = None
    rewrite = None
    redirect = None
    mirrors: list[tuple[BackendObjectReference, int, int]] = []
    cors = None
    for f in filters:
        if f.request_header_modifier is not None:
            request_headers = header_edits(f.request_header_modifier)
        elif f.response_header_modifier is not None:
            response_headers = header_edits(f.response_header_modifier)
        elif f.url_rewrite is not None:
            path = path_rewrite(f.url_rewrite.path)
            rewrite = ir.Rewrite(hostname=f.url_rewrite.hostname, path=path)
        elif f.request_redirect is not None:
            redirect = f.request_redirect
        elif f.request_mirror is not None:
            mirror = f.request_mirror
            if mirror.fraction is not None:
                share = (mirror.fraction.numerator, mirror.fraction.denominator)
            else:
                share = (100 if mirror.percent is None else mirror.percent, 100)
            mirrors.append((mirror.backend_ref, *share))
        elif f.cors is not None:
            cors = cors_policy(f.cors)
    return RuleFilters(request_headers, response_headers, rewrite, redirect, tuple(mirrors), cors)


def header_edits(config: HTTPHeaderFilter) -> ir.HeaderEdits | None:
    """``HTTPHeaderFilter`` as IR edits (names lower-cased), ``None`` when it changes nothing."""
    edits = ir.HeaderEdits(
        set=tuple(ir.Header(h.name.lower(), h.value) for h in config.set),
        add=tuple(ir.Header(h.name.lower(), h.value) for h in config.add),
        remove=tuple(name.lower() for name in config.remove),
    )
    return edits if edits != ir.HeaderEdits() else None


def path_rewrite(path: HTTPPathModifier | None) -> ir.PathRewrite | None:
    if path is None:
        return None
    if path.type == "ReplaceFullPath":
        return ir.PathRewrite("ReplaceFullPath", path.replace_full_path or "")
    return ir.PathRewrite("ReplacePrefixMatch", path.replace_prefix_match or "")


def cors_policy(config: HTTPCORSFilter) -> ir.Cors:
    return ir.Cors(
        allow_origins=config.allow_origins,
        allow_methods=config.allow_methods,
        allow_headers=config.allow_headers,
        expose_headers=config.expose_headers,
        max_age_s=config.max_age,
        allow_credentials=bool(config.allow_credentials),
    )


_DEFAULT_PORTS = MappingProxyType({"http": 80, "https": 443})


def redirect_action(
    config: HTTPRequestRedirectFilter, listener_port: int, listener_scheme: str
) -> ir.Redirect:
    """The redirect a listener (its port, and scheme ``http`` or ``https``) answers for ``config``.

    The port follows the Gateway API: the filter's, else the well-known port
    of the filter's scheme, else the listener's. It is left out of
    ``Location`` when it is the default of the scheme the client is sent to.
    """
    scheme = config.scheme or listener_scheme
    if config.port is not None:
        port = config.port
    elif config.scheme is not None:
        port = _DEFAULT_PORTS[config.scheme]
    else:
        port = listener_port
    return ir.Redirect(
        status=config.status_code,
        scheme=config.scheme,
        hostname=config.hostname,
        port=None if _DEFAULT_PORTS.get(scheme) == port else port,
        path=path_rewrite(config.path),
    )


# ---------------------------------------------------------------- timeouts and retries


@dataclass(frozen=True)
class Timing:
    """A rule's timeouts (milliseconds, ``0``: none) and retry policy."""

    request_ms: int
    idle_ms: int
    backend_ms: int = 0
    retry: ir.Retry | None = None


def rule_timing(rule: HTTPRouteRule, *, request_ms: int, idle_ms: int) -> Timing:
    """The timing of ``rule``, given the defaults for its backends (``request_ms``, ``idle_ms``).

    An explicit ``timeouts.request`` wins over the default, MCP's "no limit"
    included. With only ``timeouts.backendRequest``, the request timeout is
    the default, raised (when it is a limit) to cover every attempt.
    """
    retry = None
    if rule.retry is not None:
        attempts = DEFAULT_RETRY_ATTEMPTS if rule.retry.attempts is None else max(0, rule.retry.attempts)
        if attempts > 0:
            backoff = None if rule.retry.backoff is None else duration_ms(rule.retry.backoff)
            retry = ir.Retry(
                codes=tuple(sorted(set(rule.retry.codes))), attempts=attempts, backoff_ms=backoff
            )
    backend_ms = 0
    timeouts = rule.timeouts
    if timeouts is not None and timeouts.backend_request is not None:
        backend_ms = duration_ms(timeouts.backend_request)
    if timeouts is not None and timeouts.request is not None:
        request_ms = duration_ms(timeouts.request)
    elif backend_ms and request_ms:
        tries = 1 + (retry.attempts if retry else 0)
        request_ms = max(request_ms, backend_ms * tries)
    return Timing(request_ms=request_ms, idle_ms=idle_ms, backend_ms=backend_ms, retry=retry)


# ---------------------------------------------------------------- session persistence


def session_affinity(config: SessionPersistence | None, rule_id: str) -> ir.SessionAffinity | None:
    """The session persistence of a rule (``rule_id``: ``kind/namespace/name/rule/N``), if it has one.

    Without ``sessionName`` the cookie or header is named after the rule
    (``weir-session-`` and a hash of ``rule_id``), so that two rules' sessions
    never share a name. A permanent cookie lives ``absoluteTimeout``; a
    session cookie (the default) as long as the browser keeps it.
    """
    if config is None:
        return None
    name = config.session_name or "weir-session-" + hashlib.sha256(rule_id.encode()).hexdigest()[:10]
    permanent = config.cookie_config is not None and config.cookie_config.lifetime_type == "Permanent"
    ttl_s = 0
    if permanent and config.absolute_timeout is not None:
        ttl_s = max(1, -(-duration_ms(config.absolute_timeout) // 1000))
    return ir.SessionAffinity("cookie" if config.type == "Cookie" else "header", name, ttl_s)


def backends_session(sessions: list[ir.SessionAffinity | None]) -> ir.SessionAffinity | None:
    """The session persistence a rule gets from its backends' policies: theirs when every backend
    asks for the same one (a session pins an endpoint within a backend, so a split between
    backends that disagree has none)."""
    if not sessions or sessions[0] is None or any(s != sessions[0] for s in sessions[1:]):
        return None
    return sessions[0]
