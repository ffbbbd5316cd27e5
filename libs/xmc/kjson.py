"""Tolerant readers of Kubernetes API objects as JSON (camelCase keys, nested mappings).

Every service reads JobSets, Jobs, Workloads and pods exactly as the API server returns
them, and a real server omits unset fields, may send ``null`` for one, and a
half-written or foreign object may carry the wrong type anywhere. One odd object must
not stop a watch loop, a validation or a guard, so these readers turn an absent, null or
ill-typed value into the empty value of the type the caller expects, and the caller's
decision reads "nothing there". That is the tolerant reading: never an exception, never
a guess at a value that is not there.

Pure: no I/O, so the state model (``xmc.model``) uses them too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_sequence(value: Any) -> Sequence[Any]:
    """``value`` if it is a JSON array (a list; a tuple from code), else an empty one. A
    string is not one: iterating its characters would read garbage as items."""
    return value if isinstance(value, list | tuple) else ()


def as_str(value: Any) -> str:
    """``value`` if it is a string, else ``""``."""
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int:
    """``value`` if it is an integer, else 0 (a JSON ``true`` is not the count 1)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("metadata"))


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(metadata_of(obj).get("labels"))


def conditions_of(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``status.conditions``, each as a mapping (a malformed entry reads as ``{}``)."""
    return [as_mapping(c) for c in as_sequence(as_mapping(obj.get("status")).get("conditions"))]


def condition_of(
    obj: Mapping[str, Any], *types: str, status: str | None = None
) -> Mapping[str, Any] | None:
    """The first condition of the first of ``types`` that ``obj`` has, in that order of
    preference; with ``status`` (``"True"``, ``"False"``), only a condition in that status
    counts. None when there is none.

    The status filter applies before the choice, so ``condition_of(job, "Failed",
    status="True")`` finds a True ``Failed`` even behind a stale False one of the same
    type, which a real server never writes but a hand-made object may hold.
    """
    conditions = conditions_of(obj)
    for wanted in types:
        for condition in conditions:
            if condition.get("type") == wanted and (
                status is None or condition.get("status") == status
            ):
                return condition
    return None
