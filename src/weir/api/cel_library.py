"""The CEL engine weir uses, and the parts of Kubernetes' CEL environment it lacks.

:data:`engine` is the compiled module of ``common-expression-language``
(Python bindings of the Rust ``cel`` crate): ``compile``, ``Context``,
``OptionalValue``. :data:`LIBRARY` holds, by the name a rule uses, the
Kubernetes library functions that rules need (``format.dns1123Label()``,
``isIP``, string functions); :mod:`weir.api.cel` binds for each rule only
those it references.

The engine calls a library function with the receiver of a member call as
its first argument (``self.lowerAscii()`` → ``lowerAscii(self)``).
``format.xxx()`` are namespaced functions in Kubernetes; here ``format`` is a
variable and ``xxx`` a member function of it. A library function signals a
CEL error by raising :class:`CelError` (the engine prints such errors to
stderr; weir's own rules, run on schema-checked values, raise none).

Known differences from cel-go: ``size()`` of a string counts UTF-8 bytes, not
code points (no rule of weir's compares a non-ASCII size).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import ipaddress
import os
import re
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

__all__ = ["FORMATS", "LIBRARY", "CelError", "engine", "format_validate_or_null"]


# ------------------------------------------------------------------ the engine


def _load_engine() -> ModuleType:
    """The compiled module of ``common-expression-language`` (``cel.cel``).

    The package's ``__init__`` also imports its interactive REPL (typer,
    prompt_toolkit, pygments: ~140 ms), and ``xds-protos`` ships a ``cel``
    package of its own (``cel.expr``) whose empty ``__init__`` may overwrite
    it. Loading the extension module straight from the package folder avoids
    both; it is registered as ``cel.cel`` so a later ``import cel`` reuses it
    (a PyO3 module cannot be initialized twice).
    """
    if "cel.cel" in sys.modules:
        return sys.modules["cel.cel"]
    spec = importlib.util.find_spec("cel")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for name in sorted(os.listdir(folder)):
            if name.startswith("cel.") and name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                path = os.path.join(folder, name)
                loader = importlib.machinery.ExtensionFileLoader("cel.cel", path)
                module_spec = importlib.util.spec_from_file_location("cel.cel", path, loader=loader)
                if module_spec is None:
                    continue
                module = importlib.util.module_from_spec(module_spec)
                sys.modules["cel.cel"] = module
                loader.exec_module(module)
                return module
    from cel import cel as module  # the ordinary way, should the layout change

    return module


if TYPE_CHECKING:
    from cel import cel as engine
else:
    engine = _load_engine()


# ------------------------------------------------------------------ Kubernetes CEL libraries


_LIBRARY_KEY = "__k8s_library__"
#: The value bound to ``format``: Kubernetes' ``format.xxx()`` are namespaced
#: functions; the engine sees ``format`` as a variable and ``xxx`` as a member
#: function of it.
_FORMAT_LIBRARY = {_LIBRARY_KEY: "format"}

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + r"(\." + _DNS1123_LABEL_FMT + ")*"
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(f"^{_DNS1123_LABEL_FMT}$")
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_DNS1035_LABEL = re.compile(f"^{_DNS1035_LABEL_FMT}$")


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """k8s.io/apimachinery/pkg/util/validation ``RegexError``, spacing included."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return (
        msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"
    )


def _max_len(value: str, limit: int) -> list[str]:
    return [f"must be no more than {limit} characters"] if len(value.encode()) > limit else []


def _dns1123_label(value: str) -> list[str]:
    errors = _max_len(value, 63)
    if not _DNS1123_LABEL.match(value):
        if _DNS1123_SUBDOMAIN.match(value):
            errors.append("must not contain dots")
        else:
            errors.append(
                _regex_error(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                    "and must start and end with an alphanumeric character",
                    _DNS1123_LABEL_FMT,
                    "my-name",
                    "123-abc",
                )
            )
    return errors


def _dns1123_subdomain(value: str) -> list[str]:
    errors = _max_len(value, 253)
    if not _DNS1123_SUBDOMAIN.match(value):
        errors.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                "'.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errors


def _dns1035_label(value: str) -> list[str]:
    errors = _max_len(value, 63)
    if not _DNS1035_LABEL.match(value):
        errors.append(
            _regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                "alphabetic character, and end with an alphanumeric character",
                _DNS1035_LABEL_FMT,
                "my-name",
                "abc-123",
            )
        )
    return errors


#: Kubernetes' named formats (``format.<name>()``) that weir implements.
FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": _dns1123_label,
    "dns1123Subdomain": _dns1123_subdomain,
    "dns1035Label": _dns1035_label,
}


class CelError(Exception):
    """An error a library function reports to the CEL program (the rule then fails with it)."""


def _format_of(receiver: Any) -> str:
    if isinstance(receiver, Mapping) and receiver.get(_LIBRARY_KEY) in FORMATS:
        return str(receiver[_LIBRARY_KEY])
    raise CelError("no such overload")


def _format_function(name: str) -> Callable[[Any], dict[str, str]]:
    def get(receiver: Any) -> dict[str, str]:
        if receiver != _FORMAT_LIBRARY:
            raise CelError("no such overload")
        return {_LIBRARY_KEY: name}

    get.__name__ = name
    return get


def _format_named(receiver: Any, name: str) -> Any:
    if receiver != _FORMAT_LIBRARY:
        raise CelError("no such overload")
    return engine.OptionalValue.of({_LIBRARY_KEY: name}) if name in FORMATS else engine.OptionalValue.none()


def _format_validate(receiver: Any, value: Any) -> Any:
    """``<format>.validate(string) -> optional<list<string>>``: none when valid."""
    if not isinstance(value, str):
        raise CelError("no such overload")
    errors = FORMATS[_format_of(receiver)](value)
    return engine.OptionalValue.of(errors) if errors else engine.OptionalValue.none()


def format_validate_or_null(receiver: Any, value: Any) -> Any:
    """``validate`` for rules that compare its result with ``null``: null when valid, else the errors.

    Kubernetes' ``validate`` returns an optional, and in cel-go
    ``optional.none() == null`` is false: the XBackend v1.6 rule
    ``size(self) == 0 || format.dns1123Label().validate(self) == null``
    therefore rejects every non-empty port name on a real API server (fixed
    upstream in gateway-api#5193). weir reads such a rule as its authors
    meant it: a valid DNS label passes.
    """
    result = _format_validate(receiver, value)
    return result if result.has_value() else None


def _is_ip(value: Any) -> bool:
    """Kubernetes' ``isIP``: an IPv4 or IPv6 address, no zone, not IPv4-mapped, no leading zeros."""
    if not isinstance(value, str):
        raise CelError("no such overload")
    if "%" in value:
        return False
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return False
    return not (isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise CelError("no such overload")
    return value


def _lower_ascii(value: Any) -> str:
    return "".join(c.lower() if c.isascii() else c for c in _str(value))


def _upper_ascii(value: Any) -> str:
    return "".join(c.upper() if c.isascii() else c for c in _str(value))


def _trim(value: Any) -> str:
    return _str(value).strip()


def _split(value: Any, separator: Any, limit: int = -1) -> list[str]:
    text, sep = _str(value), _str(separator)
    if limit == 0:
        return []
    if sep == "":
        parts = list(text)
        if 0 < limit < len(parts):
            parts = [*parts[: limit - 1], "".join(parts[limit - 1 :])]
        return parts
    return text.split(sep, limit - 1 if limit > 0 else -1)


def _join(values: Any, separator: str = "") -> str:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise CelError("no such overload")
    return _str(separator).join(values)


def _replace(value: Any, old: Any, new: Any, limit: int = -1) -> str:
    return _str(value).replace(_str(old), _str(new), limit)


def _index_of(value: Any, needle: Any, offset: int = 0) -> int:
    text = _str(value)
    if not 0 <= offset <= len(text):
        raise CelError(f"index out of range: {offset}")
    return text.find(_str(needle), offset)


def _last_index_of(value: Any, needle: Any, offset: int | None = None) -> int:
    text, sub = _str(value), _str(needle)
    if offset is None:
        return text.rfind(sub)
    if not 0 <= offset < max(len(text), 1):
        raise CelError(f"index out of range: {offset}")
    return text.rfind(sub, 0, offset + len(sub))


def _substring(value: Any, start: int, end: int | None = None) -> str:
    text = _str(value)
    stop = len(text) if end is None else end
    if not 0 <= start <= len(text):
        raise CelError(f"index out of range: {start}")
    if not start <= stop <= len(text):
        raise CelError(f"index out of range: {stop}")
    return text[start:stop]


#: Functions and variables of Kubernetes' CEL environment that the engine
#: lacks, by the name a rule uses. A rule gets only those it references.
LIBRARY: dict[str, Any] = {
    "format": _FORMAT_LIBRARY,
    **{name: _format_function(name) for name in FORMATS},
    "named": _format_named,
    "validate": _format_validate,
    "isIP": _is_ip,
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "trim": _trim,
    "split": _split,
    "join": _join,
    "replace": _replace,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
}
