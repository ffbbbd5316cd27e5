"""Resource names of SPEC §2.1, parsed and formatted in one place.

Every id is a Postgres ``bigint``: a name whose id does not fit one can never name a
resource, so it is the caller's mistake (INVALID_ARGUMENT naming the field), not a
lookup that reaches storage (docs/decisions/0015).
"""

from __future__ import annotations

import re

from xmc.errors import InvalidArgumentError

#: Largest id of any resource (Postgres ``bigint``).
MAX_ID = 2**63 - 1
#: Largest work-unit id a client may choose (``CreateWorkUnit.work_unit_id``). Server-
#: assigned ids continue after the largest id in use, so a client id near ``MAX_ID`` would
#: leave no room for them; 2^31 - 1 leaves 2^63 - 2^31 (and keeps JobSet names
#: ``xmc-{xid}-{wid}`` short enough for pod hostnames). docs/decisions/0015.
MAX_CLIENT_WORK_UNIT_ID = 2**31 - 1

# ASCII digits without a leading zero; up to 40 of them so an id just past the range gets
# "out of range" rather than "not of the form" (and int() never sees a huge string).
_ID = r"([1-9][0-9]{0,39})"
_EXPERIMENT = re.compile(rf"experiments/{_ID}")
_WORK_UNIT = re.compile(rf"experiments/{_ID}/workUnits/{_ID}")
_EXECUTION = re.compile(rf"experiments/{_ID}/workUnits/{_ID}/executions/{_ID}")
_ARTIFACT = re.compile(rf"artifacts/{_ID}")


def experiment_name(xid: int) -> str:
    return f"experiments/{xid}"


def work_unit_name(xid: int, wid: int) -> str:
    return f"experiments/{xid}/workUnits/{wid}"


def execution_name(xid: int, wid: int, eid: int) -> str:
    return f"experiments/{xid}/workUnits/{wid}/executions/{eid}"


def status_message_name(xid: int, wid: int | None, message_id: int) -> str:
    parent = experiment_name(xid) if wid is None else work_unit_name(xid, wid)
    return f"{parent}/statusMessages/{message_id}"


def _ids(match: re.Match[str], name: str, field: str) -> tuple[int, ...]:
    ids = tuple(int(group) for group in match.groups())
    for value in ids:
        if value > MAX_ID:
            raise InvalidArgumentError(
                f"{field}: {name!r} has id {value}, out of range (ids are 1..{MAX_ID})"
            )
    return ids


def parse_experiment_name(name: str, *, field: str = "name") -> int:
    """``experiments/{xid}`` → xid; anything else is the caller's mistake."""
    match = _EXPERIMENT.fullmatch(name)
    if not match:
        raise InvalidArgumentError(f"{field}: {name!r} is not of the form experiments/{{xid}}")
    (xid,) = _ids(match, name, field)
    return xid


def parse_work_unit_name(name: str, *, field: str = "name") -> tuple[int, int]:
    """``experiments/{xid}/workUnits/{wid}`` → (xid, wid)."""
    match = _WORK_UNIT.fullmatch(name)
    if not match:
        raise InvalidArgumentError(
            f"{field}: {name!r} is not of the form experiments/{{xid}}/workUnits/{{wid}}"
        )
    xid, wid = _ids(match, name, field)
    return xid, wid


def parse_execution_name(name: str, *, field: str = "name") -> tuple[int, int, int]:
    """``experiments/{xid}/workUnits/{wid}/executions/{eid}`` → (xid, wid, eid)."""
    match = _EXECUTION.fullmatch(name)
    if not match:
        raise InvalidArgumentError(
            f"{field}: {name!r} is not of the form "
            "experiments/{xid}/workUnits/{wid}/executions/{eid}"
        )
    xid, wid, eid = _ids(match, name, field)
    return xid, wid, eid


def work_unit_ids(name: str) -> tuple[int, int] | None:
    """``parse_work_unit_name`` without the error message: (xid, wid), or None when the
    name is not a valid work-unit name (the caller then calls ``parse_work_unit_name`` for
    the error). For batches, where building a field path per item cost more than the
    parse."""
    match = _WORK_UNIT.fullmatch(name)
    if match is None:
        return None
    xid, wid = int(match[1]), int(match[2])
    return None if xid > MAX_ID or wid > MAX_ID else (xid, wid)


def parse_artifact_name(name: str, *, field: str = "name") -> int:
    """``artifacts/{aid}`` → aid."""
    match = _ARTIFACT.fullmatch(name)
    if not match:
        raise InvalidArgumentError(f"{field}: {name!r} is not of the form artifacts/{{aid}}")
    (aid,) = _ids(match, name, field)
    return aid
