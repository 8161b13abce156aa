"""Providers read the API model and hand snapshots to the controller; they never import translation
(data moves one way: what both need, such as the XBackend selector label and its status shapes,
lives in weir.api, or beside it as weir.infrastructure, the per-Gateway Services' facts)."""

from __future__ import annotations

import ast
from pathlib import Path

import weir.providers

PROVIDERS = Path(weir.providers.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_providers_do_not_import_translate() -> None:
    files = sorted(PROVIDERS.rglob("*.py"))
    assert len(files) > 5
    offenders = {
        str(path.relative_to(PROVIDERS)): sorted(m for m in _imports(path) if m.startswith("weir.translate"))
        for path in files
    }
    assert {name: mods for name, mods in offenders.items() if mods} == {}
