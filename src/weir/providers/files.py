"""The files provider: manifests in files and folders, watched, reloaded on change.

:meth:`FilesProvider.load` reads everything once; :meth:`FilesProvider.watch`
then yields a new :class:`Snapshot` after each batch of changes that alters
what is served. Only files whose stat (mtime, size, inode) changed, or that
an event names, are read again, and only those whose content hash changed
are parsed again.

Bad input never takes down good traffic:

* a file that stops parsing keeps serving the objects it last served, until
  it parses again;
* an object that becomes invalid keeps its last valid version (as the API
  server keeps the stored object when it rejects an update); an object that
  was never valid is skipped;
* a file or an object that is deleted disappears;
* everything else is served.

Every standing problem is in :attr:`Snapshot.problems`; each new one is
logged once on the ``weir.files`` logger.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

import watchfiles

from weir.api.meta import KubeObject, ObjectKey
from weir.loader import (
    Assembler,
    FileResult,
    Loaded,
    Problem,
    gc_paused,
    manifest_files,
    parse_bytes,
)
from weir.resources import Resources

__all__ = ["FilesProvider", "Snapshot"]

log = logging.getLogger("weir.files")

#: Appended to a YAML error when the file's previous objects are still served.
KEPT_FILE = "kept the last valid objects from this file"
#: Appended to an object's problems when its last valid version is still served.
KEPT_OBJECT = "kept the last valid version"


@dataclass(frozen=True)
class Snapshot:
    """What the files currently say, as served.

    ``problems`` holds every problem standing now (including the notices that
    a last valid version is being kept); ``origins`` gives the file and
    1-based line each served object comes from.
    """

    resources: Resources
    problems: tuple[Problem, ...]
    origins: Mapping[ObjectKey, tuple[str, int]]

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "warning")


@dataclass(frozen=True)
class _Cached:
    stat: tuple[int, int, int]  # mtime_ns, size, inode
    digest: bytes
    result: FileResult


_Fingerprint = tuple[tuple[tuple[str, bytes], ...], tuple[Problem, ...]]


class FilesProvider:
    """Serves the objects in ``paths`` (files, and folders read recursively)."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]], *, debounce_ms: int = 50) -> None:
        if not paths:
            raise ValueError("FilesProvider needs at least one file or folder")
        self._paths: tuple[Path, ...] = tuple(Path(p) for p in paths)
        self._debounce_ms = max(1, int(debounce_ms))
        self._cache: dict[str, _Cached] = {}
        self._served_by_file: dict[str, tuple[Loaded, ...]] = {}
        self._last_valid: dict[ObjectKey, KubeObject] = {}
        self._logged: set[tuple[str, str, str | None, str | None, str]] = set()
        self._fingerprint: _Fingerprint | None = None
        self._snapshot: Snapshot | None = None

    @property
    def paths(self) -> tuple[Path, ...]:
        return self._paths

    @property
    def snapshot(self) -> Snapshot | None:
        """The last snapshot returned by :meth:`load` or yielded by :meth:`watch`."""
        return self._snapshot

    # -------------------------------------------------------------- public

    def load(self) -> Snapshot:
        """Read every file now (re-reading only what changed since the last read)."""
        self._reload(set())
        assert self._snapshot is not None
        return self._snapshot

    async def watch(self) -> AsyncIterator[Snapshot]:
        """Yield a new snapshot after each batch of changes that alters what is served.

        If :meth:`load` was not called, the first snapshot is yielded at once.
        Changes made between :meth:`load` and the start of watching are
        caught. A folder given that is deleted and created again is watched
        again. Cancel the consuming task (or ``aclose()`` the iterator) to
        stop; the watchers stop with it.
        """
        if self._snapshot is None:
            yield self.load()
        queue: asyncio.Queue[set[str] | None] = asyncio.Queue()
        watchers = _Watchers(self._debounce_ms, queue)
        try:
            plan = self._watch_plan()
            await watchers.start(plan)
            changed_since = await asyncio.to_thread(self._reload, set())
            while True:
                if changed_since:
                    assert self._snapshot is not None
                    yield self._snapshot
                changed, rearm = await _next_batch(queue)
                changed_since = await asyncio.to_thread(self._reload, changed)
                new_plan = self._watch_plan()
                if rearm or new_plan != plan:
                    # A folder appeared or vanished (or a watcher failed): watch what exists
                    # now, then read again what may have changed while re-arming.
                    plan = new_plan
                    await watchers.start(plan)
                    changed_since |= await asyncio.to_thread(self._reload, set())
        finally:
            await watchers.stop()

    # -------------------------------------------------------------- watching

    def _watch_plan(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(folders watched recursively, folders watched without their subfolders).

        A folder given is watched recursively, and its parent without
        subfolders (to see it deleted and created again); for a file given (or
        a path that does not exist yet), its folder is watched without
        subfolders.
        """
        trees: list[str] = []
        flat: list[str] = []
        for path in self._paths:
            absolute = os.path.abspath(path)
            if os.path.isdir(absolute):
                trees.append(absolute)
            parent = os.path.dirname(absolute)
            if os.path.isdir(parent):
                flat.append(parent)
        return tuple(sorted(set(trees))), tuple(sorted(set(flat)))

    # -------------------------------------------------------------- reading
    # -------------------------------------------------------------- reading

    def _reload(self, changed: set[str]) -> bool:
        """Refresh from disk; True if a new snapshot was made (what is served may have changed)."""
        with gc_paused():
            return self._refresh(changed)

    def _refresh(self, changed: set[str]) -> bool:
        files, missing = manifest_files(self._paths)
        cache: dict[str, _Cached] = {}
        reread = 0
        for path in files:
            name = str(path)
            try:
                st = os.stat(path)
            except OSError:
                continue  # gone between listing and stat: treat as deleted
            stat = (st.st_mtime_ns, st.st_size, st.st_ino)
            cached = self._cache.get(name)
            if cached is not None and cached.stat == stat and os.path.abspath(name) not in changed:
                cache[name] = cached
                continue
            try:
                raw = path.read_bytes()
            except OSError as err:
                problem = Problem("error", name, None, None, None, f"cannot read: {err.strerror}")
                cache[name] = _Cached(stat, b"", FileResult(name, (), problem))
                continue
            digest = hashlib.blake2b(raw, digest_size=16).digest()
            if cached is not None and cached.digest == digest:
                cache[name] = replace(cached, stat=stat)
                continue
            reread += 1
            cache[name] = _Cached(stat, digest, parse_bytes(raw, name))
        self._cache = cache
        fingerprint: _Fingerprint = (
            tuple((name, c.digest) for name, c in cache.items()),
            tuple(missing),
        )
        if self._snapshot is not None and fingerprint == self._fingerprint:
            return False
        self._fingerprint = fingerprint
        self._snapshot = self._build(missing)
        log.debug("re-read %d file(s)", reread)
        self._log_problems(self._snapshot.problems)
        log.info(
            "serving %d objects from %d files (%d errors, %d warnings)",
            len(self._snapshot.resources),
            len(cache),
            len(self._snapshot.errors),
            len(self._snapshot.warnings),
        )
        return True

    def _build(self, missing: list[Problem]) -> Snapshot:
        asm = Assembler()
        asm.problem(*missing)
        served: list[Loaded] = []
        served_by_file: dict[str, tuple[Loaded, ...]] = {}
        for file, cached in self._cache.items():
            result = cached.result
            from_file: list[Loaded] = []
            if result.fatal is not None:
                # Unreadable now: keep serving what this file served last time.
                kept = self._served_by_file.get(file, ())
                fatal = result.fatal
                if kept:
                    fatal = replace(fatal, message=f"{fatal.message}: {KEPT_FILE}")
                asm.problem(fatal)
                for loaded in kept:
                    if asm.claim(loaded.object.key, loaded.file, loaded.line):
                        from_file.append(loaded)
            else:
                for doc in result.documents:
                    if doc.unknown is not None:
                        asm.unknown(doc, file)
                        continue
                    if doc.key is not None and not asm.claim(doc.key, file, doc.line, doc.label):
                        continue
                    if doc.loaded is not None:
                        asm.problem(*doc.problems)
                        from_file.append(doc.loaded)
                        continue
                    last = self._last_valid.get(doc.key) if doc.key is not None else None
                    if last is None:  # never valid: skipped
                        asm.problem(*doc.problems)
                        continue
                    asm.problem(*(replace(p, message=f"{p.message}: {KEPT_OBJECT}") for p in doc.problems))
                    from_file.append(Loaded(last, file, doc.line))
            served_by_file[file] = tuple(from_file)
            served.extend(from_file)

        # Forget what is no longer served: a deleted object that comes back invalid was never valid.
        self._served_by_file = served_by_file
        self._last_valid = {loaded.object.key: loaded.object for loaded in served}
        return Snapshot(
            resources=Resources.from_objects(loaded.object for loaded in served),
            problems=tuple(asm.problems()),
            origins=MappingProxyType({loaded.object.key: (loaded.file, loaded.line) for loaded in served}),
        )

    def _log_problems(self, problems: Sequence[Problem]) -> None:
        """Log each problem the first time it stands (lines may move; the problem is the same)."""
        standing: set[tuple[str, str, str | None, str | None, str]] = {
            (p.severity, p.file, p.object, p.field, p.message) for p in problems
        }
        for problem in problems:
            ident = (problem.severity, problem.file, problem.object, problem.field, problem.message)
            if ident not in self._logged:
                log.log(logging.ERROR if problem.severity == "error" else logging.WARNING, "%s", problem)
        self._logged = standing


async def _next_batch(queue: asyncio.Queue[set[str] | None]) -> tuple[set[str], bool]:
    """Wait for changes, then take every batch already queued: (paths changed, re-arm needed)."""
    changed: set[str] = set()
    rearm = False
    item = await queue.get()
    while True:
        if item is None:
            rearm = True
        else:
            changed |= item
        if queue.empty():
            return changed, rearm
        item = queue.get_nowait()


class _Watchers:
    """The ``watchfiles.awatch`` loops for one watch plan, each feeding ``queue``.

    A batch of changed paths is put on the queue; ``None`` means a watcher
    failed and the plan should be re-armed.
    """

    def __init__(self, debounce_ms: int, queue: asyncio.Queue[set[str] | None]) -> None:
        self._debounce_ms = debounce_ms
        self._queue = queue
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, plan: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
        await self.stop()
        self._stop = asyncio.Event()
        trees, flat = plan
        for name, roots, recursive in (("trees", trees, True), ("folders", flat, False)):
            if roots:
                task = asyncio.create_task(self._pump(roots, recursive), name=f"weir.files:{name}")
                self._tasks.append(task)
        # Each awatch registers with the OS on its first step; let them take it, so that
        # the caller's catch-up read happens after watching has begun.
        for _ in range(3):
            await asyncio.sleep(0)

    async def stop(self) -> None:
        self._stop.set()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _pump(self, roots: tuple[str, ...], recursive: bool) -> None:
        try:
            async for changes in watchfiles.awatch(
                *roots,
                debounce=self._debounce_ms,
                step=min(50, self._debounce_ms),
                stop_event=self._stop,
                recursive=recursive,
            ):
                self._queue.put_nowait({path for _, path in changes})
        except asyncio.CancelledError:
            raise
        except Exception as err:  # e.g. a folder deleted just before watching it
            log.warning("watching %s failed (%s); watching again in 1s", ", ".join(roots), err)
            await asyncio.sleep(1.0)
            self._queue.put_nowait(None)
