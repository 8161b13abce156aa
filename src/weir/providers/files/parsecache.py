"""Parsed files kept on disk, so that a restart parses again only the files that changed.

At start, reading the folder is most of weir's own work: 10,000 route files
cost about 5 s of CPU to parse and validate (YAML, the schema, CEL rules),
and about 1 s to read back from this cache. A :class:`ParseCache` maps each
file's name and content digest (the provider's BLAKE2b of its bytes) to the
:class:`~weir.loader.FileResult` parsing gave, which depends on nothing else
(:func:`weir.loader.parse_bytes` is a function of the bytes and the name).

Contract:

* A result comes back only for the same name and the same bytes, written by
  the same weir code with the same Python and libraries
  (:func:`code_fingerprint`): anything else is parsed again, so the cache
  can make a start faster but never different.
* Nothing about the cache is ever an error of the input: a missing, stale,
  unreadable, truncated or corrupt cache file is logged and ignored (the
  files are parsed), and a cache that cannot be written is logged and
  skipped.
* A pickle runs code when it is read. The cache folder is made private
  (mode 0700) and a cache file is read only if it is a regular file owned by
  this user that nobody else may write to; anyone who can write it could
  write the manifests weir serves as well.
* One cache file per set of paths watched (named by their digest); the
  :data:`KEEP_FILES` most recently written are kept in the folder.

Written in chunks (:data:`CHUNK`) so that pickling, which holds the GIL,
never stalls the event loop for long: :meth:`ParseCache.save` is meant to
run in a thread while weir serves.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import stat
import sys
import tempfile
from collections.abc import Iterable, Sequence
from functools import cache
from importlib import metadata
from pathlib import Path

from weir.loader import FileResult

__all__ = ["CHUNK", "KEEP_FILES", "ParseCache", "code_fingerprint", "default_folder"]

log = logging.getLogger("weir.files")

_MAGIC = b"weir-parse-cache 1\n"
#: Entries pickled at once: about 30 ms of holding the GIL for route files of ~500 bytes.
CHUNK = 250
#: Cache files kept in the folder (one per set of paths watched), the newest.
KEEP_FILES = 16
#: The libraries whose versions decide what parsing gives.
_LIBRARIES = ("pydantic", "pydantic-core", "PyYAML", "common-expression-language")

Entry = tuple[str, bytes, FileResult]


def default_folder() -> Path:
    """``$WEIR_CACHE_DIR``, else ``$XDG_CACHE_HOME/weir``, else ``~/.cache/weir``."""
    explicit = os.environ.get("WEIR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "weir"


@cache
def code_fingerprint() -> bytes:
    """A digest of everything that decides what parsing a file gives.

    weir's own source (every ``.py`` file of the package, by path and bytes:
    an edited checkout is other code even at the same version), the Python
    version and the versions of the libraries that parse and validate.
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update(sys.version.encode())
    for name in _LIBRARIES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"\0{name}={version}".encode())
    root = Path(__file__).resolve().parents[2]  # the weir package
    for path in sorted(root.rglob("*.py")):
        digest.update(b"\0" + str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.digest()


class ParseCache:
    """The parse results of an earlier run for the files under ``paths``, in ``folder``.

    :meth:`take` answers from the cache file, read on first use;
    :meth:`forget` drops what was read once the start is over; :meth:`save`
    writes the entries given, replacing the file atomically.
    """

    def __init__(self, folder: str | os.PathLike[str], paths: Sequence[str | os.PathLike[str]]) -> None:
        self._folder = Path(folder)
        key = "\0".join(sorted(os.path.abspath(p) for p in paths))
        self._path = self._folder / f"{hashlib.blake2b(key.encode(), digest_size=8).hexdigest()}.pickle"
        self._entries: dict[str, tuple[bytes, FileResult]] | None = None
        self._forgotten = False
        self._held = 0  # entries the cache file held
        self.hits = 0
        self.misses = 0

    @property
    def path(self) -> Path:
        return self._path

    def take(self, name: str, digest: bytes) -> FileResult | None:
        """The result parsing ``name`` gave when its bytes had ``digest``, if the cache holds it."""
        if self._forgotten:
            return None
        if self._entries is None:
            self._entries = self._read()
            self._held = len(self._entries)
        found = self._entries.get(name)
        if found is not None and found[0] == digest:
            self.hits += 1
            return found[1]
        self.misses += 1
        return None

    @property
    def current(self) -> bool:
        """Whether the cache file held exactly the files looked up, unchanged (no need to write it)."""
        return self.misses == 0 and self.hits == self._held

    def forget(self) -> None:
        """Drop the entries read (what was used lives on in the provider); :meth:`take` finds none after."""
        if not self._forgotten and (self.hits or self.misses):
            total = self.hits + self.misses
            log.info("parse cache: %d of %d files read from %s", self.hits, total, self._path)
        self._forgotten = True
        self._entries = None

    # ------------------------------------------------------------------ reading

    def _read(self) -> dict[str, tuple[bytes, FileResult]]:
        try:
            with open(self._path, "rb") as stream:
                if not _trusted(os.fstat(stream.fileno())):
                    log.warning(
                        "parse cache %s ignored: it must be a file of this user that others cannot write",
                        self._path,
                    )
                    return {}
                if stream.read(len(_MAGIC)) != _MAGIC or stream.read(16) != code_fingerprint():
                    return {}  # another format, or another weir: parse again, overwrite later
                entries: dict[str, tuple[bytes, FileResult]] = {}
                while stream.peek(1):
                    chunk = pickle.load(stream)
                    if not isinstance(chunk, list):
                        raise ValueError(f"a chunk is a {type(chunk).__name__}, not a list")
                    for entry in chunk:
                        if not (
                            isinstance(entry, tuple)
                            and len(entry) == 3
                            and isinstance(entry[0], str)
                            and isinstance(entry[1], bytes)
                            and isinstance(entry[2], FileResult)
                        ):
                            raise ValueError("an entry is not (name, digest, parse result)")
                        entries[entry[0]] = (entry[1], entry[2])
                return entries
        except FileNotFoundError:
            return {}
        except Exception as exc:  # truncated, corrupt, unreadable: the files are parsed instead
            log.warning("parse cache %s ignored: %s: %s", self._path, type(exc).__name__, exc)
            return {}

    # ------------------------------------------------------------------ writing

    def save(self, entries: Iterable[Entry]) -> bool:
        """Write ``entries`` as the cache for these paths; False (logged) if it could not be written."""
        try:
            self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=".parse-", dir=self._folder)
        except OSError as exc:
            log.warning("parse cache not written to %s: %s", self._folder, exc)
            return False
        try:
            written = 0
            with os.fdopen(fd, "wb") as stream:
                stream.write(_MAGIC + code_fingerprint())
                chunk: list[Entry] = []
                for entry in entries:
                    written += 1
                    chunk.append(entry)
                    if len(chunk) == CHUNK:
                        pickle.dump(chunk, stream, protocol=pickle.HIGHEST_PROTOCOL)
                        chunk = []
                if chunk:
                    pickle.dump(chunk, stream, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, self._path)
        except Exception as exc:  # a full disk, a result that does not pickle: start slower next time
            log.warning("parse cache not written to %s: %s: %s", self._path, type(exc).__name__, exc)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            return False
        self._prune()
        log.info("parse cache: wrote %d files to %s", written, self._path)
        return True

    def _prune(self) -> None:
        """Keep the :data:`KEEP_FILES` newest cache files (other folders' caches, of earlier runs)."""
        try:
            found = [(p.stat().st_mtime, p) for p in self._folder.glob("*.pickle")]
        except OSError:
            return
        for _, old in sorted(found, reverse=True)[KEEP_FILES:]:
            with contextlib.suppress(OSError):
                old.unlink()


def _trusted(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
