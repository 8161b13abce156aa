"""Manifests → validated objects, with problems people can act on.

:func:`load_text`, :func:`load_file` and :func:`load_paths` read multi-document
YAML (or JSON), unpack ``kind: List`` documents, parse every object with the
model :mod:`weir.api.registry` names for its ``apiVersion``/``kind`` and turn
every validation error into a :class:`Problem` that says where (file, line,
object, field path in Kubernetes notation) and what, in the API server's
words::

    routes.yaml:12: HTTPRoute default/web: spec.rules[0].backendRefs[1].port:
        Invalid value: 0: should be greater than or equal to 1

(one line, wrapped here)

A file is read as a whole: a YAML syntax error (or a duplicate mapping key)
anywhere in it yields one problem and no objects from that file. Within a
readable file, each object stands on its own: an invalid one is reported
and skipped, the others load.

The lower-level :func:`parse_text` returns a :class:`FileResult` that keeps,
per document, the object's key even when the object is invalid; the files
provider uses it to keep serving an object's last valid version.

Reading the YAML itself (Kubernetes' typing rules, line numbers) is
:mod:`weir.yamlsource`; wording validation errors is :mod:`weir.api.errors`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import yaml
from pydantic import ValidationError
from yaml.nodes import Node, ScalarNode, SequenceNode

from weir import yamlsource
from weir.api import registry
from weir.api.errors import api_errors, show_value
from weir.api.meta import KubeObject, ObjectKey

__all__ = [
    "INTERNAL_ERROR",
    "MANIFEST_SUFFIXES",
    "Assembler",
    "Document",
    "FileResult",
    "LoadReport",
    "Loaded",
    "Problem",
    "assemble",
    "gc_paused",
    "load_file",
    "load_paths",
    "load_text",
    "manifest_files",
    "parse_bytes",
    "parse_text",
    "read_bytes",
    "unreadable",
]

#: File name endings read when walking a folder (a file named explicitly is always read).
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

Severity = Literal["error", "warning"]


# ------------------------------------------------------------------ results


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the input, located as precisely as the input allows.

    ``line`` is 1-based: the line of the offending field (its key's line; for
    a field that is not written, the deepest part of its path that is), the
    line where the object's document (or List item) starts for a problem of
    the whole object, or the line of a YAML syntax error. ``object`` reads
    ``"HTTPRoute default/web"`` (``"GatewayClass weir"`` for cluster-scoped
    kinds); ``field`` is a Kubernetes field path such as
    ``spec.rules[0].backendRefs[1].port``.
    """

    severity: Severity
    file: str
    line: int | None
    object: str | None
    field: str | None
    message: str
    #: The line the object's document (or List item) starts on, where ``line`` is a field's: what
    #: tells two objects apart when counting them (not part of the output, nor of equality).
    start: int | None = dataclasses.field(default=None, compare=False)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        parts = [where]
        if self.object:
            parts.append(self.object)
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)

    def to_data(self) -> dict[str, Any]:
        """A plain dict (every key present, ``None`` for unknown) for JSON or YAML output."""
        return {
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "object": self.object,
            "field": self.field,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Loaded:
    """A valid object and where it was read from (``line`` is 1-based, its document's start)."""

    object: KubeObject
    file: str
    line: int


@dataclass(frozen=True, slots=True)
class Document:
    """The outcome of one document (or one item of a ``List``) of a file.

    ``key`` is set for a kind weir reads whenever ``apiVersion``, ``kind``
    and ``metadata.name`` are readable, even if the object is invalid;
    ``loaded`` is set only for a valid object; ``unknown`` is
    ``(apiVersion, kind)`` for a kind weir does not read (such documents carry
    no problems: :class:`Assembler` reports them once per kind); ``label`` is
    the object as problems name it (``"HTTPRoute default/web"``) when known.
    """

    line: int
    key: ObjectKey | None
    loaded: Loaded | None
    problems: tuple[Problem, ...] = ()
    unknown: tuple[str, str] | None = None
    label: str | None = None


@dataclass(frozen=True, slots=True)
class FileResult:
    """Everything one file yielded. ``fatal`` is set (and ``documents`` empty) when unreadable."""

    file: str
    documents: tuple[Document, ...]
    fatal: Problem | None = None


@dataclass
class LoadReport:
    """What :func:`load_paths` found: the valid objects and every problem, in file order."""

    objects: list[Loaded]
    problems: list[Problem]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when there are no errors (warnings allowed)."""
        return not any(p.severity == "error" for p in self.problems)


# ------------------------------------------------------------------ parsing


def _label(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


#: Starts the problem for input that made the loader itself fail (a bug): the file is then
#: one problem, as if unreadable, rather than an exception that would stop a watcher.
INTERNAL_ERROR = "internal error while reading this file (please report it)"


def parse_text(text: str, file: str) -> FileResult:
    """Parse and validate every object in ``text`` (one file) without cross-file checks.

    Never raises: anything wrong with the input is a problem; were reading
    it to fail anyway (a bug), the file is one :data:`INTERNAL_ERROR` problem.
    """
    try:
        return _parse_text(text, file)
    except Exception as exc:  # the last resort: a watcher must never die of a file's content
        message = f"{INTERNAL_ERROR}: {type(exc).__name__}: {exc}"
        return FileResult(file, (), Problem("error", file, None, None, None, message[:500]))


def _parse_text(text: str, file: str) -> FileResult:
    try:
        composed = yamlsource.compose(text)
    except yaml.YAMLError as err:
        line, message = yamlsource.describe_error(err)
        label = field = None
        if isinstance(err, yamlsource.BuildError) and err.document is not None:
            label = _document_label(err.document)
            field = yamlsource.field_path(err.document, err.node)
        return FileResult(file, (), Problem("error", file, line, label, field, message))
    except RecursionError:
        problem = Problem("error", file, None, None, None, "invalid YAML: nested too deeply")
        return FileResult(file, (), problem)
    docs: list[Document] = []
    for node, data in composed:
        line = node.start_mark.line + 1
        if isinstance(data, dict) and isinstance(data.get("items"), list) and _is_list_kind(data):
            items_node = yamlsource.mapping_value(node, "items")
            item_nodes = items_node.value if isinstance(items_node, SequenceNode) else []
            default_api = data.get("apiVersion")
            kind = data.get("kind")
            default_kind = kind[: -len("List")] if isinstance(kind, str) and kind != "List" else None
            for i, item in enumerate(data["items"]):
                item_line = item_nodes[i].start_mark.line + 1 if i < len(item_nodes) else line
                if isinstance(item, dict) and default_kind and default_api:
                    # The API's typed lists (HTTPRouteList) omit apiVersion/kind on items.
                    item = {"apiVersion": default_api, "kind": default_kind, **item}
                item_node = item_nodes[i] if i < len(item_nodes) else None
                docs.append(_parse_object(item, file, item_line, item_node))
        else:
            docs.append(_parse_object(data, file, line, node))
    return FileResult(file, tuple(docs))


def _document_label(document: Node) -> str | None:
    """The object a YAML document that could not be built names (``"HTTPRoute default/web"``), if plain."""

    def scalar(node: Node | None) -> str | None:
        return node.value if isinstance(node, ScalarNode) and node.value else None

    kind = scalar(yamlsource.mapping_value(document, "kind"))
    metadata = yamlsource.mapping_value(document, "metadata")
    name = scalar(yamlsource.mapping_value(metadata, "name")) if metadata is not None else None
    if kind is None or name is None:
        return None
    namespace = scalar(yamlsource.mapping_value(metadata, "namespace")) if metadata is not None else None
    model = registry.model_for_kind(kind)
    if model is not None:
        namespace = (namespace or "default") if model.NAMESPACED else None
    return _label(kind, namespace or "", name)


def parse_bytes(raw: bytes, file: str) -> FileResult:
    """:func:`parse_text` for raw file content (UTF-8, with or without a byte order mark)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        problem = Problem("error", file, line, None, None, f"not UTF-8 text: {err.reason}")
        return FileResult(file, (), problem)
    return parse_text(text, file)


def _is_list_kind(data: dict[str, Any]) -> bool:
    """``kind: List`` (as ``kubectl get -o yaml`` prints) or a typed list (``HTTPRouteList``)."""
    kind = data.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and registry.model_for_kind(kind) is None


def _parse_object(data: Any, file: str, line: int, node: Node | None = None) -> Document:
    """``data`` (read from ``node``, which starts on ``line``) as a :class:`Document`; each problem
    carries the line of its field in ``node`` (:func:`weir.yamlsource.field_line`)."""

    def at(path: str | None) -> int:
        return yamlsource.field_line(node, path) if node is not None and path else line

    if not isinstance(data, dict):
        return Document(
            line,
            None,
            None,
            (
                Problem(
                    "error",
                    file,
                    line,
                    None,
                    None,
                    f"Invalid value: {show_value(data)}: a manifest must be an object "
                    "with apiVersion, kind and metadata.name",
                ),
            ),
        )
    api_version = data.get("apiVersion")
    kind = data.get("kind")
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None

    # The identity fields come first: without them nothing else can be said.
    identity: list[tuple[str, str]] = []
    for path, value, expected in (
        ("apiVersion", api_version, str),
        ("kind", kind, str),
        ("metadata", metadata, dict),
    ):
        if value is None or value == "":
            identity.append((path, "Required value"))
        elif not isinstance(value, expected):
            want = "string" if expected is str else "object"
            identity.append((path, f"Invalid value: {show_value(value)}: must be of type {want}"))
    if isinstance(metadata, dict):
        if name is None or name == "":
            identity.append(("metadata.name", "Required value"))
        elif not isinstance(name, str):
            identity.append(("metadata.name", f"Invalid value: {show_value(name)}: must be of type string"))
        if namespace is not None and not isinstance(namespace, str):
            identity.append(
                ("metadata.namespace", f"Invalid value: {show_value(namespace)}: must be of type string")
            )
    if identity:
        label = None
        if isinstance(kind, str) and kind and isinstance(name, str) and name:
            label = _label(kind, namespace if isinstance(namespace, str) else "", name)
        return Document(
            line,
            None,
            None,
            tuple(Problem("error", file, at(path), label, path, msg, line) for path, msg in identity),
            label=label,
        )
    assert isinstance(api_version, str) and isinstance(kind, str)
    assert isinstance(metadata, dict) and isinstance(name, str)
    assert namespace is None or isinstance(namespace, str)

    model = registry.lookup(api_version, kind)
    if model is None:
        label = _label(kind, namespace or "", name)
        return Document(line, None, None, unknown=(api_version, kind), label=label)

    if model.NAMESPACED:
        if not namespace:
            namespace = "default"
            data = {**data, "metadata": {**metadata, "namespace": namespace}}
    elif namespace is not None:
        # The API server ignores metadata.namespace on cluster-scoped objects.
        namespace = ""
        meta = dict(metadata)
        del meta["namespace"]
        data = {**data, "metadata": meta}
    namespace = namespace or ""
    key = ObjectKey(model.KIND, namespace, name)
    label = str(key)
    try:
        obj = model.model_validate(data)
    except ValidationError as err:
        problems = tuple(
            Problem("error", file, at(path), label, path, message, line)
            for path, message in api_errors(model, err)
        )
        return Document(line, key, None, problems, label=label)
    warnings = tuple(
        Problem("warning", file, at(path), label, path, message, line) for path, message in obj.warnings()
    )
    return Document(line, key, Loaded(obj, file, line), warnings, label=label)


# ------------------------------------------------------------------ assembling a load


class Assembler:
    """The checks that span documents and files, applied as documents are added in order.

    The first object with a key wins, unless ``owners`` names the
    definition (file, line) that wins it; any other is an error naming the
    winner. Documents of kinds weir does not read give one warning per
    ``(apiVersion, kind)``, at the first such document, with the count.
    """

    def __init__(self, owners: Mapping[ObjectKey, tuple[str, int]] | None = None) -> None:
        self._problems: list[Problem | None] = []
        self._first: dict[ObjectKey, tuple[str, int]] = dict(owners or {})
        self._claimed: set[ObjectKey] = set()
        self._unknown: dict[tuple[str, str], _UnknownKind] = {}

    def problem(self, *problems: Problem) -> None:
        self._problems.extend(problems)

    def count(self) -> int:
        """How many problems are recorded so far (a position in :meth:`problems`)."""
        return len(self._problems)

    def unknown(self, doc: Document, file: str) -> None:
        """Count a document of a kind weir does not read (``doc.unknown`` is set)."""
        assert doc.unknown is not None
        entry = self._unknown.get(doc.unknown)
        if entry is None:
            self._unknown[doc.unknown] = _UnknownKind(file, doc.line, doc.label, len(self._problems))
            self._problems.append(None)  # filled in by problems(), once the count is known
        else:
            entry.count += 1

    def claim(self, key: ObjectKey, file: str, line: int, label: str | None = None) -> bool:
        """True if this definition wins ``key``; otherwise record the duplicate and return False."""
        first = self._first.get(key)
        if first is None or (first == (file, line) and key not in self._claimed):
            self._first[key] = (file, line)
            self._claimed.add(key)
            return True
        self._problems.append(
            Problem(
                "error",
                file,
                line,
                label or str(key),
                None,
                f"Duplicate value: already defined at {first[0]}:{first[1]}; this definition is ignored",
            )
        )
        return False

    def problems(self) -> list[Problem]:
        """Every problem recorded, in the order the documents were added."""
        out = list(self._problems)
        for (api_version, kind), entry in self._unknown.items():
            out[entry.index] = unknown_kind_problem(
                api_version, kind, entry.file, entry.line, entry.label, entry.count
            )
        assert all(p is not None for p in out)  # each kind's placeholder is filled above
        return cast(list[Problem], out)


@dataclass
class _UnknownKind:
    file: str
    line: int
    label: str | None
    index: int
    count: int = 1


def assemble(results: Iterable[FileResult]) -> tuple[list[Loaded], list[Problem]]:
    """Objects and problems of several files, with the checks of :class:`Assembler`."""
    asm = Assembler()
    objects: list[Loaded] = []
    for result in results:
        if result.fatal is not None:
            asm.problem(result.fatal)
            continue
        for doc in result.documents:
            if doc.unknown is not None:
                asm.unknown(doc, result.file)
                continue
            if doc.key is not None and not asm.claim(doc.key, result.file, doc.line, doc.label):
                continue
            asm.problem(*doc.problems)
            if doc.loaded is not None:
                objects.append(doc.loaded)
    return objects, asm.problems()


def unknown_kind_problem(
    api_version: str, kind: str, file: str, line: int, label: str | None, count: int
) -> Problem:
    """The warning for objects of a kind weir does not read (the first one at file:line)."""
    known = registry.model_for_kind(kind)
    if known is not None:
        what = f"weir reads {kind} as apiVersion {known.API_VERSION}, not {api_version}"
    else:
        what = f"weir does not read {kind} ({api_version})"
    objects = "1 object" if count == 1 else f"{count} objects"
    return Problem("warning", file, line, label, None, f"{what}; skipped {objects} of this kind")


def load_text(text: str, file: str) -> tuple[list[Loaded], list[Problem]]:
    """The valid objects of ``text`` and its problems. ``file`` names it in problems."""
    return assemble([parse_text(text, file)])


def load_file(path: str | os.PathLike[str]) -> tuple[list[Loaded], list[Problem]]:
    """:func:`load_text` for a file; an unreadable file gives one problem."""
    return assemble([read_file(path)])


def read_file(path: str | os.PathLike[str]) -> FileResult:
    """Read and parse one file into a :class:`FileResult`."""
    read = _read_raw(path)
    return read if isinstance(read, FileResult) else parse_bytes(read[1], read[0])


def _read_raw(path: str | os.PathLike[str]) -> tuple[str, bytes] | FileResult:
    """``(file, its bytes)``, or the :class:`FileResult` of a file that cannot be read."""
    file = os.fspath(path)
    try:
        return file, read_bytes(file)
    except OSError as err:
        return FileResult(file, (), unreadable(file, err))


class NotRegularFile(OSError):
    """A manifest path that is a named pipe, a socket, a device...: never opened for reading."""


_NOT_REGULAR = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


def read_bytes(file: str) -> bytes:
    """The content of ``file`` if it is a regular file; raises :class:`OSError` otherwise.

    Never blocks: opening a named pipe for reading waits for a writer (a FIFO
    named ``x.yaml`` once stopped every reload, and SIGTERM with it), so
    the file is opened without blocking and read only if it is regular
    (:class:`NotRegularFile` if not).
    """
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with open(fd, "rb", closefd=True) as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = _NOT_REGULAR.get(stat.S_IFMT(mode), "not a regular file")
            raise NotRegularFile(errno.EINVAL, f"{what}, not a regular file; skipped")
        return handle.read()


def unreadable(file: str, err: OSError) -> Problem:
    """The problem for a manifest file that cannot be read."""
    return Problem("error", file, None, None, None, f"cannot read: {err.strerror or err}")


# ------------------------------------------------------------------ files and folders


def _is_manifest_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(MANIFEST_SUFFIXES)


def _walk(root: Path) -> Iterator[tuple[Path, str]]:
    """Manifest files below ``root``, each with its real path.

    A file's real path is its folder's real path and its name unless the file
    is a symbolic link: ``os.path.realpath`` for every file would look up each
    component of each path again (a third of loading 10,000 files).
    """
    seen_dirs: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen_dirs:  # a symlink loop
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if _is_manifest_name(name):
                path = os.path.join(dirpath, name)
                yield Path(path), os.path.realpath(path) if os.path.islink(path) else os.path.join(real, name)


def manifest_files(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[Path], list[Problem]]:
    """The files ``paths`` name, folders walked recursively, and an error per missing path.

    Folders contribute ``*.yaml``, ``*.yml`` and ``*.json`` files, skipping
    hidden files and folders (a name starting with ``.``) below the folder;
    a file named explicitly is always read. Each root's files are sorted by
    path; roots keep the order given; a file reached twice is read once.
    """
    files: list[Path] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for given in paths:
        root = Path(given)
        if root.is_dir():
            found = sorted(_walk(root), key=lambda item: item[0].parts)
        elif root.exists():
            found = [(root, os.path.realpath(root))]
        else:
            problems.append(Problem("error", str(root), None, None, None, "no such file or directory"))
            continue
        for path, real in found:
            if real not in seen:
                seen.add(real)
                files.append(path)
    return files, problems


def load_paths(paths: Sequence[str | os.PathLike[str]]) -> LoadReport:
    """Load every manifest in ``paths`` (files, and folders walked recursively)."""
    from weir.parallelparse import parse_all  # it parses with this module: imported when used

    files, missing = manifest_files(paths)
    with gc_paused():
        reads = [_read_raw(path) for path in files]
        parsed = iter(parse_all([r for r in reads if not isinstance(r, FileResult)]))  # two cores if many
        objects, problems = assemble([r if isinstance(r, FileResult) else next(parsed) for r in reads])
    return LoadReport(objects, missing + problems)


#: A :func:`gc_paused` block asked to freeze what it made does so past this many new objects.
FREEZE_AFTER = 50_000


@contextlib.contextmanager
def gc_paused(*, freeze: bool = False) -> Iterator[None]:
    """Pause the cyclic garbage collector while reading many files.

    Parsing allocates millions of small objects that all survive (YAML nodes,
    then models); without this the collector rescans them over and over and
    loading 10,000 routes takes several times longer. Nothing parsed here
    forms reference cycles, so nothing is lost by waiting.

    With ``freeze``, a block that left more than :data:`FREEZE_AFTER` new
    objects behind freezes them (:func:`gc.freeze`) as it ends, for callers
    that keep what they made (a provider's objects, served until replaced):
    else the first collection after the pause walks every one of them (0.3 s
    after loading 10,000 routes) to find nothing. Frozen objects are still
    freed by reference counting; the controller's ``_refreeze_heap`` collects
    the frozen heap once it has doubled.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if freeze and gc.get_count()[0] > FREEZE_AFTER:
            gc.freeze()
        gc.enable()
