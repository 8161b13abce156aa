"""Translation's work grows linearly with the input, for every workload shape of the benchmark.

Work is counted, not timed: the Python function calls (generator steps
included) a full pass makes, at N and at 4N routes, arranged as each shape
of ``bench/controlplane_shapes.py`` arranges them. Linear work grows 4x; a
step that compares every virtual host with every other (as
``owned_virtual_hosts`` once did: 1.7 of 2.4 s at 2,000 hostnames) grows
16x and fails here long before it shows in a benchmark.

The ``tls`` shape is not among them: each HTTPS listener's route
configuration answers 421 for every other listener's hostname, so its
output itself grows with the square of the listeners (see
docs/performance.md).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest

from weir.loader import load_file
from weir.resources import Resources
from weir.translate import Settings, full_pass

SETTINGS = Settings(dns_resolvers=(("127.0.0.1", 5353),))
SHAPES_FILE = Path(__file__).resolve().parents[2] / "bench" / "controlplane_shapes.py"
SMALL, LARGE = 100, 400


def _shapes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("controlplane_shapes", SHAPES_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("controlplane_shapes", module)
    spec.loader.exec_module(module)
    return module


SHAPES = _shapes()


def shape_resources(shape: str, n: int, folder: Path) -> Resources:
    """The objects of ``shape`` at ``n`` routes, as the files provider would load them."""
    pki = SHAPES.make_pki(folder / "pki")
    SHAPES.SHAPES[shape].generate(folder / "world", n, [8080, 8081, 8082, 8083], 8443, pki)
    objects = []
    for path in sorted((folder / "world").rglob("*.yaml")):
        loaded, problems = load_file(path)
        assert not problems, problems
        objects += [item.object for item in loaded]
    return Resources.from_objects(objects)


def calls(fn: Callable[[], Any]) -> int:
    """How many Python calls (and generator steps) running ``fn`` makes."""
    count = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("shape", ["path", "host", "gateways"])
def test_a_full_pass_is_linear(shape: str, tmp_path: Path) -> None:
    small = shape_resources(shape, SMALL, tmp_path / "small")
    large = shape_resources(shape, LARGE, tmp_path / "large")
    ratio = calls(lambda: full_pass(large, SETTINGS)) / calls(lambda: full_pass(small, SETTINGS))
    # 4x the routes: 4x the work, and some slack for what grows with the log (sorting).
    assert ratio < 4 * 1.25, f"{shape}: {LARGE} routes cost {ratio:.1f}x the calls of {SMALL}"
