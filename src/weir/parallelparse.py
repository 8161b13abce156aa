"""Parsing many files on two cores: a helper process parses chunks from the end while this one
parses from the start.

Used by the files provider and by :func:`weir.loader.load_paths` (``weir validate``, ``weir
translate``). Parsing (YAML, the schema, CEL rules) is pure Python and holds the GIL, so a
thread would not help; a second process does. It is worth it only for many
files: the helper needs about 0.8 s to start (a fresh interpreter importing
weir) and its results come back pickled. Below :data:`PARALLEL_MIN` files, or
on one core, everything is parsed here.

The helper is ``python -m weir.parallelparse``, not
:mod:`multiprocessing`: ``fork`` would copy the locks of weir's running
threads, and ``spawn`` imports the caller's ``__main__`` again (a script
without a main guard would start itself over). It reads chunks of
:data:`CHUNK` files from its stdin, the last chunk first, and writes each
chunk's results to its stdout, pickled (weir sends and reads only its own
pipes). This process parses from the first chunk on; where the two meet, the
rest is the helper's. Whatever the helper does not deliver (it failed to
start, died, wrote nonsense) is parsed here: the outcome is always exactly
:func:`weir.loader.parse_bytes` of each file, in order.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Any

from weir.loader import FileResult, parse_bytes

__all__ = ["CHUNK", "PARALLEL_MIN", "parse_all", "parse_chunk"]

log = logging.getLogger("weir.files")

#: Files below which everything is parsed in this process (about half a second of parsing:
#: less than the helper needs to start).
PARALLEL_MIN = 1_000
#: Files per chunk.
CHUNK = 200
_FRAME = struct.Struct("!Q")


def parse_all(items: Sequence[tuple[str, bytes]]) -> list[FileResult]:
    """``parse_bytes(raw, name)`` for each ``(name, raw)`` of ``items``, in order."""
    if len(items) < PARALLEL_MIN or _cores() < 2:
        return parse_chunk(items)
    chunks = [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]
    helper = _Helper.start(chunks)
    if helper is None:
        return parse_chunk(items)
    results: list[list[FileResult] | None] = [None] * len(chunks)
    try:
        mine = 0
        for i, chunk in enumerate(chunks):
            if helper.has(i):
                break  # the helper came this far from the end: the rest is its
            results[i] = parse_chunk(chunk)
            mine += 1
        for j in range(len(chunks)):
            if results[j] is None:
                results[j] = helper.wait(j)
                if results[j] is None:  # the helper stopped short of it
                    results[j] = parse_chunk(chunks[j])
                    mine += 1
    finally:
        helper.stop()
    log.debug("parsed %d files: %d of %d chunks here, the rest in a helper", len(items), mine, len(chunks))
    return [result for chunk_results in results if chunk_results is not None for result in chunk_results]


def parse_chunk(items: Sequence[tuple[str, bytes]]) -> list[FileResult]:
    """Each file of ``items`` parsed here."""
    return [parse_bytes(raw, name) for name, raw in items]


class _Helper:
    """The helper process, a thread feeding it chunks and one reading its results."""

    def __init__(self, proc: subprocess.Popen[bytes], chunks: list[Sequence[tuple[str, bytes]]]) -> None:
        self._proc = proc
        self._done: dict[int, list[FileResult]] = {}
        self._over = False  # the helper wrote its last result, or stopped
        self._changed = threading.Condition()
        self._writer = threading.Thread(target=self._write, args=(chunks,), daemon=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._writer.start()
        self._reader.start()

    #: The helper's command (tests put another here).
    command: tuple[str, ...] = (sys.executable, "-m", __name__)

    @classmethod
    def start(cls, chunks: list[Sequence[tuple[str, bytes]]]) -> _Helper | None:
        try:
            proc = subprocess.Popen(
                cls.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as exc:
            log.debug("parsing in one process: %s", exc)
            return None
        return cls(proc, chunks)

    def has(self, index: int) -> bool:
        with self._changed:
            return index in self._done

    def wait(self, index: int) -> list[FileResult] | None:
        """Chunk ``index``'s results from the helper; ``None`` if it will not deliver them."""
        with self._changed:
            while index not in self._done and not self._over:
                self._changed.wait()
            return self._done.get(index)

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def _write(self, chunks: list[Sequence[tuple[str, bytes]]]) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            for index in reversed(range(len(chunks))):
                _send(stdin, (index, list(chunks[index])))
            stdin.close()
        except (OSError, ValueError):  # it stopped, or was stopped: nothing more to give it
            return

    def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            while True:
                message = _receive(stdout)
                if message is None:
                    break
                index, results = message
                if not isinstance(index, int) or not isinstance(results, list):
                    break
                if not all(isinstance(r, FileResult) for r in results):
                    break
                with self._changed:
                    self._done[index] = results
                    self._changed.notify_all()
        except Exception as exc:  # a helper that died mid-frame: what it sent before still counts
            log.debug("the parsing helper stopped: %s", exc)
        with self._changed:
            self._over = True
            self._changed.notify_all()


def _send(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _serve() -> None:
    """The helper: parse each chunk read from stdin, write its results to stdout."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    gc.disable()  # as gc_paused: what parsing makes all survives; this process ends soon
    while True:
        message = _receive(stdin)
        if message is None:
            return
        index, items = message
        _send(stdout, (index, parse_chunk(items)))


if __name__ == "__main__":
    _serve()
