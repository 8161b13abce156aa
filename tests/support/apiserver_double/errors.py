"""``Status`` objects: how the API server reports a failure, and the exception that carries one.

Codes, reasons and message texts are those of the Kubernetes API server
(``k8s.io/apimachinery/pkg/api/errors``), so a client's error handling meets
what it would meet in a cluster: ``NotFound`` names ``plural.group "name"``,
``Conflict`` says "the object has been modified; ...", and so on.
"""

from __future__ import annotations

from typing import Any

from apiserver_double.kinds import KindInfo

__all__ = [
    "ApiStatusError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "invalid",
    "not_found",
    "resource_not_found",
    "status_body",
]

_REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``v1`` ``Status`` with ``status: Failure``; ``reason`` defaults to the code's usual one."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else _REASONS.get(code, ""),
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


class ApiStatusError(Exception):
    """A request the API server refuses; :attr:`status` is the ``Status`` body it answers with.

    Raised by the direct-manipulation methods of
    :class:`~apiserver_double.ApiServerDouble` as well, with the same
    body an HTTP client would receive.
    """

    def __init__(
        self, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{code} {reason or _REASONS.get(code, '')}: {message}")
        self.code = code
        self.status = status_body(code, message, reason, details)

    @property
    def reason(self) -> str:
        return str(self.status["reason"])

    @property
    def message(self) -> str:
        return str(self.status["message"])


def _details(info: KindInfo, name: str) -> dict[str, Any]:
    return {"name": name, "group": info.group, "kind": info.plural}


def not_found(info: KindInfo, name: str) -> ApiStatusError:
    return ApiStatusError(404, f'{info.qualified} "{name}" not found', "NotFound", _details(info, name))


def resource_not_found() -> ApiStatusError:
    """What a path outside every served resource gets (e.g. a CRD that is not installed)."""
    return ApiStatusError(404, "the server could not find the requested resource", "NotFound", {})


def already_exists(info: KindInfo, name: str) -> ApiStatusError:
    return ApiStatusError(
        409, f'{info.qualified} "{name}" already exists', "AlreadyExists", _details(info, name)
    )


def conflict(info: KindInfo, name: str) -> ApiStatusError:
    return ApiStatusError(
        409,
        f'Operation cannot be fulfilled on {info.qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        _details(info, name),
    )


def invalid(info: KindInfo, name: str, field: str, cause_reason: str, detail: str) -> ApiStatusError:
    """422 Invalid with one cause, e.g. ``metadata.name``, ``FieldValueRequired``, ``Required value: ...``."""
    return ApiStatusError(
        422,
        f'{info.qualified_kind} "{name}" is invalid: {field}: {detail}',
        "Invalid",
        {
            "name": name,
            "group": info.group,
            "kind": info.kind,
            "causes": [{"reason": cause_reason, "message": detail, "field": field}],
        },
    )


def bad_request(message: str) -> ApiStatusError:
    return ApiStatusError(400, message, "BadRequest")


def expired(message: str) -> ApiStatusError:
    return ApiStatusError(410, message, "Expired")
