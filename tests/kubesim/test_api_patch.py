"""Patch application (pure): RFC 7386 merge patch, RFC 6902 JSON patch, and the status codes
a real API server answers bad patches with."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kubesim.errors import ApiError
from kubesim.patch import PatchType, apply_patch, merge_patch, patch_type_for

DOC: dict[str, Any] = {
    "metadata": {"name": "a", "labels": {"x": "1", "a/b": "slash", "m~n": "tilde"}},
    "spec": {"items": [1, 2, 3], "flag": True, "nested": {"k": "v"}},
}


SPEC = DOC["spec"]


@pytest.mark.parametrize(
    ("patch", "expected_spec"),
    [
        pytest.param({"spec": {"flag": False}}, {**SPEC, "flag": False}, id="a scalar is replaced"),
        pytest.param(
            {"spec": {"nested": None}}, {"items": [1, 2, 3], "flag": True}, id="null deletes"
        ),
        pytest.param({"spec": {"items": [9]}}, {**SPEC, "items": [9]}, id="a list is replaced"),
        pytest.param(
            {"spec": {"nested": {"j": 1}}},
            {**SPEC, "nested": {"k": "v", "j": 1}},
            id="objects merge key by key",
        ),
        pytest.param({"spec": None}, None, id="null removes a whole section"),
    ],
)
def test_merge_patch(patch: dict[str, Any], expected_spec: dict[str, Any] | None) -> None:
    before = copy.deepcopy(DOC)
    result = apply_patch(PatchType.MERGE, DOC, json.dumps(patch).encode())
    assert result.get("spec") == expected_spec
    assert result["metadata"] == DOC["metadata"]
    assert before == DOC, "the target must not be mutated"


def test_merge_patch_of_a_non_object_replaces_the_target() -> None:
    assert merge_patch({"a": 1}, [1, 2]) == [1, 2]


@pytest.mark.parametrize(
    ("operations", "path", "expected"),
    [
        pytest.param(
            [{"op": "add", "path": "/spec/new", "value": 1}], ("spec", "new"), 1, id="add"
        ),
        pytest.param(
            [{"op": "add", "path": "/spec/items/-", "value": 4}],
            ("spec", "items"),
            [1, 2, 3, 4],
            id="add appends with -",
        ),
        pytest.param(
            [{"op": "add", "path": "/spec/items/0", "value": 0}],
            ("spec", "items"),
            [0, 1, 2, 3],
            id="add inserts at an index",
        ),
        pytest.param(
            [{"op": "remove", "path": "/spec/items/1"}],
            ("spec", "items"),
            [1, 3],
            id="remove from a list",
        ),
        pytest.param(
            [{"op": "replace", "path": "/spec/items/2", "value": 30}],
            ("spec", "items"),
            [1, 2, 30],
            id="replace a list element",
        ),
        pytest.param(
            [{"op": "replace", "path": "/metadata/labels/a~1b", "value": "new"}],
            ("metadata", "labels", "a/b"),
            "new",
            id="~1 escapes a slash",
        ),
        pytest.param(
            [{"op": "remove", "path": "/metadata/labels/m~0n"}],
            ("metadata", "labels", "m~n"),
            KeyError,
            id="~0 escapes a tilde",
        ),
        pytest.param(
            [{"op": "move", "from": "/spec/nested", "path": "/spec/moved"}],
            ("spec", "moved"),
            {"k": "v"},
            id="move",
        ),
        pytest.param(
            [{"op": "copy", "from": "/spec/items", "path": "/spec/copy"}],
            ("spec", "copy"),
            [1, 2, 3],
            id="copy",
        ),
        pytest.param(
            [
                {"op": "test", "path": "/spec/flag", "value": True},
                {"op": "replace", "path": "/spec/flag", "value": False},
            ],
            ("spec", "flag"),
            False,
            id="a passing test lets the patch apply",
        ),
    ],
)
def test_json_patch(operations: list[dict[str, Any]], path: tuple[str, ...], expected: Any) -> None:
    result: Any = apply_patch(PatchType.JSON, DOC, json.dumps(operations).encode())
    for key in path[:-1]:
        result = result[key]
    if expected is KeyError:
        assert path[-1] not in result
    else:
        assert result[path[-1]] == expected
    assert DOC["spec"]["items"] == [1, 2, 3], "the target must not be mutated"


@pytest.mark.parametrize(
    ("patch_type", "body", "code"),
    [
        pytest.param(PatchType.JSON, {"spec": {"flag": False}}, 400, id="json patch as an object"),
        pytest.param(PatchType.JSON, [1, 2], 400, id="json patch of non-objects"),
        pytest.param(PatchType.MERGE, [{"op": "add"}], 400, id="merge patch as a list"),
        pytest.param(PatchType.MERGE, "text", 400, id="merge patch as a string"),
        pytest.param(
            PatchType.JSON,
            [{"op": "remove", "path": "/spec/missing"}],
            422,
            id="remove of a missing path",
        ),
        pytest.param(
            PatchType.JSON,
            [{"op": "replace", "path": "/nope/x", "value": 1}],
            422,
            id="replace under a missing parent",
        ),
        pytest.param(
            PatchType.JSON,
            [{"op": "test", "path": "/spec/flag", "value": 1}],
            422,
            id="test of true against 1 fails",
        ),
        pytest.param(PatchType.JSON, [{"op": "frobnicate", "path": "/spec"}], 422, id="unknown op"),
        pytest.param(PatchType.JSON, [{"op": "add", "path": "/spec/x"}], 422, id="add lacks value"),
        pytest.param(
            PatchType.JSON,
            [{"op": "add", "path": "/spec/items/7", "value": 1}],
            422,
            id="index out of range",
        ),
        pytest.param(
            PatchType.JSON,
            [{"op": "move", "from": "/spec", "path": "/spec/inner"}],
            422,
            id="move into its own child",
        ),
        pytest.param(
            PatchType.JSON,
            [{"op": "replace", "path": "", "value": [1]}],
            422,
            id="result is not an object",
        ),
    ],
)
def test_bad_patches_fail_like_a_real_server(patch_type: PatchType, body: Any, code: int) -> None:
    with pytest.raises(ApiError) as raised:
        apply_patch(patch_type, DOC, json.dumps(body).encode())
    assert raised.value.code == code
    assert raised.value.reason == {400: "BadRequest", 422: "Invalid"}[code]


def test_undecodable_json_is_a_bad_request() -> None:
    with pytest.raises(ApiError) as raised:
        apply_patch(PatchType.MERGE, DOC, b"{not json")
    assert raised.value.code == 400


@pytest.mark.parametrize(
    ("content_type", "strategic_allowed", "expected"),
    [
        pytest.param("application/merge-patch+json", False, PatchType.MERGE, id="merge"),
        pytest.param("application/json-patch+json", False, PatchType.JSON, id="json"),
        pytest.param(
            "application/merge-patch+json; charset=utf-8", False, PatchType.MERGE, id="charset"
        ),
        pytest.param(
            "application/strategic-merge-patch+json",
            True,
            PatchType.STRATEGIC,
            id="strategic for a built-in type",
        ),
        pytest.param(
            "application/strategic-merge-patch+json", False, 415, id="strategic for a CRD"
        ),
        pytest.param("application/apply-patch+yaml", True, 415, id="server-side apply"),
        pytest.param("application/json", True, 415, id="plain json"),
        pytest.param(None, True, 415, id="no content type"),
    ],
)
def test_patch_type_for(
    content_type: str | None, strategic_allowed: bool, expected: PatchType | int
) -> None:
    if isinstance(expected, PatchType):
        assert patch_type_for(content_type, strategic_allowed=strategic_allowed) is expected
        return
    with pytest.raises(ApiError) as raised:
        patch_type_for(content_type, strategic_allowed=strategic_allowed)
    assert (raised.value.code, raised.value.reason) == (415, "UnsupportedMediaType")
