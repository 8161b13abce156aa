"""weir's own phases in process, per workload shape and N, with growth exponents.

``python bench/controlplane_phases.py --shape host --n 100 1000 10000``
writes each shape's files (``bench/controlplane_shapes.py``), then in this
process: loads them (``FilesProvider.load``: YAML, validation, CEL), makes
the first translation and build, and recomputes single edits the way the
controller does (``Translator`` and ``BuildCache``): a route's address, its
XBackend's hostname, and a Secret or ConfigMap (``host``: the CA every
XBackend trusts; ``path`` and ``gateways``: the CA of one XBackend, after
that XBackend was pointed at it; ``tls``: a listener's certificate). Each
phase is timed in CPU seconds of this process (``time.process_time``) as
well as wall seconds, so that a machine shared with other work moves the
figures less; "k" is the exponent of cost ∝ N^k between the two largest N
(CPU time). No Envoy, no ``weir run``: ``bench/controlplane.py`` measures
those.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import controlplane_shapes as shapes

PORTS = [18080, 18081, 18082, 18083]
UPSTREAM_PORT = 18443
EDITS = ("address", "backend", "secret or configmap")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _edit_objects(kind: str, shape: Any, i: int, n: int, k: int, pki: Any, folder: Path) -> str:
    """The YAML one edit of ``kind`` writes (route ``i``, the ``k``-th edit)."""
    if kind == "address":
        return str(shape.route_yaml(i, n, UPSTREAM_PORT, version=k + 2))
    if kind == "backend":
        return str(shape.route_yaml(i, n, UPSTREAM_PORT, backend=k + 1))
    if shape.name == "tls":
        j = i % shape.listeners(n)
        leaf = pki.ca.issue_server_cert(f"t{j}.example")
        return (
            f"apiVersion: v1\nkind: Secret\nmetadata: {{name: c{j}, namespace: default}}\n"
            f"type: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{_indent(leaf.chain_pem)}"
            f"  tls.key: |\n{_indent(leaf.key_pem)}"
        )
    other = shapes.make_pki(folder / f"pki-{k}")
    name = shapes.CA_CONFIGMAP if shape.name == "host" else "ca-x0"
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\n"
        f"data:\n  ca.crt: |\n{_indent(other.ca_pem)}"
    )


def _config_file(shape_name: str, world: Path, i: int, n: int, shape: Any) -> Path:
    """The file holding the Secret or ConfigMap a ``secret or configmap`` edit rewrites."""
    if shape_name == "tls":
        return world / "certs" / f"c{i % shape.listeners(n):04d}.yaml"
    return world / ("gateway.yaml" if shape_name == "host" else "ca-x0.yaml")


def _indent(text: str) -> str:
    return "".join("    " + line for line in text.splitlines(keepends=True))


def _own_ca_xbackend() -> str:
    """XBackend ``x0`` trusting a CA of its own (ConfigMap ``ca-x0``): what a Secret or ConfigMap
    edit changes in the ``path`` and ``gateways`` shapes."""
    return (
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackend\n"
        "metadata: {name: x0, namespace: default}\nspec:\n  type: ExternalHostname\n"
        f"  externalHostname: {{hostname: x0.{shapes.ZONE}}}\n  port: {{port: {UPSTREAM_PORT}}}\n"
        f"  tls:\n    mode: ServerOnly\n    validation:\n      hostname: x0.{shapes.ZONE}\n"
        "      caCertificateRefs: [{group: '', kind: ConfigMap, name: ca-x0}]\n"
    )


def measure(shape_name: str, n: int, edits: int, workdir: Path) -> dict[str, Any]:
    from weir.loader import gc_paused
    from weir.providers.files.provider import FilesProvider
    from weir.translate import Settings
    from weir.translate.incremental import Translator
    from weir.xds.cache import BuildCache

    shape = shapes.SHAPES[shape_name]
    folder = workdir / f"{shape_name}-{n}"
    pki = shapes.make_pki(folder / "pki")
    world = folder / "world"
    shape.generate(world, n, PORTS, UPSTREAM_PORT, pki)
    if shape_name in ("path", "gateways"):  # x0 trusts a CA of its own, in ca-x0.yaml
        route = shape.route_yaml(0, n, UPSTREAM_PORT).split("---\n")[0]
        shapes.route_file(world, 0).write_text(route + "---\n" + _own_ca_xbackend())
        (world / "ca-x0.yaml").write_text(_edit_objects("secret or configmap", shape, 0, n, 0, pki, folder))
    settings = Settings(dns_resolvers=(("127.0.0.1", 53),))
    out: dict[str, Any] = {"n": n, "rss_imports": _rss_mib()}

    def timed(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        result = fn(*args)
        out[name] = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
        out[f"rss_{name}"] = _rss_mib()
        return result

    provider = FilesProvider([str(world)])
    with gc_paused(freeze=True):
        snapshot = timed("load", provider.load)
    with gc_paused():
        translator = Translator(settings)
        timed("translate", translator.translate, snapshot.resources)
        builder = BuildCache()
        timed("build", builder.build, translator.translate(snapshot.resources).ir)
    gc.freeze()
    rng = random.Random(7)
    for kind in EDITS:
        cpus: list[float] = []
        how: list[str] = []
        for k in range(edits):
            i = rng.randrange(n) if shape_name != "path" or kind != "secret or configmap" else 0
            path = shapes.route_file(world, i)
            text = _edit_objects(kind, shape, i, n, k + 1, pki, folder)
            if kind == "secret or configmap":
                path = _config_file(shape_name, world, i, n, shape)
                if shape_name == "host":  # the CA in the file it shares with the Gateway
                    pem = text.split("ca.crt: |\n", 1)[1]
                    text = path.read_text().replace(_indent(pki.ca_pem), pem)
            original = path.read_text()
            path.write_text(text)
            with gc_paused():
                cpu = time.process_time()
                provider._reload({str(path.resolve())})
                assert provider.snapshot is not None
                edited = translator.translate(provider.snapshot.resources)
                builder.build(edited.ir)
                cpus.append(time.process_time() - cpu)
            how.append(translator.last)
            path.write_text(original)
            provider._reload({str(path.resolve())})
        out[f"edit {kind}"] = {"cpu": statistics.median(cpus), "how": sorted(set(how))}
    out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def growth(small: float, large: float, n_small: int, n_large: int) -> str:
    if small <= 0 or large <= 0:
        return "-"
    return f"{math.log(large / small) / math.log(n_large / n_small):.2f}"


def table(shape_name: str, results: Sequence[dict[str, Any]]) -> str:
    ns = [r["n"] for r in results]
    head = "| phase (CPU s; wall s) | " + " | ".join(f"N = {n:,}" for n in ns) + " | k |\n"
    head += "|---|" + "---:|" * (len(ns) + 1) + "\n"
    lines = []
    for phase in ("load", "translate", "build", *(f"edit {k}" for k in EDITS)):
        cells = []
        for r in results:
            v = r[phase]
            cells.append(
                f"{v['cpu'] * 1000:.1f} ms ({', '.join(v['how'])})"
                if phase.startswith("edit")
                else f"{v['cpu']:.2f}; {v['wall']:.2f}"
            )
        k = "-"
        if len(ns) > 1:
            k = growth(results[-2][phase]["cpu"], results[-1][phase]["cpu"], ns[-2], ns[-1])
        lines.append(f"| {phase} | " + " | ".join(cells) + f" | {k} |")
    rss = " | ".join(f"{r['rss_load']:.0f} / {r['peak_rss']:.0f} MiB" for r in results)
    lines.append(f"| RSS after load / peak | {rss} | |")
    return f"{shape_name}:\n\n" + head + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", nargs="+", choices=sorted(shapes.SHAPES), default=["host"])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the raw results here")
    opts = parser.parse_args(argv)
    raw: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="weir-bench-phases-") as tmp:
        for shape_name in opts.shape:
            raw[shape_name] = []
            for n in sorted(opts.n):
                # Each N in a fresh process would be cleaner; one process keeps the script short,
                # and each N's objects are dropped before the next (gc.collect below).
                raw[shape_name].append(measure(shape_name, n, opts.edits, Path(tmp)))
                gc.unfreeze()
                gc.collect()
                print(f"{shape_name} N={n}: {json.dumps(raw[shape_name][-1])}", file=sys.stderr, flush=True)
            print(table(shape_name, raw[shape_name]))
    if opts.json is not None:
        opts.json.write_text(json.dumps(raw, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
