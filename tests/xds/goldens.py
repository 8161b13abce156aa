"""The golden IRs of the xDS build tests: ``testdata/NAME.ir.yaml``, one by one and merged.

A module of its own rather than ``conftest``: tests import these helpers, and
``import conftest`` finds whichever directory's conftest pytest loaded last
(``tests/e2e`` has one too).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from irdata import from_data

from weir import ir

TESTDATA = Path(__file__).parent / "testdata"


def golden_names() -> list[str]:
    """Names of the golden cases: ``testdata/NAME.ir.yaml``."""
    return sorted(p.name.removesuffix(".ir.yaml") for p in TESTDATA.glob("*.ir.yaml"))


def load_ir(name: str) -> ir.IR:
    return from_data(yaml.safe_load((TESTDATA / f"{name}.ir.yaml").read_text()))


def merge(irs: list[ir.IR]) -> ir.IR:
    """One IR holding every listener, upstream and secret of ``irs``.

    Names must not clash (the golden files are written so); the DNS settings
    are the first non-default ones.
    """
    merged = ir.IR(
        listeners=tuple(sorted((x for i in irs for x in i.listeners), key=lambda x: x.name)),
        upstreams=tuple(sorted((x for i in irs for x in i.upstreams), key=lambda x: x.name)),
        secrets=tuple(sorted((x for i in irs for x in i.secrets), key=lambda x: x.name)),
        dns=next((i.dns for i in irs if i.dns != ir.DnsSettings()), ir.DnsSettings()),
    )
    for kind in ("listeners", "upstreams", "secrets"):
        names = [x.name for x in getattr(merged, kind)]
        assert len(names) == len(set(names)), f"golden files reuse {kind} names"
    return merged
