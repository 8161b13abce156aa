"""XBackends that trust the same certificates share one trusted-CA secret.

10,000 ServerOnly XBackends with their CA from one ConfigMap (the
benchmark's host shape) made 10,000 equal TrustedCA secrets, one per
XBackend, each an SDS secret for Envoy to load and keep.
"""

from __future__ import annotations

from pathlib import Path

from bench_shapes import generate

from weir import ir
from weir.resources import Resources
from weir.translate import Settings, translate

SETTINGS = Settings(dns_resolvers=(("127.0.0.1", 5353),))


def test_one_ca_for_every_xbackend_that_trusts_it(tmp_path: Path) -> None:
    objects, _ = generate("host", 5, tmp_path)
    result = translate(Resources.from_objects(objects.values()), SETTINGS)
    cas = [s for s in result.ir.secrets if isinstance(s, ir.TrustedCA)]
    assert len(cas) == 1
    assert len(result.ir.upstreams) == 5
    assert {u.tls.trusted_ca for u in result.ir.upstreams if u.tls is not None} == {cas[0].name}
