"""Small, forgiving readers of API objects, shared by every ``observe`` module.

Objects arrive JSON-shaped (camelCase keys) with any field possibly absent, null or of the
wrong type; these readers turn all of that into an empty value instead of an exception, so
one odd object cannot stop the watch loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from xmc.labels import EXECUTION_ID, EXPERIMENT_ID, WORK_UNIT_ID

JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL: Final = "jobset.sigs.k8s.io/jobset-uid"


def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("metadata"))


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(metadata_of(obj).get("labels"))


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def conditions_of(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [as_mapping(c) for c in as_sequence(as_mapping(obj.get("status")).get("conditions"))]


def condition_of(obj: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions_of(obj) if c.get("type") == condition_type), None)


def _positive_int(value: Any) -> int | None:
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    number = int(value)
    return number if number > 0 else None


def work_unit_ids(obj: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(xid, wid, eid) from the labels the Actuator writes; None means "not ours".

    Garbage is treated like absence: a label we cannot parse names no execution we could
    write to, and guessing would risk touching someone else's work unit.
    """
    labels = labels_of(obj)
    ids = tuple(
        _positive_int(labels.get(key)) for key in (EXPERIMENT_ID, WORK_UNIT_ID, EXECUTION_ID)
    )
    xid, wid, eid = ids
    if xid is None or wid is None or eid is None:
        return None
    return xid, wid, eid


def belongs_to(obj: Mapping[str, Any], jobset: Mapping[str, Any]) -> bool:
    """Whether a pod or Job is this JobSet's: by the JobSet's UID when labelled with it,
    since every execution reuses the JobSet's name."""
    labels, metadata = labels_of(obj), metadata_of(jobset)
    uid = labels.get(JOBSET_UID_LABEL)
    if uid is not None:
        return bool(uid == metadata.get("uid"))
    return bool(labels.get(JOBSET_NAME_LABEL) == metadata.get("name"))
