"""weir's log output: readable on a terminal, one unwrapped line per record elsewhere, or JSON.

* ``text`` on a terminal: ``rich``'s handler (colours, aligned columns).
* ``text`` anywhere else (a pod's log, a file, a pipe): one plain line per
  record, never wrapped, ``2026-01-02T03:04:05.678Z LEVEL logger: message``,
  so that ``grep`` finds a message and what it says on the same line.
* ``json``: one JSON object per line with the stable keys ``time`` (UTC, ISO
  8601 with milliseconds), ``level``, ``logger`` and ``message``, and
  ``exception`` when there is one.

The HTTP client's per-request lines (``HTTP Request: GET ... "HTTP/1.1 200
OK"``, logged at INFO by ``httpx2`` for every API call, Lease renewals
included) are DEBUG records in weir's log.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Literal

from rich.console import Console
from rich.logging import RichHandler

__all__ = ["FORMATS", "LogFormat", "setup"]

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")

#: Loggers of libraries that log every request at INFO.
_CHATTY = ("httpx2", "httpx")


def _timestamp(record: logging.LogRecord) -> str:
    when = dt.datetime.fromtimestamp(record.created, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z"


class PlainFormatter(logging.Formatter):
    """``TIME LEVEL logger: message`` on one line (a traceback, if any, follows on its own lines)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring for its keys)."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


class _Demoted(logging.Filter):
    """Turns a chatty library's INFO records into DEBUG ones, dropped below ``level``."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return record.levelno >= self.level


def setup(level: str, fmt: LogFormat = "text", console: Console | None = None) -> None:
    """Configure the root logger: ``level`` (a name, any case) and ``fmt`` (see the module docstring).

    ``console``: rich's console for ``text`` on a terminal (default: stderr's).
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    stream = console.file if console is not None else sys.stderr
    handler: logging.Handler
    if fmt == "text" and stream.isatty():
        handler = RichHandler(console=console or Console(stderr=True), show_path=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    logging.basicConfig(level=numeric, handlers=[handler], force=True)
    for name in _CHATTY:
        chatty = logging.getLogger(name)
        for old in [f for f in chatty.filters if isinstance(f, _Demoted)]:
            chatty.removeFilter(old)
        chatty.addFilter(_Demoted(numeric))
