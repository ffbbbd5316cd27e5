"""What every ``observe`` module reads off an object of XMC's: its work-unit ids and the
JobSet it belongs to. The generic readers (absent, null or ill-typed fields read as
empty, so one odd object cannot stop the watch loop) are ``xmc.kjson``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from xmc.kjson import labels_of, metadata_of
from xmc.labels import EXECUTION_ID, EXPERIMENT_ID, WORK_UNIT_ID

JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL: Final = "jobset.sigs.k8s.io/jobset-uid"


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
