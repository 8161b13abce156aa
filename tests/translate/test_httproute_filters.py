"""HTTPRoute filters, timeouts and retries: validation (the upstream CEL rules and their
messages), and the pieces of translation and xDS building that are easiest to check alone."""

from __future__ import annotations

import re

import pytest
import re2

from weir import ir
from weir.api.gateway_v1 import HTTPRequestRedirectFilter, duration_ms
from weir.loader import load_text
from weir.translate import filters
from weir.xds import build

ROUTE = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: default}
spec:
  rules:
"""


def problems(rules: str) -> list[str]:
    loaded, found = load_text(ROUTE + rules, "case.yaml")
    assert bool(loaded) != bool(found)
    # Each problem names its field's line (tests/loader/test_loader.py and test_yamlsource.py check
    # those); these tables are about what is said, so problems read ``case.yaml:1:`` alike.
    return [re.sub(r"^case\.yaml:\d+: HTTPRoute default/web: ", "", str(p)) for p in found]


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        (
            "  - filters: [{type: CORS, requestHeaderModifier: {set: [{name: a, value: b}]}}]\n",
            'spec.rules[0].filters[0]: Invalid value: "object": filter.cors must be specified for CORS '
            "filter.type",
        ),
        (
            "  - filters: [{type: CORS, cors: {}, urlRewrite: {}}]\n",
            'spec.rules[0].filters[0]: Invalid value: "object": filter.urlRewrite must be nil if the '
            "filter.type is not URLRewrite",
        ),
        (
            "  - filters:\n"
            "    - {type: URLRewrite, urlRewrite: {}}\n"
            "    - {type: RequestRedirect, requestRedirect: {}}\n",
            'spec.rules[0].filters: Invalid value: "array": May specify either '
            "httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both",
        ),
        (
            "  - filters:\n"
            "    - {type: RequestHeaderModifier, requestHeaderModifier: {}}\n"
            "    - {type: RequestHeaderModifier, requestHeaderModifier: {}}\n",
            'spec.rules[0].filters: Invalid value: "array": RequestHeaderModifier filter cannot be repeated',
        ),
        (
            "  - filters: [{type: RequestRedirect, requestRedirect: {}}]\n"
            "    backendRefs: [{name: a, port: 80}]\n",
            'spec.rules[0]: Invalid value: "object": RequestRedirect filter must not be used together '
            "with backendRefs",
        ),
        (
            "  - matches: [{path: {type: Exact, value: /a}}]\n"
            "    filters:\n"
            "    - type: RequestRedirect\n"
            "      requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}\n",
            'spec.rules[0]: Invalid value: "object": When using RequestRedirect filter with '
            "path.replacePrefixMatch, exactly one PathPrefix match must be specified",
        ),
        (
            "  - filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath}}}]\n",
            'spec.rules[0].filters[0].urlRewrite.path: Invalid value: "object": replaceFullPath must be '
            "specified when type is set to 'ReplaceFullPath'",
        ),
        (
            "  - filters: [{type: RequestRedirect, requestRedirect: {statusCode: 304}}]\n",
            "spec.rules[0].filters[0].requestRedirect.statusCode: Unsupported value: 304: supported "
            'values: "301", "302", "303", "307", "308"',
        ),
        (
            "  - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: a, port: 80}, "
            "percent: 5, fraction: {numerator: 1}}}]\n",
            'spec.rules[0].filters[0].requestMirror: Invalid value: "object": Only one of percent or '
            "fraction may be specified in HTTPRequestMirrorFilter",
        ),
        (
            "  - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: a}}}]\n",
            'spec.rules[0].filters[0].requestMirror.backendRef: Invalid value: "object": Must have port '
            "for Service reference",
        ),
        (
            "  - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: a, port: 80}, "
            "fraction: {numerator: 3, denominator: 2}}}]\n",
            'spec.rules[0].filters[0].requestMirror.fraction: Invalid value: "object": numerator must be '
            "less than or equal to denominator",
        ),
        (
            "  - filters: [{type: CORS, cors: {allowOrigins: ['*', 'https://a.example']}}]\n",
            'spec.rules[0].filters[0].cors.allowOrigins: Invalid value: "array": AllowOrigins cannot '
            "contain '*' alongside other origins",
        ),
        (
            "  - filters: [{type: CORS, cors: {allowMethods: ['*', GET]}}]\n",
            'spec.rules[0].filters[0].cors.allowMethods: Invalid value: "array": AllowMethods cannot '
            "contain '*' alongside other methods",
        ),
        (
            "  - filters: [{type: CORS, cors: {maxAge: 0}}]\n",
            "spec.rules[0].filters[0].cors.maxAge: Invalid value: 0: should be greater than or equal to 1",
        ),
        (
            "  - timeouts: {request: 1s, backendRequest: 2s}\n",
            'spec.rules[0].timeouts: Invalid value: "object": backendRequest timeout cannot be longer '
            "than request timeout",
        ),
        (
            "  - timeouts: {request: 0.5s}\n",
            'spec.rules[0].timeouts.request: Invalid value: "0.5s": should match '
            "'^([0-9]{1,5}(h|m|s|ms)){1,4}$'",
        ),
        (
            "  - retry: {codes: [399]}\n",
            "spec.rules[0].retry.codes[0]: Invalid value: 399: should be greater than or equal to 400",
        ),
    ],
)
def test_invalid(rules: str, expected: str) -> None:
    assert problems(rules) == [expected]


@pytest.mark.parametrize(
    "rules",
    [
        "  - timeouts: {request: 0s, backendRequest: 1ms}\n",  # 0s: no request limit
        # The standard channel's CRD takes repeated rule names (only the experimental one refuses
        # them), and weir names nothing after a rule.
        "  - name: a\n  - name: a\n",
        "  - timeouts: {request: 10s, backendRequest: 10s}\n",
        "  - filters: [{type: CORS, cors: {allowOrigins: ['https://*.com', 'http://*.a.com:12345']}}]\n",
        "  - matches: [{path: {value: /a}}]\n"
        "    filters:\n"
        "    - {type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}\n",
    ],
)
def test_valid(rules: str) -> None:
    assert problems(rules) == []


@pytest.mark.parametrize(("text", "ms"), [("0s", 0), ("1h", 3_600_000), ("1m30s", 90_000), ("250ms", 250)])
def test_duration(text: str, ms: int) -> None:
    assert duration_ms(text) == ms


def test_regex_problems_are_re2s() -> None:
    assert filters.regex_problem("/items/[0-9]+") is None
    problem = filters.regex_problem("/a(b")
    assert problem is not None and "missing )" in problem
    # Valid for Python's re, not for RE2.
    lookbehind = filters.regex_problem("(?<=a)b")
    assert lookbehind is not None and "invalid perl operator" in lookbehind
    too_big = filters.regex_problem("[a-z]{200}")
    assert too_big is not None and "program size" in too_big
    size = re2.compile("(" + "|".join(f"w{i}" for i in range(40)) + ")").programsize
    assert (filters.regex_problem("(" + "|".join(f"w{i}" for i in range(40)) + ")") is None) == (
        size <= filters.MAX_REGEX_PROGRAM_SIZE
    )


@pytest.mark.parametrize(
    ("config", "listener", "port"),
    [
        ({}, (80, "http"), None),
        ({}, (8080, "http"), 8080),
        ({}, (443, "https"), None),
        ({"scheme": "https"}, (8080, "http"), None),  # the scheme's well-known port
        ({"scheme": "http"}, (8443, "https"), None),
        ({"port": 80}, (8080, "http"), None),
        ({"port": 443}, (80, "http"), 443),  # http on 443 is not a default
        ({"scheme": "https", "port": 8443}, (80, "http"), 8443),
    ],
)
def test_redirect_port(config: dict[str, object], listener: tuple[int, str], port: int | None) -> None:
    redirect = filters.redirect_action(HTTPRequestRedirectFilter.model_validate(config), *listener)
    assert redirect.port == port
    assert redirect.status == 302


def _origin_regex(origin: str) -> str:
    return str(build._origin_matcher(origin).safe_regex.regex)


@pytest.mark.parametrize(
    ("allowed", "origin", "matches"),
    [
        ("https://www.foo.com", "https://www.foo.com", True),
        ("https://www.foo.com", "https://www.foo.com:443", True),
        ("https://www.foo.com", "https://www.foo.com:8443", False),
        ("https://www.foo.com", "http://www.foo.com", False),
        ("https://www.foo.com", "https://wwwxfoo.com", False),
        ("https://*.bar.com", "https://a.b.bar.com", True),
        ("https://*.bar.com", "https://bar.com", False),
        ("http://local.test:8080", "http://local.test:8080", True),
        ("http://local.test:8080", "http://local.test", False),
        ("*", "https://anything.example:1", True),
    ],
)
def test_cors_origins(allowed: str, origin: str, matches: bool) -> None:
    assert bool(re2.fullmatch(_origin_regex(allowed), origin)) == matches


@pytest.mark.parametrize(
    ("prefix", "value", "path", "expected"),
    [
        ("/foo", "/xyz", "/foo/bar", "/xyz/bar"),
        ("/foo", "/xyz/", "/foo/bar", "/xyz/bar"),
        ("/foo", "/xyz", "/foo", "/xyz"),
        ("/foo", "/xyz", "/foo/", "/xyz/"),
        ("/foo", "", "/foo/bar", "/bar"),
        ("/foo", "", "/foo/", "/"),
        ("/foo", "", "/foo", "/"),
        ("/foo", "/", "/foo/", "/"),
        ("/foo", "/", "/foo", "/"),
        ("/", "/xyz", "/bar", "/xyz/bar"),
    ],
)
def test_replace_prefix_match(prefix: str, value: str, path: str, expected: str) -> None:
    """The Gateway API's table for ReplacePrefixMatch, applied as Envoy applies the rewrite."""
    match = ir.RouteMatch(ir.PathMatch("PathPrefix", prefix))
    rewrite, regex = build._path_rewrite("r", ir.PathRewrite("ReplacePrefixMatch", value), match)
    if regex is not None:
        got = re2.sub(regex.pattern.regex, regex.substitution.replace("\\\\", "\\"), path, count=1)
    else:
        got = rewrite + path[len(prefix) :] if prefix != "/" else rewrite + path[1:]
    assert got == expected


def test_mirror_fraction() -> None:
    assert build._fraction(1, 3).numerator == 333_333
    assert build._fraction(42, 100).numerator == 42
    assert build._fraction(1, 1000).numerator == 10  # per ten thousand
