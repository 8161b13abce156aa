"""The control-plane benchmark's workload shapes (``bench/controlplane_shapes.py``) as objects, for
the translation tests that must hold for every shape."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from weir.api.meta import KubeObject, ObjectKey
from weir.loader import load_file, load_text

SHAPES_FILE = Path(__file__).resolve().parents[2] / "bench" / "controlplane_shapes.py"
#: listener ports the generated Gateways use (only the first few are taken)
PORTS = [8080, 8081, 8082, 8083]
UPSTREAM_PORT = 8443


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("controlplane_shapes", SHAPES_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("controlplane_shapes", module)
    spec.loader.exec_module(module)
    return module


shapes = _load()


def generate(shape: str, n: int, folder: Path) -> tuple[dict[ObjectKey, KubeObject], object]:
    """The objects of ``shape`` at ``n`` routes, read from the files the benchmark writes; and the
    run's PKI (to issue more certificates)."""
    pki = shapes.make_pki(folder / "pki")
    shapes.SHAPES[shape].generate(folder / "world", n, PORTS, UPSTREAM_PORT, pki)
    objects: dict[ObjectKey, KubeObject] = {}
    for path in sorted((folder / "world").rglob("*.yaml")):
        loaded, problems = load_file(path)
        assert not problems, problems
        objects.update((item.object.key, item.object) for item in loaded)
    return objects, pki


def parse(text: str) -> dict[ObjectKey, KubeObject]:
    loaded, problems = load_text(text, "edit.yaml")
    assert not problems, problems
    return {item.object.key: item.object for item in loaded}
