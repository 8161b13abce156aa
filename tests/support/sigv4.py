"""Tests only: an AWS Signature Version 4 verifier, written from AWS's description of the algorithm
(canonical request, string to sign, derived key), for upstreams that check what the gateway signed.

:func:`verify` answers ``None`` for a request whose ``Authorization`` is a valid signature by the
given key, else why not. It trusts nothing the request says about itself beyond what SigV4 lets it
say: the signed header list and the date (within :data:`MAX_SKEW_S`); the body is hashed again, so
a changed body fails even when ``x-amz-content-sha256`` was kept. Checked against botocore's signer
in ``tests/e2e/test_credential_kinds.py``.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
import urllib.parse
from collections.abc import Sequence

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED = "UNSIGNED-PAYLOAD"
#: How far the request's ``x-amz-date`` may be from now (AWS allows 5 minutes).
MAX_SKEW_S = 300

_AUTH = re.compile(
    ALGORITHM + r" Credential=(?P<credential>[^,]+), *SignedHeaders=(?P<signed>[^,]+), *"
    r"Signature=(?P<sig>[0-9a-f]{64})$"
)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _quote(text: str, safe: str = "-_.~") -> str:
    return urllib.parse.quote(text, safe=safe)


def canonical_query(query: str) -> str:
    pairs = [tuple(p.split("=", 1)) if "=" in p else (p, "") for p in query.split("&") if p]
    decoded = [(urllib.parse.unquote_plus(k), urllib.parse.unquote_plus(v)) for k, v in pairs]
    return "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(decoded))


def verify(
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    body: bytes,
    *,
    access_key_id: str,
    secret_access_key: str,
    region: str,
    service: str,
    session_token: str | None = None,
    now: datetime.datetime | None = None,
) -> str | None:
    """``None`` when the request (``target``: path and query as sent) is validly signed, else why."""
    values: dict[str, list[str]] = {}
    for name, value in headers:
        values.setdefault(name.lower(), []).append(value)
    auth = values.get("authorization", [""])[0]
    match = _AUTH.match(auth)
    if match is None:
        return f"Authorization is not a SigV4 signature: {auth[:40]!r}"
    key_id, date, scope_region, scope_service, terminator = match["credential"].split("/")
    if (key_id, scope_region, scope_service, terminator) != (access_key_id, region, service, "aws4_request"):
        return f"wrong credential scope {match['credential']!r}"
    amz_date = values.get("x-amz-date", [""])[0]
    if not amz_date.startswith(date):
        return f"x-amz-date {amz_date!r} is not of the scope's day {date}"
    signed_at = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    if abs(((now or datetime.datetime.now(datetime.UTC)) - signed_at).total_seconds()) > MAX_SKEW_S:
        return f"x-amz-date {amz_date} is too far from now"
    signed = match["signed"].split(";")
    for required in ("host", "x-amz-date"):
        if required not in signed:
            return f"{required} is not signed"
    if session_token is not None and (
        values.get("x-amz-security-token") != [session_token] or "x-amz-security-token" not in signed
    ):
        return "the session token is missing or not signed"
    claimed = values.get("x-amz-content-sha256", [None])[0]
    payload = claimed if claimed == UNSIGNED else _sha256(body)
    if claimed is not None and claimed != payload:
        return "x-amz-content-sha256 is not the body's hash"
    path, _, query = target.partition("?")
    canonical_headers = "".join(
        f"{name}:{','.join(' '.join(v.split()) for v in values.get(name, []))}\n" for name in signed
    )
    canonical = "\n".join(
        [
            method,
            _quote(path, safe="/-_.~%"),
            canonical_query(query),
            canonical_headers,
            ";".join(signed),
            payload,
        ]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, _sha256(canonical.encode())])
    key = _hmac(
        _hmac(_hmac(_hmac(f"AWS4{secret_access_key}".encode(), date), region), service), "aws4_request"
    )
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, match["sig"]):
        return "signature mismatch"
    return None
