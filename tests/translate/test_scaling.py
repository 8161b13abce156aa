"""Translation's work grows linearly with the input, and an edit's not at all, in the workload shapes
of the benchmark.

Work is counted, not timed: the Python function calls (generator steps
included) a full pass makes, at N and at 4N routes, arranged as each shape
of ``bench/controlplane_shapes.py`` arranges them. Linear work grows 4x; a
step that compares every virtual host with every other (as
``owned_virtual_hosts`` once did: 1.7 of 2.4 s at 2,000 hostnames) grows
16x and fails here long before it shows in a benchmark.

An edit (one route's new hostname or path) is counted the same way: its
calls must not grow with the number of routes. The ``path`` shape is not
among those (its four virtual hosts of N/4 routes each: the edited one is
assembled again). The ``tls`` shape (as many HTTPS listeners as routes up
to 1,000) is among both: each listener's route configuration once answered
421 for every other listener's hostname, listeners squared (see
docs/performance.md); now it names only what its own hostname covers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from bench_shapes import UPSTREAM_PORT, generate, parse, shapes

from weir.resources import Resources
from weir.translate import Settings, full_pass
from weir.translate.incremental import Translator

SETTINGS = Settings(dns_resolvers=(("127.0.0.1", 5353),))
SMALL, LARGE = 100, 400


def shape_resources(shape: str, n: int, folder: Path) -> Resources:
    """The objects of ``shape`` at ``n`` routes, as the files provider would load them."""
    return Resources.from_objects(generate(shape, n, folder)[0].values())


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


@pytest.mark.parametrize("shape", ["path", "host", "gateways", "tls"])
def test_a_full_pass_is_linear(shape: str, tmp_path: Path) -> None:
    small = shape_resources(shape, SMALL, tmp_path / "small")
    large = shape_resources(shape, LARGE, tmp_path / "large")
    ratio = calls(lambda: full_pass(large, SETTINGS)) / calls(lambda: full_pass(small, SETTINGS))
    # 4x the routes: 4x the work, and some slack for what grows with the log (sorting).
    assert ratio < 4 * 1.25, f"{shape}: {LARGE} routes cost {ratio:.1f}x the calls of {SMALL}"


def edit_calls(shape_name: str, n: int, folder: Path) -> int:
    """The calls of translating one route's new address (hostname or path) after a full pass and
    one edit of another route (the first patch of a socket lists its listeners once, for the
    owners of its names; later ones do not)."""
    objects, _ = generate(shape_name, n, folder)
    resources = Resources.from_objects(objects.values())
    translator = Translator(SETTINGS)
    translator.translate(resources)
    shape = shapes.SHAPES[shape_name]
    warm = resources.with_changes(parse(shape.route_yaml(n // 2 + 1, n, UPSTREAM_PORT, version=2)), set())
    translator.translate(warm)
    edited = warm.with_changes(parse(shape.route_yaml(n // 2, n, UPSTREAM_PORT, version=2)), set())
    count = calls(lambda: translator.translate(edited))
    assert translator.last == "patched"
    return count


@pytest.mark.parametrize("shape", ["host", "gateways", "tls"])
def test_an_edit_costs_the_same_at_any_size(shape: str, tmp_path: Path) -> None:
    ratio = edit_calls(shape, LARGE, tmp_path / "large") / edit_calls(shape, SMALL, tmp_path / "small")
    assert ratio < 1.5, f"{shape}: one edit among {LARGE} routes cost {ratio:.1f}x the calls of {SMALL}"
