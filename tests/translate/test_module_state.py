"""Translation is pure: no module of :mod:`weir.translate` keeps mutable state between calls.

A module-level dict, list or set, or an ``lru_cache``, is state that one
translation leaves behind for the next and that nothing stops a caller from
mutating (a status dict shared through a module cache was exactly that).
Sharing within one pass goes through the pass's
:class:`weir.translate.status.StatusInterner` instead.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import weir.translate

#: Memo caches of pure functions whose arguments and results are immutable (strings, tuples, None):
#: what they keep cannot change a result or be changed by a caller. Adding one needs that argument.
PURE_MEMOS = {
    ("weir.translate.filters", "regex_problem"),  # RE2 verdict on a pattern: str | None
    ("weir.translate.egress", "_normalise_networks"),  # tuple[str, ...] -> tuple[str, ...]
}

MUTABLE = (dict, list, set, bytearray)


def _modules() -> Iterator[tuple[str, Path]]:
    package = Path(weir.translate.__file__).parent
    yield "weir.translate", package / "__init__.py"
    for info in pkgutil.iter_modules([str(package)]):
        yield f"weir.translate.{info.name}", package / f"{info.name}.py"


def _top_level_names(source: str) -> Iterator[str]:
    for node in ast.parse(source).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    yield name.id


def _state(module: Any, name: str) -> str | None:
    value = getattr(module, name, None)
    if name == "__all__":
        return None
    if isinstance(value, MUTABLE):
        return f"a module-level {type(value).__name__}"
    if callable(value) and hasattr(value, "cache_info"):
        return "a module-level cache (functools.lru_cache / cache)"
    return None


def test_translate_modules_keep_no_mutable_state() -> None:
    found = []
    for module_name, path in _modules():
        module = importlib.import_module(module_name)
        for name in _top_level_names(path.read_text()):
            why = _state(module, name)
            if why is not None and (module_name, name) not in PURE_MEMOS:
                found.append(f"{module_name}.{name}: {why}")
    assert not found, "translation must not keep state between calls:\n" + "\n".join(found)


def test_the_check_sees_mutable_state() -> None:
    """The check itself: a dict, a set and an lru_cache at module level are found."""
    import functools
    import types

    fake = types.ModuleType("fake")
    fake.TABLE = {}  # type: ignore[attr-defined]
    fake.SEEN = set()  # type: ignore[attr-defined]
    fake.memo = functools.lru_cache(maxsize=1)(lambda x: x)  # type: ignore[attr-defined]
    fake.LIMIT = 3  # type: ignore[attr-defined]
    source = "TABLE = {}\nSEEN: set[str] = set()\nmemo = None\nLIMIT = 3\n"
    verdicts = {name: _state(fake, name) for name in _top_level_names(source)}
    assert verdicts["TABLE"] and verdicts["SEEN"] and verdicts["memo"]
    assert verdicts["LIMIT"] is None
