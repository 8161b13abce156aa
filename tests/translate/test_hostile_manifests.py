"""Fuzzing: mutated manifests give reported problems, never an exception, and spare their neighbours.

Hypothesis mutates real manifests (the golden inputs under
tests/translate/testdata and a valid manifest of every kind weir reads,
under tests/loader/testdata/loader/valid) at two levels:

* the data: any value replaced by a hostile one (wrong types, huge and
  special numbers, long and odd strings, deep nesting), keys dropped or
  added, ``kind``/``apiVersion`` swapped for another kind's;
* the text: YAML tags on values (``!!bool maybe``, ``!!int ""``,
  ``!!binary``, unknown tags ...), integers of thousands of digits, lines
  written twice (duplicate keys) or dropped, the text cut short, random
  text and bytes inserted, nesting thousands of levels deep.

Every mutated file is read (:func:`weir.loader.parse_bytes`), assembled after
a file of valid neighbours, translated and built into Envoy resources. Each
step must return, never raise; every problem names its file and says
something; no problem is the loader's last-resort "internal error"; the
valid neighbours (another file, and the documents before the mutated one in
its own file unless the file as a whole cannot be read) load as before.

Cost: the ``ci`` profile (the default) runs about 30 s in all. For a
release, run the long profile::

    WEIR_FUZZ=release python -m pytest tests/translate/test_hostile_manifests.py -q

(``WEIR_FUZZ_EXAMPLES=N`` sets the number of examples per test instead;
see docs/architecture.md, "Failure model").
"""

from __future__ import annotations

import copy
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weir.api import registry
from weir.api.meta import ObjectKey
from weir.loader import INTERNAL_ERROR, FileResult, Loaded, Problem, assemble, parse_bytes
from weir.providers.files.provider import FilesProvider
from weir.resources import Resources
from weir.translate import Settings, translate
from weir.translate.incremental import Translator
from weir.xds import build

ROOT = Path(__file__).parents[1]
SEEDS: list[tuple[str, list[Any]]] = []
for _path in sorted((ROOT / "translate" / "testdata").glob("*.in.yaml")) + sorted(
    (ROOT / "loader" / "testdata" / "loader" / "valid").glob("*.yaml")
):
    _docs = [d for d in yaml.safe_load_all(_path.read_text()) if isinstance(d, dict)]
    if _docs:
        SEEDS.append((_path.name, _docs))
KINDS = sorted({(m.API_VERSION, m.KIND) for m in registry.MODELS})


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return {str(k) for k in node} | {k for v in node.values() for k in _keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in _keys(v)}
    return set()


#: Field names weir reads (every key in the seeds), and those of status it may read.
FIELDS = sorted(
    {k for _, docs in SEEDS for k in _keys(docs)} | {"status", "parents", "ancestors", "loadBalancer"}
)
SETTINGS = Settings(
    dns_resolvers=(("127.0.0.1", 5353),),
    system_trust_file="/etc/ssl/certs/ca-certificates.crt",
    publish_service=("default", "web"),
)

_PROFILE = os.environ.get("WEIR_FUZZ", "ci")
_EXAMPLES = int(os.environ.get("WEIR_FUZZ_EXAMPLES", "0")) or {"ci": 0, "release": 20_000}.get(_PROFILE, 0)
if _EXAMPLES:  # a long run: no per-test time limit (pytest-timeout's 120 s is for the CI profile)
    pytestmark = pytest.mark.timeout(0)
settings.register_profile(
    "weir-fuzz",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=_PROFILE == "ci",  # the same examples in every CI run; a release run explores
    database=None,
)


def _examples(ci: int) -> int:
    return _EXAMPLES or ci


# ------------------------------------------------------------------ hostile values

_SCALARS = st.one_of(
    st.integers(),
    st.sampled_from([0, -1, 2**31, 2**63, 2**64, -(2**63) - 1, 10**100, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "*",
            "/",
            "..",
            "a" * 300,
            "x" * 70_000,
            "\x00",
            "\u202e",
            "😀",
            "-",
            "0",
            "true",
            "null",
            "~",
            "<<",
            "${HOME}",
            "%",
            "[a-z]+",
            "(",
            "\\",
            "a\nb",
            "http://example.test",
            "127.0.0.1",
            "::1",
            "10.0.0.0/8",
            "*.example.test",
            "Exact",
            "PathPrefix",
            "RegularExpression",
            "HTTP",
            "TLS",
            "gw",
            "default",
            "gateway.networking.k8s.io",
            "HTTPRoute",
            "XBackend",
            "Service",
            "Secret",
        ]
    ),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=12), st.sampled_from(FIELDS)),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


_STATUS_FIELDS = ["parents", "ancestors", "loadBalancer", "conditions", "addresses"]
_STATUS_ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "controllerName": st.one_of(st.just("other.example/controller"), _VALUES),
        "parentRef": st.one_of(st.just({"name": "gw"}), _VALUES),
        "ancestorRef": st.one_of(st.just({"name": "gw"}), _VALUES),
        "conditions": st.one_of(st.just([{"type": "Accepted", "status": "True"}]), _VALUES),
        "ingress": _VALUES,
    },
)
_STATUS_VALUES = st.one_of(_SCALARS, st.lists(st.one_of(_STATUS_ENTRY, _VALUES), max_size=3), _STATUS_ENTRY)
_STATUS = st.fixed_dictionaries({}, optional=dict.fromkeys(_STATUS_FIELDS, _STATUS_VALUES))


def _deep(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


_HOSTILE = st.one_of(_VALUES, st.integers(min_value=50, max_value=400).map(_deep))


def _fresh(value: Any) -> Any:
    """A copy of a drawn value that later mutations may change (``st.just`` gives one object always)."""
    return copy.deepcopy(value)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*path, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_paths(value, (*path, i)))
    return out


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        node = node[step]
    return node


@st.composite
def mutated_data(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` (a manifest's data) with one to three changes."""
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "replace", "replace", "drop", "add", "kind", "copy", "status"]))
        if op == "status" and isinstance(doc, dict):  # read as plain data: other controllers' entries
            doc = {
                **doc,
                "status": _fresh(draw(_STATUS)),
            }
            continue
        if op == "kind":
            api_version, kind = draw(st.sampled_from(KINDS))
            if isinstance(doc, dict):
                doc = {**doc, "apiVersion": api_version, "kind": kind}
            continue
        if not path:
            if op == "replace":
                doc = _fresh(draw(_HOSTILE))
            elif op == "add" and isinstance(doc, dict):
                doc[draw(st.one_of(st.sampled_from(FIELDS), st.text(max_size=20)))] = _fresh(draw(_HOSTILE))
            continue
        parent, last = _get(doc, path[:-1]), path[-1]
        if op == "replace":
            parent[last] = _fresh(draw(_HOSTILE))
        elif op == "drop":
            del parent[last]
        elif op == "add" and isinstance(_get(doc, path), dict):
            key = draw(st.one_of(st.sampled_from(FIELDS), st.text(max_size=20)))
            _get(doc, path)[key] = _fresh(draw(_HOSTILE))
        elif op == "copy" and isinstance(parent, list):
            parent.append(parent[last])
    return doc


# ------------------------------------------------------------------ text mutations

_TAGGED = [
    "!!bool maybe",
    "!!int abc",
    '!!int ""',
    "!!float x",
    "!!float",
    "!!binary '@'",
    "!!binary a",
    "!!binary aGk=",
    "!!timestamp 5",
    "!!timestamp [1]",
    "!!null x",
    "!!str [1]",
    "!!str {a: 1}",
    "!!int [1]",
    "!!bool {}",
    "!!set {a, b}",
    "!!set [1]",
    "!!omap [1]",
    "!!omap [{a: 1}, {a: 2}]",
    "!!pairs [{a: 1}]",
    "!!seq {a: 1}",
    "!!map [1]",
    "!!merge 5",
    "!custom x",
    "!<tag:x> 1",
    "!!python/object:os.system x",
    "!!python/name:os.system",
    "&a x",
    "*undefined",
    "&a [*a]",
    "9" * 4301,
    "-" + "9" * 5000,
    "0x" + "f" * 5000,
    "0b" + "1" * 20_000,
    "0o" + "7" * 5000,
    "1e999",
    "-1e999",
    ".nan",
    ".inf",
    "-.inf",
    "0o99",
    "1_0_0",
    "190:20:30",
    "1:2:3.5",
    "0x_",
    "+",
    "2001-12-14t21:59:43.10-05:00",
    "yes",
    "No",
    "~",
    "''",
    '"\\x00"',
    '"\\ud800"',
    "{<<: [1]}",
    "{<<: {a: 1}, a: 2}",
    "{? [1]: 2}",
    "{? {a: 1}: 2}",
    "[1, {a: 1, a: 2}]",
    "|\n  x\n y",
]


@st.composite
def mutated_text(draw: st.DrawFn, text: str) -> str:
    """``text`` (one document) with one or two textual changes."""
    for _ in range(draw(st.integers(1, 2))):
        lines = text.splitlines(keepends=True) or ["\n"]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["tag", "tag", "tag", "twice", "drop", "cut", "insert", "nest"]))
        if op == "tag":
            match = re.match(r"^(\s*(?:- )?[^:#]*:)( .*)?$", lines[i].rstrip("\n"))
            if match:
                lines[i] = f"{match.group(1)} {draw(st.sampled_from(_TAGGED))}\n"
            else:
                lines[i] = f"{lines[i].rstrip()} {draw(st.sampled_from(_TAGGED))}\n"
        elif op == "twice":
            lines.insert(i, lines[i])
        elif op == "drop":
            del lines[i]
        elif op == "cut":
            return "".join(lines)[: draw(st.integers(0, max(0, len(text) - 1)))]
        elif op == "insert":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.text(max_size=12)) + lines[i][at:]
        else:
            depth = draw(st.sampled_from([10, 100, 1000, 12_000]))
            lines[i] = f"{lines[i].rstrip()} {'[' * depth}{']' * depth}\n"
        text = "".join(lines)
    return text


# ------------------------------------------------------------------ the invariant


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 30)


def _check_problems(problems: list[Problem], files: set[str]) -> None:
    for problem in problems:
        assert problem.file in files, problem
        assert problem.message and isinstance(problem.message, str), problem
        assert INTERNAL_ERROR not in problem.message, str(problem)
        str(problem)  # it can be shown


def _translate_and_build(loaded: list[Loaded], before: list[Loaded]) -> None:
    resources = Resources.from_objects(item.object for item in loaded)
    result = translate(resources, SETTINGS)
    build.build(result.ir)
    # And as weir run does: a translation patched from the previous one.
    translator = Translator(SETTINGS)
    translator.translate(Resources.from_objects(item.object for item in before))
    build.build(translator.translate(resources).ir)


def check(neighbour_docs: list[Any], docs: list[Any], mutated: str | bytes) -> None:
    """The invariant: ``docs`` then the ``mutated`` document in one file, after a file of neighbours."""
    neighbours_text = "---\n".join(_dump(d) for d in neighbour_docs)
    prefix = "---\n".join(_dump(d) for d in docs)
    raw = mutated if isinstance(mutated, bytes) else mutated.encode("utf-8", "surrogatepass")
    content = prefix.encode() + (b"---\n" if prefix else b"") + raw
    neighbours = parse_bytes(neighbours_text.encode(), "neighbours.yaml")
    alone = parse_bytes(prefix.encode(), "f.yaml")
    result = parse_bytes(content, "f.yaml")
    assert isinstance(result, FileResult)
    loaded, problems = assemble([neighbours, result])
    _check_problems(problems, {"neighbours.yaml", "f.yaml"})
    expected, _ = assemble([neighbours])
    got = {(item.file, item.object.key): item.object for item in loaded}
    for item in expected:
        assert got.get((item.file, item.object.key)) == item.object, item.object.key
    if result.fatal is None:
        before, _ = assemble([neighbours, alone])
        taken: set[ObjectKey] = {item.object.key for item in expected}
        for item in before:
            if item.file == "f.yaml" and item.object.key not in taken:
                assert got.get(("f.yaml", item.object.key)) == item.object, item.object.key
    else:
        before = expected
    _translate_and_build(loaded, before)


# ------------------------------------------------------------------ the tests

seeds = st.sampled_from(SEEDS)


def _case(data: st.DataObject) -> tuple[list[Any], list[Any], int]:
    """Drawn: the documents of a neighbours' file, those of the file to mutate, and which to mutate."""
    neighbours = data.draw(seeds, label="neighbours")[1]
    docs = data.draw(seeds, label="seed")[1]
    return neighbours, docs, data.draw(st.integers(0, len(docs) - 1), label="document")


@settings(settings.get_profile("weir-fuzz"), max_examples=_examples(150))
@given(st.data())
def test_mutated_data_is_reported_never_raised(data: st.DataObject) -> None:
    neighbours, docs, i = _case(data)
    doc = data.draw(mutated_data(_copy(docs[i])), label="mutated")
    try:
        text = _dump(doc)
    except (yaml.YAMLError, RecursionError, ValueError):
        return  # not representable as YAML: nothing to read
    check(neighbours, docs[:i], text)


@settings(settings.get_profile("weir-fuzz"), max_examples=_examples(150))
@given(st.data())
def test_mutated_text_is_reported_never_raised(data: st.DataObject) -> None:
    neighbours, docs, i = _case(data)
    text = data.draw(mutated_text(_dump(docs[i])), label="mutated")
    check(neighbours, docs[:i], text)


@settings(settings.get_profile("weir-fuzz"), max_examples=_examples(60))
@given(st.data())
def test_random_bytes_are_reported_never_raised(data: st.DataObject) -> None:
    neighbours, docs, i = _case(data)
    text = _dump(docs[i]).encode()
    at = data.draw(st.integers(0, len(text)), label="at")
    junk = data.draw(st.binary(min_size=1, max_size=64), label="bytes")
    check(neighbours, docs[:i], text[:at] + junk + text[at:])


@settings(settings.get_profile("weir-fuzz"), max_examples=_examples(20))
@given(st.data())
def test_the_files_provider_takes_any_sequence_of_edits(data: st.DataObject) -> None:
    """The provider's own path (holds, duplicates, last valid versions) under mutated edits of one file.

    Each edit is read as a watcher would name it; reading never raises, and
    the objects of an untouched neighbour file are served throughout.
    """
    neighbours, docs, i = _case(data)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "a-neighbours.yaml").write_text("---\n".join(_dump(d) for d in neighbours))
        target = Path(folder, "f.yaml")
        target.write_text("---\n".join(_dump(d) for d in docs))
        provider = FilesProvider([folder], grace_s=data.draw(st.sampled_from([0.0, 60.0]), label="grace"))
        expected = {
            item.object.key
            for item in assemble([parse_bytes(Path(folder, "a-neighbours.yaml").read_bytes(), "n")])[0]
        }
        snapshot = provider.load()
        for _ in range(data.draw(st.integers(1, 3), label="edits")):
            mutated = data.draw(st.one_of(mutated_text(_dump(docs[i])), st.just("")), label="edit")
            target.write_bytes(
                ("---\n".join(_dump(d) for d in docs[:i]) + "---\n" + mutated).encode(
                    "utf-8", "surrogatepass"
                )
            )
            provider._reload({os.path.abspath(target)})
            snapshot = provider.snapshot or snapshot
            assert expected <= set(snapshot.resources.objects)
            _check_problems(list(snapshot.problems), {str(target), str(Path(folder, "a-neighbours.yaml"))})


def test_every_kind_weir_reads_is_a_seed() -> None:
    seeded = {doc.get("kind") for _, docs in SEEDS for doc in docs}
    assert {kind for _, kind in KINDS} <= seeded


def _copy(doc: Any) -> Any:
    return yaml.safe_load(_dump(doc))
