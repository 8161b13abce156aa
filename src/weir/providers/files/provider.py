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
* a change made in place that would withdraw objects from a file (it is
  empty, or no longer names one of them: ``cp`` and ``>`` truncate, then
  write) is held until the file has been unchanged for
  :data:`REWRITE_GRACE_S`;
* when two files define one object, the one already served keeps serving
  and the other definition is the error (at start, the first in reading
  order wins);
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
import time
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
    read_bytes,
    unreadable,
)
from weir.parallelparse import parse_all
from weir.providers.files.parsecache import ParseCache
from weir.resources import Resources, copy_mapping

__all__ = ["FilesProvider", "Snapshot"]

log = logging.getLogger("weir.files")

#: Appended to a YAML error when the file's previous objects are still served.
KEPT_FILE = "kept the last valid objects from this file"
#: Appended to an object's problems when its last valid version is still served.
KEPT_OBJECT = "kept the last valid version"
#: How long a file rewritten in place must stay unchanged before a change of it that withdraws
#: objects is served (see FilesProvider._hold): ``cp`` and ``>`` leave it empty, then half
#: written, for a moment.
REWRITE_GRACE_S = 1.0
#: When the parse cache is written, if files changed: after the start, not during it (pickling
#: 10,000 files' results costs about a second of CPU while Envoy takes in their configuration):
#: this many seconds per file read after watching starts, at most CACHE_SAVE_AFTER_S; then every
#: CACHE_SAVE_EVERY_S.
CACHE_SAVE_AFTER_S_PER_FILE = 0.001
CACHE_SAVE_AFTER_S = 10.0
CACHE_SAVE_EVERY_S = 300.0


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
    #: Keys whose object was added, replaced or removed since the previous
    #: snapshot (every key for the first one).
    changed: frozenset[ObjectKey] = frozenset()

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity == "warning")


@dataclass(frozen=True, slots=True)
class _Cached:
    stat: tuple[int, int, int]  # mtime_ns, size, inode
    digest: bytes
    result: FileResult


@dataclass(frozen=True, slots=True)
class _ToParse:
    """A file read whose bytes are to be parsed (then it becomes a :class:`_Cached`)."""

    stat: tuple[int, int, int]
    digest: bytes
    raw: bytes


@dataclass(frozen=True, slots=True)
class _Segment:
    """What one file contributed to the last snapshot.

    ``keys``: every key its documents name, valid or not, or that it keeps
    serving while unreadable (a tuple: 10,000 files' frozensets would cost
    2 MiB). ``alone``: the file
    can be assembled again by itself — it was readable, named no kind weir
    does not read, and none of its keys is named by any other document.
    """

    problems: tuple[Problem, ...]
    served: tuple[Loaded, ...]
    keys: tuple[ObjectKey, ...]
    alone: bool


_Fingerprint = tuple[tuple[tuple[str, bytes], ...], tuple[Problem, ...]]


class FilesProvider:
    """Serves the objects in ``paths`` (files, and folders read recursively).

    A change is read 10-20 ms after it is made; a burst of changes (many
    files, or a file renamed away to be written again) once it has paused
    for ``debounce_ms`` (see :func:`_next_batch`).
    """

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        *,
        debounce_ms: int = 50,
        grace_s: float = REWRITE_GRACE_S,
        parse_cache: ParseCache | None = None,
    ) -> None:
        if not paths:
            raise ValueError("FilesProvider needs at least one file or folder")
        self._paths: tuple[Path, ...] = tuple(Path(p) for p in paths)
        self._debounce_ms = max(1, int(debounce_ms))
        self._grace_s = grace_s
        self._cache: dict[str, _Cached] = {}
        # Files whose new content would withdraw objects they serve, held back (see _hold):
        # name → (what the file says now, monotonic time since when it says exactly that).
        self._held: dict[str, tuple[_Cached, float]] = {}
        # The files read last (in order; name → absolute path), the same the other way round, and
        # the paths that went missing. Names, not Path objects: 10,000 of those would cost 3.5 MiB.
        self._files: dict[str, str] = {}
        self._absolute: dict[str, str] = {}
        self._missing: list[Problem] = []
        self._segments: dict[str, _Segment] = {}
        self._served_by_file: dict[str, tuple[Loaded, ...]] = {}
        self._last_valid: dict[ObjectKey, KubeObject] = {}
        self._logged: set[tuple[str, str, str | None, str | None, str]] = set()
        self._fingerprint: _Fingerprint | None = None
        self._snapshot: Snapshot | None = None
        # Parse results of an earlier run (a restart parses only what changed); dropped after the
        # first read. ``_cache_saved`` is the fingerprint last written there.
        self._parse_cache = parse_cache
        self._generation = 0  # counts changes of ``_cache``'s results
        self._cache_saved = 0  # the generation the parse cache holds (-1: none)

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
        watchers = _Watchers(queue, targets=frozenset(os.path.abspath(p) for p in self._paths))
        saving = asyncio.create_task(self._keep_cache_saved()) if self._parse_cache is not None else None
        try:
            plan = self._watch_plan()
            await watchers.start(plan)
            changed_since = await asyncio.to_thread(self._reload, set())
            while True:
                if changed_since:
                    assert self._snapshot is not None
                    yield self._snapshot
                changed, rearm = await _next_batch(queue, self._debounce_ms / 1000, self._held_until())
                changed |= {self._files.get(name, name) for name in self._held}  # due, or changed again
                changed_since = await asyncio.to_thread(self._reload, changed)
                new_plan = self._watch_plan()
                if rearm or new_plan != plan:
                    # A folder appeared or vanished (or a watcher failed): watch what exists
                    # now, then read again what may have changed while re-arming.
                    plan = new_plan
                    await watchers.start(plan)
                    changed_since |= await asyncio.to_thread(self._reload, set())
        finally:
            if saving is not None:
                saving.cancel()
            await watchers.stop()

    def save_parse_cache(self) -> bool:
        """Write the parse cache (if there is one) unless it already holds what was read; True if written."""
        generation = self._generation
        if self._parse_cache is None or self._snapshot is None or generation == self._cache_saved:
            return False
        entries = [(name, c.digest, c.result) for name, c in list(self._cache.items()) if c.digest]
        if self._parse_cache.save(entries):
            self._cache_saved = generation
            return True
        return False

    async def _keep_cache_saved(self) -> None:
        await asyncio.sleep(min(CACHE_SAVE_AFTER_S, len(self._cache) * CACHE_SAVE_AFTER_S_PER_FILE))
        while True:
            await asyncio.to_thread(self.save_parse_cache)
            await asyncio.sleep(CACHE_SAVE_EVERY_S)

    # -------------------------------------------------------------- watching

    def _watch_plan(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(folders watched recursively, folders watched without their subfolders).

        A folder given is watched recursively, and its parent without
        subfolders (to see it deleted and created again); for a file given (or
        a path that does not exist yet), its folder is watched without
        subfolders. In those parents only the paths given count (see
        :class:`_Watchers`).
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

    def _reload(self, changed: set[str]) -> bool:
        """Refresh from disk; True if a new snapshot was made (what is served may have changed)."""
        with gc_paused(freeze=True):
            return self._refresh(changed)

    def _refresh(self, changed: set[str]) -> bool:
        touched = self._touched_files(changed)
        if touched is not None:
            outcome = self._refresh_touched(touched)
            if outcome is not None:
                return outcome
        files, missing = manifest_files(self._paths)
        self._files = {str(path): os.path.abspath(path) for path in files}
        self._absolute = {absolute: name for name, absolute in self._files.items()}
        self._missing = missing
        read: dict[str, _Cached | _ToParse] = {}
        for name, absolute in list(self._files.items()):
            entry = self._read_bytes(name, force=absolute in changed)
            if entry is None:  # gone between listing and stat: as if deleted
                del self._files[name]
                self._absolute.pop(absolute, None)
                continue
            read[name] = entry
        todo = [(name, entry) for name, entry in read.items() if isinstance(entry, _ToParse)]
        parsed = parse_all([(name, entry.raw) for name, entry in todo])
        for (name, entry), result in zip(todo, parsed, strict=True):
            read[name] = self._hold(name, _Cached(entry.stat, entry.digest, result))
        cache = {name: entry for name, entry in read.items() if isinstance(entry, _Cached)}
        self._cache = cache
        if self._parse_cache is not None and self._snapshot is None:
            self._cache_saved = 0 if self._parse_cache.current else -1
            self._parse_cache.forget()
        self._held = {name: held for name, held in self._held.items() if name in cache}
        fingerprint: _Fingerprint = (
            tuple((name, c.digest) for name, c in cache.items()),
            tuple(missing),
        )
        if self._snapshot is not None and fingerprint == self._fingerprint:
            return False
        self._fingerprint = fingerprint
        self._generation += self._snapshot is not None
        self._publish(self._build(missing))
        return True

    def _refresh_touched(self, touched: list[str]) -> bool | None:
        """Read only ``touched`` files; ``None`` when that is not enough (a file is gone, say)."""
        entries: dict[str, _Cached] = {}
        for name in touched:
            entry = self._read(name, force=True)
            if entry is None:
                return None  # deleted: the folders are listed again
            entries[name] = entry
        edited = {name for name, entry in entries.items() if entry.digest != self._cache[name].digest}
        self._cache.update(entries)
        if not edited:
            return False
        self._fingerprint = None  # the next full read publishes whatever it finds
        self._generation += 1
        self._publish(self._build_edited(edited) or self._build(self._missing))
        return True

    def _read(self, name: str, *, force: bool) -> _Cached | None:
        """The file's cache entry, parsed again only if its bytes changed; ``None`` if it is gone.

        While the file is held (:meth:`_hold`), the entry served before.
        """
        entry = self._read_bytes(name, force=force)
        if isinstance(entry, _ToParse):
            return self._hold(name, _Cached(entry.stat, entry.digest, parse_all([(name, entry.raw)])[0]))
        return entry

    def _read_bytes(self, name: str, *, force: bool) -> _Cached | _ToParse | None:
        """:meth:`_read` up to parsing: the bytes to parse when neither this run nor the parse cache
        has read them before (the caller parses them and passes the entry to :meth:`_hold`)."""
        try:
            st = os.stat(name)
        except OSError as err:
            try:
                link = os.lstat(name)  # a symbolic link to nothing, or a loop of them: the name is there
            except OSError:
                self._held.pop(name, None)
                return None
            stat = (link.st_mtime_ns, link.st_size, link.st_ino)
            return _Cached(stat, b"", FileResult(name, (), unreadable(name, err)))
        stat = (st.st_mtime_ns, st.st_size, st.st_ino)
        served = self._cache.get(name)
        held = self._held.get(name)
        latest = held[0] if held is not None else served
        if latest is not None and latest.stat == stat and not force:
            return self._hold(name, latest)
        try:
            raw = read_bytes(name)
        except OSError as err:
            return self._hold(name, _Cached(stat, b"", FileResult(name, (), unreadable(name, err))))
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        if latest is not None and latest.digest == digest:
            return self._hold(name, replace(latest, stat=stat))
        if served is not None and served.digest == digest:
            return self._hold(name, replace(served, stat=stat))
        result = self._parse_cache.take(name, digest) if self._parse_cache is not None else None
        if result is None:
            log.debug("reading %s", name)
            return _ToParse(stat, digest, raw)
        return self._hold(name, _Cached(stat, digest, result))

    def _hold(self, name: str, entry: _Cached) -> _Cached:
        """What to serve for ``name``, which reads ``entry`` now: ``entry``, or the entry served before.

        A file rewritten in place (``cp``, ``>``, many editors) is empty, and
        then half written, for a moment. A change that would withdraw objects
        the file serves (it leaves the file empty, or no longer names one of
        them) is held back: the file keeps serving what it served until it
        has been unchanged (same mtime, size and inode) for the grace period,
        :data:`REWRITE_GRACE_S`; then what it says is served. Not held: a
        change that withdraws nothing (served at once; it ends a hold), a
        file that is another one now (a new inode: renamed over it, written
        whole) unless it is empty, and deleting the file.
        """
        served = self._cache.get(name)
        held = self._held.pop(name, None)
        if served is None or entry.digest == served.digest or not self._withdraws(name, entry.result):
            return entry
        if entry.stat[2] != served.stat[2] and entry.result.documents:
            return entry  # another file renamed over this one: written whole before it came
        now = time.monotonic()
        since = held[1] if held is not None and held[0].stat == entry.stat else now
        if now - since >= self._grace_s:
            log.info("%s: unchanged for %.1f s; serving what it says now", name, now - since)
            return entry
        if held is None:
            log.info("%s: holding back a change that withdraws objects until it settles", name)
        self._held[name] = (entry, since)
        return served

    def _withdraws(self, name: str, result: FileResult) -> bool:
        """Whether ``result`` drops an object ``name`` serves.

        An unreadable file drops none: it keeps serving what it served
        (:meth:`_assemble_file`) until it reads again.
        """
        served = self._served_by_file.get(name, ())
        if not served or result.fatal is not None:
            return False
        named = {doc.key for doc in result.documents if doc.key is not None}
        return any(loaded.object.key not in named for loaded in served)

    def _held_until(self) -> float | None:
        """Seconds until the first held file is due to be served as it is, ``None`` if none is held."""
        if not self._held:
            return None
        now = time.monotonic()
        return max(0.0, min(since + self._grace_s - now for _, since in self._held.values()))

    def _publish(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._log_problems(snapshot.problems)
        log.info(
            "serving %d objects from %d files (%d errors, %d warnings)",
            len(snapshot.resources),
            len(self._cache),
            len(snapshot.errors),
            len(snapshot.warnings),
        )

    def _touched_files(self, changed: set[str]) -> list[str] | None:
        """The files read last time among ``changed``, when no other can have changed; else ``None``.

        Watching names every path that changed. Edits and replacements (an
        editor's rename over the file) of files read last time need only
        those files read again; a path weir has not read (a new file, a
        folder) may change which files there are, so the folders are listed
        again. Hidden paths never hold manifests.
        """
        if not changed or self._snapshot is None:
            return None
        touched: list[str] = []
        for path in changed:
            name = self._absolute.get(path)
            if name is not None:
                touched.append(name)
            elif not os.path.basename(path).startswith("."):
                return None
        return touched

    def _build(self, missing: list[Problem]) -> Snapshot:
        """Assemble every file (in order) into a snapshot, with the checks that span files."""
        asm = Assembler(self._owners())
        asm.problem(*missing)
        served: list[Loaded] = []
        served_by_file: dict[str, tuple[Loaded, ...]] = {}
        spans: dict[str, tuple[int, int, tuple[Loaded, ...], tuple[ObjectKey, ...], bool]] = {}
        named: dict[ObjectKey, int] = {}
        for file, cached in self._cache.items():
            start = asm.count()
            from_file = tuple(self._assemble_file(asm, file, cached.result))
            keys = [doc.key for doc in cached.result.documents if doc.key is not None]
            if cached.result.fatal is None:
                served_by_file[file] = from_file
            else:
                # Unreadable: it keeps what it served when it was last read, whether or not another
                # file's object now takes a key of it, and claims those keys (so that a build does
                # not depend on the builds before it, and the edit path can tell who is alone).
                served_by_file[file] = kept = self._served_by_file.get(file, ())
                keys += [loaded.object.key for loaded in kept]
            for key in keys:
                named[key] = named.get(key, 0) + 1
            alone = cached.result.fatal is None and all(d.unknown is None for d in cached.result.documents)
            spans[file] = (start, asm.count(), from_file, tuple(keys), alone)
            served.extend(from_file)
        problems = asm.problems()
        self._segments = {
            file: _Segment(
                tuple(problems[start:stop]),
                from_file,
                keys,
                alone and all(named[key] == 1 for key in keys),
            )
            for file, (start, stop, from_file, keys, alone) in spans.items()
        }
        # Forget what is no longer served: a deleted object that comes back invalid was never valid.
        self._served_by_file = served_by_file
        by_key = {loaded.object.key: loaded for loaded in served}  # one key object for both maps
        self._last_valid = {key: loaded.object for key, loaded in by_key.items()}
        resources = Resources.from_objects(loaded.object for loaded in served)
        return Snapshot(
            resources=resources,
            problems=tuple(problems),
            origins=MappingProxyType({key: (loaded.file, loaded.line) for key, loaded in by_key.items()}),
            changed=self._changed_since(resources),
        )

    def _owners(self) -> dict[ObjectKey, tuple[str, int]]:
        """For each key served now, the definition (file, line) that keeps it.

        An object keeps being served from the file that serves it: another
        file that defines it too is the error, wherever its name sorts. That
        file's first definition of it wins, even if it moved to another line.
        Where no file that defines a key serves it (at start, say), the first
        definition in reading order wins (:class:`Assembler`).
        """
        if self._snapshot is None:
            return {}
        origins = self._snapshot.origins
        owners: dict[ObjectKey, tuple[str, int]] = {}
        for file, cached in self._cache.items():
            if cached.result.fatal is not None:
                named = [(loaded.object.key, loaded.line) for loaded in self._served_by_file.get(file, ())]
            else:
                named = [(doc.key, doc.line) for doc in cached.result.documents if doc.key is not None]
            for key, line in named:
                origin = origins.get(key)
                if origin is not None and origin[0] == file and key not in owners:
                    owners[key] = (file, line)
        return owners

    def _build_edited(self, edited: set[str]) -> Snapshot | None:
        """The snapshot after ``edited`` files changed, assembling only them; ``None`` if it cannot be.

        It can when each file could be assembled alone before and still
        can, naming the same keys: then no claim of another file, no
        duplicate and no count of unknown kinds can differ, and the result
        equals :meth:`_build`'s (a test holds the two to that).
        """
        assert self._snapshot is not None
        segments = dict(self._segments)
        upserts: dict[ObjectKey, KubeObject] = {}
        removed: set[ObjectKey] = set()
        origins = copy_mapping(self._snapshot.origins)
        for file in edited:
            before = self._segments.get(file)
            result = self._cache[file].result
            if before is None or not before.alone or result.fatal is not None:
                return None
            keys = [doc.key for doc in result.documents if doc.key is not None]
            if any(doc.unknown is not None for doc in result.documents):
                return None
            if len(keys) != len(set(keys)) or set(keys) != set(before.keys):
                return None
            asm = Assembler()
            from_file = tuple(self._assemble_file(asm, file, result))
            segments[file] = _Segment(tuple(asm.problems()), from_file, before.keys, True)
            for loaded in before.served:
                removed.add(loaded.object.key)
                origins.pop(loaded.object.key, None)
            for loaded in from_file:
                upserts[loaded.object.key] = loaded.object
                origins[loaded.object.key] = (loaded.file, loaded.line)
        for file in edited:
            self._served_by_file[file] = segments[file].served
        for key in removed - upserts.keys():
            self._last_valid.pop(key, None)
        self._last_valid.update(upserts)
        self._segments = segments
        previous = self._snapshot.resources
        resources = previous.with_changes(upserts, removed - upserts.keys())
        problems = [*self._missing]
        for segment in segments.values():
            problems.extend(segment.problems)
        changed = frozenset(
            key for key in removed | upserts.keys() if previous.objects.get(key) is not upserts.get(key)
        )
        return Snapshot(resources, tuple(problems), MappingProxyType(origins), changed)

    def _assemble_file(self, asm: Assembler, file: str, result: FileResult) -> list[Loaded]:
        """Add one file's documents to ``asm``; the objects it serves."""
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
            return from_file
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
        return from_file

    def _changed_since(self, resources: Resources) -> frozenset[ObjectKey]:
        if self._snapshot is None:
            return frozenset(resources.objects)
        before = self._snapshot.resources.objects
        after = resources.objects
        return frozenset(
            [key for key, obj in after.items() if before.get(key) is not obj]
            + [key for key in before if key not in after]
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


#: The watcher hands over a batch of changes once nothing new changed for this long (watchfiles'
#: ``step``, which is also how often it looks): 10-20 ms after a lone change such as an editor's
#: atomic replace (a temporary file written, then renamed over the manifest), the events of which
#: come within microseconds of each other. It costs each watcher ~0.4 % of a core while idle.
_QUIET_MS = 10
#: The longest watchfiles groups changes that keep coming without such a pause (its ``debounce``).
_GROUP_MS = 500
#: A batch naming more paths than this is a burst in progress (``cp -r``, a checkout, an unpacked
#: archive): it is held until the changes pause for the provider's ``debounce_ms``.
_BURST_PATHS = 8
#: The longest a burst is held: a folder that never stops changing is still served.
_MAX_HOLD_S = 2.0


async def _next_batch(
    queue: asyncio.Queue[set[str] | None], settle_s: float, wake_s: float | None = None
) -> tuple[set[str], bool]:
    """Wait for changes, then take every batch already queued: (paths changed, re-arm needed).

    With ``wake_s``, return (nothing changed) after that long without changes.

    A batch that looks unfinished is held until no further batch has come
    for ``settle_s`` (at most :data:`_MAX_HOLD_S` in all), so that a burst is
    read once and whole: one naming more than :data:`_BURST_PATHS` paths, or
    naming a path (not a hidden one) that does not exist now, such as a
    manifest an editor renamed away to write it again. An atomic replace of
    one file is read at once.
    """
    changed: set[str] = set()
    rearm = False
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(wake_s):
            item = await queue.get()
    except TimeoutError:
        return changed, rearm
    deadline = loop.time() + _MAX_HOLD_S
    while True:
        if item is None:
            rearm = True
        else:
            changed |= item
        if not queue.empty():
            item = queue.get_nowait()
            continue
        wait = min(settle_s, deadline - loop.time())
        if rearm or wait <= 0 or not _unfinished(changed):
            return changed, rearm
        try:
            async with asyncio.timeout(wait):
                item = await queue.get()
        except TimeoutError:
            return changed, rearm


def _unfinished(changed: set[str]) -> bool:
    """Whether a batch of changed paths looks like part of a burst still going on (:func:`_next_batch`)."""
    if len(changed) > _BURST_PATHS:
        return True
    return any(not os.path.basename(p).startswith(".") and not os.path.lexists(p) for p in changed)


class _Watchers:
    """The ``watchfiles.awatch`` loops for one watch plan, each feeding ``queue``.

    A batch of changed paths is put on the queue; ``None`` means a watcher
    failed and the plan should be re-armed. The folders watched without
    their subfolders (the parents of the paths given) report only changes
    of ``targets``, the paths given: anything else there (a log file
    written next to the manifests' folder, say) is none of weir's business,
    and would make weir list and read every file again.
    """

    def __init__(self, queue: asyncio.Queue[set[str] | None], targets: frozenset[str]) -> None:
        self._queue = queue
        self._targets = targets
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

    def _only_targets(self, change: watchfiles.Change, path: str) -> bool:
        return path in self._targets

    async def _pump(self, roots: tuple[str, ...], recursive: bool) -> None:
        try:
            async for changes in watchfiles.awatch(
                *roots,
                watch_filter=watchfiles.DefaultFilter() if recursive else self._only_targets,
                debounce=_GROUP_MS,
                step=_QUIET_MS,
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
