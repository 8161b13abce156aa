"""The Prometheus text format weir writes (weir.metrics): escaping, histograms, the strict reader.

Every rendered page is read back twice: by :func:`weir.metrics.parse` (strict:
structure as well as grammar) and by Prometheus' own Python parser
(``prometheus_client.parser``), so that the two cannot share a misreading.
"""

from __future__ import annotations

import math
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from weir.metrics import (
    CONTENT_TYPE,
    Counter,
    Histogram,
    MetricFamily,
    ParseError,
    Sample,
    gather,
    parse,
    render,
)


def prometheus_reads(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """``{family: [(sample name, labels, value)]}`` as Prometheus' parser reads ``text``."""
    return {
        family.name: [(s.name, dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


# --------------------------------------------------------------------------- render


def test_content_type_is_the_text_format_0_0_4() -> None:
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_label_values_and_help_are_escaped() -> None:
    family = MetricFamily(
        "weir_things_total",
        "counter",
        'Help with a backslash \\ and a\nnewline; quotes " stay.',
        (Sample({"path": 'C:\\dir\n"quoted"', "empty": ""}, 3),),
    )
    text = render([family])
    assert text == (
        '# HELP weir_things_total Help with a backslash \\\\ and a\\nnewline; quotes " stay.\n'
        "# TYPE weir_things_total counter\n"
        'weir_things_total{path="C:\\\\dir\\n\\"quoted\\"",empty=""} 3\n'
    )
    [back] = parse(text)
    assert back == family
    assert prometheus_reads(text) == {"weir_things": [("weir_things_total", family.samples[0].labels, 3.0)]}


def test_numbers() -> None:
    samples = tuple(
        Sample({"v": name}, value)
        for name, value in [
            ("int", 42),
            ("float", 0.25),
            ("big", 1e20),
            ("inf", math.inf),
            ("ninf", -math.inf),
        ]
    )
    text = render([MetricFamily("weir_x", "gauge", "x", samples)])
    assert [line.rsplit(" ", 1)[1] for line in text.splitlines()[2:]] == [
        "42",
        "0.25",
        "1e+20",
        "+Inf",
        "-Inf",
    ]
    nan = render([MetricFamily("weir_y", "gauge", "y", (Sample({}, math.nan),))])
    assert nan.endswith("weir_y NaN\n")
    assert math.isnan(parse(nan)[0].samples[0].value)


def test_histogram_buckets_are_cumulative_and_end_with_inf() -> None:
    histogram = Histogram("weir_wait_seconds", "Waits.", [0.1, 1, 10], ["type"])
    for value in (0.05, 0.1, 0.5, 3, 30):
        histogram.observe(value, "Cluster")
    histogram.observe(0.2, "Listener")
    text = render([histogram.collect()])
    assert text == (
        "# HELP weir_wait_seconds Waits.\n"
        "# TYPE weir_wait_seconds histogram\n"
        'weir_wait_seconds_bucket{type="Cluster",le="0.1"} 2\n'
        'weir_wait_seconds_bucket{type="Cluster",le="1.0"} 3\n'
        'weir_wait_seconds_bucket{type="Cluster",le="10.0"} 4\n'
        'weir_wait_seconds_bucket{type="Cluster",le="+Inf"} 5\n'
        'weir_wait_seconds_sum{type="Cluster"} 33.65\n'
        'weir_wait_seconds_count{type="Cluster"} 5\n'
        'weir_wait_seconds_bucket{type="Listener",le="0.1"} 0\n'
        'weir_wait_seconds_bucket{type="Listener",le="1.0"} 1\n'
        'weir_wait_seconds_bucket{type="Listener",le="10.0"} 1\n'
        'weir_wait_seconds_bucket{type="Listener",le="+Inf"} 1\n'
        'weir_wait_seconds_sum{type="Listener"} 0.2\n'
        'weir_wait_seconds_count{type="Listener"} 1\n'
    )
    assert histogram.count("Cluster") == 5
    parse(text)  # strict: cumulative, +Inf last, _count equals it
    read = prometheus_reads(text)["weir_wait_seconds"]
    assert ("weir_wait_seconds_bucket", {"type": "Cluster", "le": "+Inf"}, 5.0) in read


def test_histogram_and_counter_reject_misuse() -> None:
    with pytest.raises(ValueError, match="increasing"):
        Histogram("weir_h", "h", [1, 1])
    with pytest.raises(ValueError, match="'le'"):
        Histogram("weir_h", "h", [1], ["le"])
    with pytest.raises(ValueError, match="invalid metric name"):
        Counter("weir-dash_total", "c")
    counter = Counter("weir_c_total", "c", ["kind"])
    with pytest.raises(ValueError, match="only goes up"):
        counter.inc("a", amount=-1)
    with pytest.raises(ValueError, match="takes labels"):
        counter.inc()
    counter.touch("b")
    counter.inc("a", amount=2)
    assert render([counter.collect()]).splitlines()[2:] == [
        'weir_c_total{kind="a"} 2',
        'weir_c_total{kind="b"} 0',
    ]


# --------------------------------------------------------------------------- gather


def test_gather_keeps_good_families_when_a_collector_fails_or_misbehaves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = MetricFamily("weir_good", "gauge", "g", (Sample({}, 1),))

    def broken() -> list[MetricFamily]:
        raise RuntimeError("bug")

    def bad_families() -> list[MetricFamily]:
        return [
            MetricFamily("weir_good", "gauge", "again", ()),  # name taken
            MetricFamily("weir_bad_label", "gauge", "b", (Sample({"__reserved": "x"}, 1),)),
            MetricFamily("weir_bad_suffix", "counter", "b", (Sample({}, 1, "_bucket"),)),
            MetricFamily("weir_fine", "counter", "f", (Sample({}, 2),)),
        ]

    families = gather([lambda: [good], broken, bad_families])
    assert [f.name for f in families] == ["weir_good", "weir_fine"]
    assert "failed" in caplog.text and "weir_bad_label" in caplog.text and "weir_bad_suffix" in caplog.text


# --------------------------------------------------------------------------- parse (strict)

HIST = "# HELP weir_h H.\n# TYPE weir_h histogram\n"
GOOD = '# HELP weir_a_total A.\n# TYPE weir_a_total counter\nweir_a_total{x="1"} 1\n'


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("weir_a_total 1\n", "before its family"),
        ("# HELP weir_a A.\nweir_a 1\n", "before its family"),
        ("# TYPE weir_a gauge\n# HELP weir_a A.\n", "does not follow"),
        (GOOD + GOOD, "appears twice"),
        (GOOD + 'weir_a_total{x="1"} 2\n', "appears twice"),
        (GOOD.rstrip("\n"), "newline"),
        (GOOD + "\n", "empty line"),
        (GOOD.replace("} 1", "} -1"), "negative"),
        (GOOD.replace("} 1", "} one"), "invalid value"),
        (GOOD.replace('x="1"', 'x="\\t"'), "malformed labels"),
        (GOOD.replace('x="1"', 'x="1",x="2"'), "repeated"),
        (GOOD.replace('x="1"', 'x="1" y="2"'), "expected ','"),
        (GOOD.replace("weir_a_total{", "weir_b_total{"), "in family"),
        (GOOD.replace("counter", "summary"), "unknown type"),
        (GOOD.replace("A.", "A \\t"), "invalid escape"),
        (
            HIST + 'weir_h_bucket{le="1.0"} 1\nweir_h_sum 1\nweir_h_count 1\n',
            "+Inf",
        ),
        (
            HIST + 'weir_h_bucket{le="1.0"} 2\nweir_h_bucket{le="+Inf"} 1\nweir_h_sum 1\nweir_h_count 1\n',
            "cumulative",
        ),
        (
            HIST + 'weir_h_bucket{le="2.0"} 1\nweir_h_bucket{le="1.0"} 1\nweir_h_bucket{le="+Inf"} 1\n'
            "weir_h_sum 1\nweir_h_count 1\n",
            "increasing",
        ),
        (
            HIST + 'weir_h_bucket{le="+Inf"} 1\nweir_h_sum 1\nweir_h_count 2\n',
            "_count",
        ),
        (HIST + 'weir_h_bucket{le="+Inf"} 1\nweir_h_count 1\n', "_sum"),
        (HIST + "weir_h_bucket 1\n", "'le'"),
    ],
)
def test_parse_rejects(text: str, error: str) -> None:
    with pytest.raises(ParseError, match=error.replace("+", "\\+")):
        parse(text)


def test_parse_accepts_comments_timestamps_and_a_trailing_comma() -> None:
    text = "# a comment\n" + GOOD.replace('x="1"} 1', 'x="1",} 1 1700000000000')
    [family] = parse(text)
    assert family.samples == (Sample({"x": "1"}, 1.0),)


# --------------------------------------------------------------------------- round trip

_names = st.from_regex(r"weir_[a-z][a-z0-9_]{0,15}", fullmatch=True)
_label_names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
_label_values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)
_values = st.floats(allow_nan=False) | st.integers(min_value=-(10**12), max_value=10**12).map(float)


@st.composite
def _families(draw: st.DrawFn) -> list[MetricFamily]:
    names = draw(st.lists(_names, min_size=1, max_size=4, unique=True))
    families = []
    for name in names:
        label_names = draw(st.lists(_label_names, max_size=3, unique=True))
        label_sets = draw(st.lists(st.tuples(*[_label_values] * len(label_names)), max_size=4, unique=True))
        kind = draw(st.sampled_from(["gauge", "counter", "untyped"]))
        samples = tuple(
            Sample(
                dict(zip(label_names, values, strict=True)),
                abs(draw(_values)) if kind == "counter" else draw(_values),
            )
            for values in label_sets
        )
        help_text = draw(st.text(alphabet=string.printable, max_size=30))
        families.append(MetricFamily(name, kind, help_text, samples))
    return families


@settings(max_examples=300, deadline=None)
@given(_families())
def test_render_then_parse_gives_back_the_families(families: list[MetricFamily]) -> None:
    text = render(families)
    assert parse(text) == families
    read = prometheus_reads(text)
    for family in families:
        name = family.name.removesuffix("_total") if family.type == "counter" else family.name
        assert [(labels, value) for _, labels, value in read[name]] == [
            (dict(s.labels), s.value) for s in family.samples
        ]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=30),
    st.lists(st.floats(min_value=0.001, max_value=50), min_size=1, max_size=6, unique=True),
)
def test_any_histogram_is_well_formed(values: list[float], bounds: list[float]) -> None:
    histogram = Histogram("weir_any_seconds", "h", sorted(bounds))
    for value in values:
        histogram.observe(value)
    text = render([histogram.collect()])
    [family] = parse(text)
    if values:
        buckets = [s for s in family.samples if s.name_suffix == "_bucket"]
        assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == len(values)
        for sample in buckets[:-1]:
            assert sample.value == sum(1 for v in values if v <= float(sample.labels["le"]))
