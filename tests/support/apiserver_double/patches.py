"""The PATCH body formats the API server accepts, applied to plain JSON trees.

- ``application/merge-patch+json``: RFC 7386 (objects merge recursively,
  ``null`` deletes, anything else — lists included — replaces).
- ``application/strategic-merge-patch+json``: accepted for built-in kinds
  only (CRDs answer 415, as in Kubernetes) and applied as a merge patch:
  the double does not know the ``patchMergeKey`` of built-in lists, so a
  list in such a patch replaces the list instead of merging by key.
- ``application/json-patch+json``: RFC 6902 (``add``, ``remove``,
  ``replace``, ``move``, ``copy``, ``test``) with RFC 6901 pointers.
- ``application/apply-patch+yaml`` (server-side apply): the YAML (or JSON)
  body is merged like a merge patch. Field ownership is not tracked, so an
  apply never conflicts (as if ``force=true``) and a field a manager stops
  sending is not removed.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from apiserver_double.errors import ApiStatusError

__all__ = ["APPLY", "JSON_PATCH", "MERGE", "STRATEGIC", "apply_json_patch", "decode_patch", "merge_patch"]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def _unprocessable(message: str) -> ApiStatusError:
    return ApiStatusError(422, f"the server rejected our request due to an error in our request: {message}")


def decode_patch(content_type: str, body: bytes) -> Any:
    """Parse a PATCH body according to its media type.

    Raises:
        ApiStatusError: 400 BadRequest if the body does not parse.
    """
    try:
        if content_type == APPLY:
            return yaml.safe_load(body.decode("utf-8"))
        return json.loads(body)
    except (ValueError, yaml.YAMLError) as exc:
        raise ApiStatusError(400, f"error decoding patch: {exc}", "BadRequest") from exc


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new tree (``target`` is not modified)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _unprocessable(f"JSON pointer {path!r} does not start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise _unprocessable(f"array index {token!r} is not a number")
    index = int(token)
    if index > len(container) or (index == len(container) and not for_add):
        raise _unprocessable(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise _unprocessable(f"path {path!r} does not exist")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise _unprocessable(f"path {path!r} does not exist")


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise _unprocessable("cannot remove the whole document")
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, for_add=False))
    raise _unprocessable(f"path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent, last = _parent(doc, tokens, path), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise _unprocessable(f"path {path!r}: parent is not an object or an array")
    return doc


def apply_json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch; returns a new tree (``target`` is not modified).

    Raises:
        ApiStatusError: 422 for a malformed operation, a missing path or a failed ``test``.
    """
    if not isinstance(operations, list):
        raise ApiStatusError(400, "a JSON patch must be a list of operations", "BadRequest")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise _unprocessable(f"malformed JSON patch operation: {op!r}")
        name, path = op.get("op"), op["path"]
        if name in ("add", "replace", "test") and "value" not in op:
            raise _unprocessable(f"JSON patch {name} at {path!r} has no value")
        if name == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif name == "remove":
            _remove(doc, path)
        elif name == "replace":
            _get(doc, path)  # must exist
            if _pointer(path):
                _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif name in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise _unprocessable(f"JSON patch {name} to {path!r} has no 'from'")
            value = _remove(doc, source) if name == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, value)
        elif name == "test":
            if _get(doc, path) != op["value"]:
                raise _unprocessable(f"testing value {path!r} failed")
        else:
            raise _unprocessable(f"unknown JSON patch operation {name!r}")
    return doc
