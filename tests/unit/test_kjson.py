"""The tolerant Kubernetes-JSON readers: absent, null and ill-typed fields read as empty."""

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from xmc.kjson import (
    as_int,
    as_mapping,
    as_sequence,
    as_str,
    condition_of,
    conditions_of,
    labels_of,
    metadata_of,
)


@pytest.mark.parametrize(
    ("reader", "value", "expected"),
    [
        (as_mapping, {"a": 1}, {"a": 1}),
        (as_mapping, None, {}),
        (as_mapping, [("a", 1)], {}),
        (as_mapping, "a", {}),
        (as_sequence, [1, 2], [1, 2]),
        (as_sequence, (1, 2), (1, 2)),
        (as_sequence, None, ()),
        (as_sequence, "ab", ()),
        (as_sequence, {"a": 1}, ()),
        (as_str, "x", "x"),
        (as_str, None, ""),
        (as_str, 3, ""),
        (as_int, 3, 3),
        (as_int, None, 0),
        (as_int, "3", 0),
        (as_int, True, 0),
        (as_int, 2.5, 0),
    ],
)
def test_scalar_readers(reader: Callable[[Any], object], value: Any, expected: object) -> None:
    assert reader(value) == expected


@pytest.mark.parametrize(
    ("obj", "metadata", "labels"),
    [
        (
            {"metadata": {"name": "a", "labels": {"k": "v"}}},
            {"name": "a", "labels": {"k": "v"}},
            {"k": "v"},
        ),
        ({"metadata": {"name": "a"}}, {"name": "a"}, {}),
        ({"metadata": {"labels": None}}, {"labels": None}, {}),
        ({"metadata": None}, {}, {}),
        ({}, {}, {}),
    ],
)
def test_metadata_and_labels(
    obj: Mapping[str, Any], metadata: Mapping[str, Any], labels: Mapping[str, Any]
) -> None:
    assert metadata_of(obj) == metadata
    assert labels_of(obj) == labels


READY_FALSE = {"type": "Ready", "status": "False", "reason": "stale"}
READY_TRUE = {"type": "Ready", "status": "True"}
FAILED_TRUE = {"type": "Failed", "status": "True"}
TARGET_TRUE = {"type": "FailureTarget", "status": "True"}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"status": {"conditions": [READY_TRUE, FAILED_TRUE]}}, [READY_TRUE, FAILED_TRUE]),
        ({"status": {"conditions": [READY_TRUE, None, "x"]}}, [READY_TRUE, {}, {}]),
        ({"status": {"conditions": None}}, []),
        ({"status": {"conditions": {"type": "Ready"}}}, []),
        ({"status": {}}, []),
        ({"status": None}, []),
        ({}, []),
    ],
)
def test_conditions_of(obj: Mapping[str, Any], expected: list[Mapping[str, Any]]) -> None:
    assert conditions_of(obj) == expected


@pytest.mark.parametrize(
    ("conditions", "types", "status", "expected"),
    [
        # Any status, the first of the type.
        ([READY_FALSE, READY_TRUE], ("Ready",), None, READY_FALSE),
        ([FAILED_TRUE], ("Ready",), None, None),
        # The status filter applies before the choice: a True one behind a False one.
        ([READY_FALSE, READY_TRUE], ("Ready",), "True", READY_TRUE),
        ([READY_FALSE], ("Ready",), "True", None),
        ([READY_FALSE], ("Ready",), "False", READY_FALSE),
        # Several types: the order of ``types`` is the preference, not the list's order.
        ([TARGET_TRUE, FAILED_TRUE], ("Failed", "FailureTarget"), "True", FAILED_TRUE),
        ([TARGET_TRUE], ("Failed", "FailureTarget"), "True", TARGET_TRUE),
        ([READY_TRUE], ("Failed", "FailureTarget"), "True", None),
        # Malformed entries are skipped, not an error.
        ([None, 3, READY_TRUE], ("Ready",), "True", READY_TRUE),
        (None, ("Ready",), None, None),
    ],
)
def test_condition_of(
    conditions: Any, types: tuple[str, ...], status: str | None, expected: Mapping[str, Any] | None
) -> None:
    assert condition_of({"status": {"conditions": conditions}}, *types, status=status) == expected
