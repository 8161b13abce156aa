"""weir.yamlsource: YAML read as Kubernetes reads it, quickly, with the same results either way.

The reader takes shortcuts that must not change what it reads: a text
without ``*`` is read without remembering nodes (no alias can share one), a
plain scalar whose first character starts no implicit tag is a string
without trying the YAML 1.1 patterns, and strings are interned.
"""

from __future__ import annotations

import random
import string
import subprocess
import sys

import pytest
import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from weir import yamlsource


def data(text: str) -> list[object]:
    return [value for _, value in yamlsource.compose(text)]


def error(text: str) -> tuple[int | None, str]:
    with pytest.raises(yaml.YAMLError) as caught:
        yamlsource.compose(text)
    return yamlsource.describe_error(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\nb: [x, {c: d}]\n",
        "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n",
        "<<: [{a: 1}, {a: 2, b: 3}]\nc: 4\n",
        "- &a [1]\n- *a\n",
        "x: [yes, no, on, off, Y, n, ~, null, '', 0x1F, 0o17, 017, 1_000, 1:20, .inf, 1e3, 3.5, +1]\n",
        "x: 2001-12-14\ny: !!str 12\nz: !!binary aGk=\n",
        "true: a\n2: b\n'1': c\n",
    ],
)
def test_reading_with_or_without_alias_bookkeeping_agrees(text: str) -> None:
    """The alias-free shortcut gives what the careful reading gives (on the same nodes)."""
    composer = yamlsource._Composer(text)
    nodes = []
    while composer.check_node():
        nodes.append(composer.get_node())
    composer.dispose()
    careful = [yamlsource._Constructor().construct(node, aliases=True) for node in nodes]
    if "*" not in text:
        quick = [yamlsource._Constructor().construct(node, aliases=False) for node in nodes]
        assert repr(quick) == repr(careful)
    assert repr(data(text)) == repr([d for d in careful if d is not None])


def test_aliases_share_the_value_and_recursion_is_an_error() -> None:
    (value,) = data("- &a [1]\n- *a\n- *a\n")
    assert isinstance(value, list)
    assert value[0] is value[1] is value[2]
    assert error("a: &a [*a]\n") == (1, "invalid YAML: found a recursive alias")
    assert error("a: &a {b: *a}\n") == (1, "invalid YAML: found a recursive alias")


def test_a_star_in_a_string_is_not_an_alias() -> None:
    assert data("x: 'a*b'\ny: a*b\nz: \"\\x2a\"\n") == [{"x": "a*b", "y": "a*b", "z": "*"}]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "a: 1\nb: {a: 1, a: 2}\n",
            (2, 'invalid YAML: mapping key "a" already defined at line 2 '
                "(while constructing a mapping started on line 2)"),
        ),
        (
            "x: 1\n1: a\n1.0: b\n",
            (3, 'invalid YAML: mapping key "1.0" already defined at line 2 '
                "(while constructing a mapping started on line 1)"),
        ),
        (
            "<<: {a: 1}\n? !!str 1\n: a\n'1': b\n",
            (4, 'invalid YAML: mapping key "1" already defined at line 2 '
                "(while constructing a mapping started on line 1)"),
        ),
        (
            "a: 1\nb: 2\na: 3\n[1]: 4\n",
            (3, 'invalid YAML: mapping key "a" already defined at line 1 '
                "(while constructing a mapping started on line 1)"),
        ),
        (
            "? [1]\n: x\n",
            (1, "invalid YAML: found an unhashable key (while constructing a mapping started on line 1)"),
        ),
    ],
)  # fmt: skip
def test_a_key_written_twice_names_the_first(text: str, expected: tuple[int, str]) -> None:
    assert error(text) == expected


def test_strings_are_shared_between_documents_and_files() -> None:
    first, second = data("kind: HTTPRoute\nns: default\n---\nkind: HTTPRoute\nns: default\n")
    (third,) = data("- HTTPRoute\n- default\n")
    assert isinstance(first, dict) and isinstance(second, dict) and isinstance(third, list)
    assert first["ns"] is second["ns"] is third[1]
    assert first["kind"] is second["kind"] is third[0]


_FIRSTS = sorted({k for k in Resolver.yaml_implicit_resolvers if k} | set("aXr/_é"))


def test_the_resolver_shortcut_gives_pyyamls_tags() -> None:
    """Every plain scalar gets the tag PyYAML's YAML 1.1 resolver gives it."""
    rng = random.Random(6)
    alphabet = string.ascii_letters + string.digits + "+-._:~<=!&*/ "
    words = ["", "~", "null", "Null", "yes", "No", "on", "OFF", "y", "n", "true", "0x1F", "0o17", "017",
             "1_000", "1:20", "12:30:00", "1.5", "-.inf", ".NaN", "1e3", "=", "<<", "2001-12-14",
             "2001-12-14T21:59:43.10-05:00", "!", "&", "*", "name", "r17", "/r17/v1"]  # fmt: skip
    words += [rng.choice(_FIRSTS) + "".join(rng.choices(alphabet, k=rng.randrange(6))) for _ in range(3000)]
    ours, theirs = yamlsource._Resolver(), Resolver()
    for word in words:
        for implicit in ((True, False), (False, True), (False, False)):
            assert ours.resolve(ScalarNode, word, implicit) == theirs.resolve(ScalarNode, word, implicit), (
                word,
                implicit,
            )
    assert ours.resolve(MappingNode, None, (True, False)) == "tag:yaml.org,2002:map"
    assert ours.resolve(SequenceNode, None, (True, False)) == "tag:yaml.org,2002:seq"


@pytest.mark.parametrize(
    "text",
    [
        "'a: ' + '[' * 40000 + ']' * 40000",  # flow nesting
        "'- ' * 25000 + 'x'",  # block sequences on one line
    ],
)
def test_nesting_too_deep_for_libyaml_is_a_problem_not_a_crash(text: str) -> None:
    """libyaml's composer overflows the C stack at about 25,000 levels (a segmentation fault that
    kills weir); such a text must come back as a problem naming the file. In a child process: a
    regression would kill the test process itself."""
    code = (
        "from weir.loader import parse_text\n"
        f"result = parse_text({text} + '\\n', 'deep.yaml')\n"
        "print(result.fatal)\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "deep.yaml: invalid YAML: nested too deeply"


FIELDS = """\
apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app.kubernetes.io/name: web
spec:
  ports:
  - name: http
    port: 80
  - {name: grpc,
     port: 0}
  selector: &sel {app: web}
  other: *sel
"""


@pytest.mark.parametrize(
    ("path", "line"),
    [
        (None, 1),  # the whole object: its first line
        ("metadata", 3),
        ("metadata.name", 4),
        ("metadata.labels[app.kubernetes.io/name]", 6),  # a map key with dots, bracketed
        ("spec.ports", 8),  # a mapping field: its key's line, not its value's
        ("spec.ports[0]", 9),  # a list item: the line it starts on
        ("spec.ports[0].port", 10),
        ("spec.ports[1].port", 12),  # flow style over two lines
        ("spec.ports[1].protocol", 11),  # not written: the deepest written part (the item)
        ("spec.ports[7].port", 8),  # past the end: the list
        ("spec.type", 7),  # not written: spec
        ("status.loadBalancer", 1),  # nothing of the path is written
        ("spec.other.app", 13),  # through an alias: where the anchored value is written
        ("spec.ports.name", 8),  # a name where an index belongs: stops at the list
    ],
)
def test_field_line_is_the_line_of_the_field_or_its_deepest_written_part(path: str | None, line: int) -> None:
    ((node, _),) = yamlsource.compose(FIELDS)
    assert yamlsource.field_line(node, path) == line
