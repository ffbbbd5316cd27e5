"""PATCH bodies as the Kubernetes API server applies them: RFC 7386 merge patch, RFC 6902
JSON patch, and strategic merge patch (built-in types only, applied here as a merge patch).

The error codes mirror the real server because clients switch on them: a body that does not
decode into the patch's shape (a JSON patch that is not a list, a merge patch that is not an
object) is 400 BadRequest; a well-formed JSON patch that cannot be applied (missing path,
failed ``test``) is 422 Invalid; a Content-Type the resource does not accept is 415.

Everything here is pure: inputs are never mutated.
"""

from __future__ import annotations

import copy
import enum
import json
from typing import Any

from kubesim.errors import ApiError, bad_request


class PatchType(enum.Enum):
    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"


def patch_type_for(content_type: str | None, *, strategic_allowed: bool) -> PatchType:
    """The patch type named by a Content-Type header; 415 when the resource does not take it
    (custom resources never take strategic merge patch, exactly like a real server)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    accepted = [PatchType.JSON, PatchType.MERGE]
    if strategic_allowed:
        accepted.append(PatchType.STRATEGIC)
    for patch_type in accepted:
        if media == patch_type.value:
            return patch_type
    names = ", ".join(p.value for p in accepted)
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {names}",
    )


def apply_patch(patch_type: PatchType, target: dict[str, Any], body: bytes) -> dict[str, Any]:
    """``target`` with the encoded patch ``body`` applied."""
    try:
        patch = json.loads(body or b"null")
    except ValueError as error:
        raise bad_request(f"error decoding patch: {error}") from None
    if patch_type is PatchType.JSON:
        return _json_patch_document(target, patch)
    if not isinstance(patch, dict):
        raise bad_request(
            f"error decoding patch: a merge patch must be a JSON object, got {_json_type(patch)}"
        )
    result = merge_patch(target, patch)
    assert isinstance(result, dict)  # an object patch always yields an object
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _json_patch_document(target: dict[str, Any], patch: Any) -> dict[str, Any]:
    if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
        raise bad_request(
            f"error decoding patch: a JSON patch must be a list of operation objects, "
            f"got {_json_type(patch)}"
        )
    result = json_patch(target, patch)
    if not isinstance(result, dict):
        raise _unprocessable("the patched document is not an object")
    return result


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902 over a deep copy of ``target``; any failing operation fails the whole patch
    (422), as it does on the real server."""
    document = copy.deepcopy(target)
    for operation in operations:
        document = _apply_operation(document, operation)
    return document


def _apply_operation(document: Any, operation: dict[str, Any]) -> Any:
    op = operation.get("op")
    path = _pointer(operation, "path")
    if op == "add":
        return _add(document, path, copy.deepcopy(_value(operation)))
    if op == "remove":
        return _remove(document, path)[0]
    if op == "replace":
        return _replace(document, path, copy.deepcopy(_value(operation)))
    if op == "move":
        source = _pointer(operation, "from")
        if path[: len(source)] == source and len(path) > len(source):
            raise _unprocessable(f"cannot move {_render(source)} into its own child")
        document, value = _remove(document, source)
        return _add(document, path, value)
    if op == "copy":
        value = copy.deepcopy(_get(document, _pointer(operation, "from")))
        return _add(document, path, value)
    if op == "test":
        if not _json_equal(_get(document, path), _value(operation)):
            raise _unprocessable(f"testing value {_render(path)} failed")
        return document
    raise _unprocessable(f"unexpected operation kind {op!r}")


def _value(operation: dict[str, Any]) -> Any:
    if "value" not in operation:
        raise _unprocessable(f"operation {operation.get('op')!r} is missing 'value'")
    return operation["value"]


def _pointer(operation: dict[str, Any], member: str) -> list[str]:
    """RFC 6901 reference tokens: ``~1`` is ``/`` and ``~0`` is ``~`` (decoded in that
    order, so ``~01`` stays ``~1``)."""
    pointer = operation.get(member)
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise _unprocessable(f"operation {operation.get('op')!r} has an invalid {member!r}")
    if pointer == "":
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _get(document: Any, path: list[str]) -> Any:
    for token in path:
        if isinstance(document, dict) and token in document:
            document = document[token]
        elif isinstance(document, list):
            document = document[_index(document, token, path, allow_end=False)]
        else:
            raise _unprocessable(f"path {_render(path)} does not exist")
    return document


def _add(document: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(document, path[:-1])
    token = path[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, path, allow_end=True), value)
    else:
        raise _unprocessable(f"path {_render(path)} does not exist")
    return document


def _replace(document: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(document, path[:-1])
    token = path[-1]
    if isinstance(parent, dict) and token in parent:
        parent[token] = value
    elif isinstance(parent, list):
        parent[_index(parent, token, path, allow_end=False)] = value
    else:
        raise _unprocessable(f"path {_render(path)} does not exist")
    return document


def _remove(document: Any, path: list[str]) -> tuple[Any, Any]:
    """The document without the value at ``path``, and that value."""
    if not path:
        return None, document
    parent = _get(document, path[:-1])
    token = path[-1]
    if isinstance(parent, dict) and token in parent:
        return document, parent.pop(token)
    if isinstance(parent, list):
        return document, parent.pop(_index(parent, token, path, allow_end=False))
    raise _unprocessable(f"path {_render(path)} does not exist")


def _index(array: list[Any], token: str, path: list[str], *, allow_end: bool) -> int:
    """An array index token: digits without leading zeros, or ``-`` (the end) for add."""
    if token == "-" and allow_end:
        return len(array)
    valid = token.isdigit() and (token == "0" or not token.startswith("0"))
    index = int(token) if valid else -1
    if not 0 <= index < len(array) + (1 if allow_end else 0):
        raise _unprocessable(f"array index {token!r} out of range at {_render(path)}")
    return index


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: unlike Python's ``==``, ``true`` is not ``1``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    return bool(left == right) and isinstance(left, str) == isinstance(right, str)


def _render(path: list[str]) -> str:
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in path)


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)
