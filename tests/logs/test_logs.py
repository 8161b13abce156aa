"""weir's log output off a terminal: one plain line per record, or one JSON object; the HTTP
client's per-request lines are DEBUG."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from rich.console import Console

from weir.logs import setup

LONG = "status of HTTPRoute team-a/a-route-with-a-long-name not written: 404 Not Found: " + "x" * 120


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()  # not a terminal
    yield out
    logging.basicConfig(force=True, handlers=[logging.NullHandler()])
    for name in ("httpx2", "httpx"):
        for f in list(logging.getLogger(name).filters):
            logging.getLogger(name).removeFilter(f)


def test_text_off_a_terminal_is_one_unwrapped_line_per_record(stream: io.StringIO) -> None:
    setup("info", "text", Console(file=stream))
    logging.getLogger("weir.kubernetes.status").warning("%s", LONG)
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(f" WARNING weir.kubernetes.status: {LONG}")
    assert line[:24].endswith("Z") and line[10] == "T"


def test_json_is_one_object_per_line_with_stable_keys(stream: io.StringIO) -> None:
    setup("info", "json", Console(file=stream))
    logging.getLogger("weir.kubernetes").error("two\nlines")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("weir").exception("failed")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert set(first) == {"time", "level", "logger", "message"}
    assert (first["level"], first["logger"], first["message"]) == ("ERROR", "weir.kubernetes", "two\nlines")
    assert "ValueError: boom" in second["exception"]


@pytest.mark.parametrize(("level", "shown"), [("info", False), ("debug", True)])
def test_the_http_clients_request_lines_are_debug(stream: io.StringIO, level: str, shown: bool) -> None:
    setup(level, "text", Console(file=stream))
    logging.getLogger("httpx2").info('HTTP Request: GET https://127.0.0.1/api "HTTP/1.1 200 OK"')
    logging.getLogger("httpx2").warning("a real warning")
    lines = stream.getvalue().splitlines()
    assert any(" DEBUG httpx2: HTTP Request:" in line for line in lines) is shown
    assert any(" WARNING httpx2: a real warning" in line for line in lines)


def test_bad_format_and_level_are_refused() -> None:
    with pytest.raises(ValueError, match="log format"):
        setup("info", "yaml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown log level"):
        setup("loud", "text")
