"""weir.streamdump and ``weir translate``: written as made, the same document as written at once."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from weir import DEFAULT_CONTROLLER_NAME, ir
from weir.cli import _settings, app, yaml_text
from weir.loader import load_paths
from weir.resources import Resources
from weir.streamdump import LazyList, LazyMap, write_json, write_yaml
from weir.translate import translate
from weir.translate.settings import DEFAULT_SYSTEM_TRUST_FILE
from weir.xds import build

TESTDATA = Path(__file__).resolve().parents[1] / "translate" / "testdata"

EAGER: dict[str, Any] = {
    "empty map": {},
    "empty list": [],
    "list": [{"a": 1, "b": [1, 2, {"c": "x: y"}]}, "text\nwith lines\n", None],
    "nested": {"deeper": {"deepest": [{"k": "v"}], "none": {}}, "a key: that needs quotes": True},
    "long": "word " * 60,
}


def lazy(value: Any) -> Any:
    """``value`` with every mapping and list lazy (made by generators)."""
    if isinstance(value, dict):
        return LazyMap((k, lazy(v)) for k, v in value.items())
    if isinstance(value, list):
        return LazyList(lazy(v) for v in value)
    return value


def test_json_is_byte_for_byte_what_json_dumps_gives() -> None:
    out = io.StringIO()
    write_json(lazy(EAGER), out.write)
    assert out.getvalue() == json.dumps(EAGER, indent=2) + "\n"


def test_yaml_is_the_same_document_and_the_same_text() -> None:
    out = io.StringIO()
    data = lazy(EAGER)
    assert isinstance(data, LazyMap)
    write_yaml(data, out.write, yaml_text)
    assert yaml.safe_load(out.getvalue()) == EAGER
    short = {k: v for k, v in EAGER.items() if k != "long"}  # folding counts columns: see the module
    out = io.StringIO()
    write_yaml(lazy(short), out.write, yaml_text)
    assert out.getvalue() == yaml_text(short)


@pytest.mark.parametrize("name", ["httproute-filters", "xbackend-tls", "gateway-certificates"])
@pytest.mark.parametrize("output", ["json", "yaml"])
def test_translate_prints_what_it_printed_all_at_once(name: str, output: str) -> None:
    path = TESTDATA / f"{name}.in.yaml"
    result = CliRunner().invoke(app, ["translate", "-f", str(path), "-o", output])
    report = load_paths([str(path)])
    resources = Resources.from_objects(item.object for item in report.objects)
    settings = _settings(DEFAULT_CONTROLLER_NAME, "127.0.0.1", [], DEFAULT_SYSTEM_TRUST_FILE)
    done = translate(resources, settings)
    eager = {
        "resources": [
            {
                "apiVersion": obj.api_version,
                "kind": obj.kind,
                "metadata": {"name": obj.name, **({"namespace": obj.namespace} if obj.namespace else {})},
                "status": done.statuses[key],
            }
            for key, obj in sorted(resources.objects.items())
            if key in done.statuses
        ],
        "problems": [p.to_data() for p in report.problems],
        "ir": ir.to_data(done.ir),
        "envoy": build.to_data(build.build(done.ir)),
    }
    if output == "json":
        assert result.stdout == json.dumps(eager, indent=2) + "\n"
    else:
        assert yaml.safe_load(result.stdout) == yaml.safe_load(yaml_text(eager))


def test_json_falls_back_to_the_standard_encoder_without_losing_lazy_parts() -> None:
    """Non-ASCII text (escaped as ``json`` escapes it) and integers beyond 64 bits (which orjson
    refuses) inside an eager part holding lazy ones: the lazy parts, made once by orjson, are
    still there when ``json`` encodes the part again."""
    eager = {"outer": [{"name": "café", "big": 2**70, "inner": {"k": [1, 2]}}]}
    made = []

    def items() -> Any:
        made.append(1)
        yield "k", LazyList(iter([1, 2]))

    data = LazyMap([("outer", [{"name": "café", "big": 2**70, "inner": LazyMap(items())}])])
    out = io.StringIO()
    write_json(data, out.write)
    assert out.getvalue() == json.dumps(eager, indent=2) + "\n"
    assert made == [1]
