"""Resource names of SPEC §2.1, parsed and formatted in one place."""

from __future__ import annotations

import re

from xmc.errors import InvalidArgumentError

_EXPERIMENT = re.compile(r"^experiments/([1-9][0-9]{0,18})$")
_WORK_UNIT = re.compile(r"^experiments/([1-9][0-9]{0,18})/workUnits/([1-9][0-9]{0,18})$")


def experiment_name(xid: int) -> str:
    return f"experiments/{xid}"


def work_unit_name(xid: int, wid: int) -> str:
    return f"experiments/{xid}/workUnits/{wid}"


def execution_name(xid: int, wid: int, eid: int) -> str:
    return f"experiments/{xid}/workUnits/{wid}/executions/{eid}"


def status_message_name(xid: int, wid: int | None, message_id: int) -> str:
    parent = experiment_name(xid) if wid is None else work_unit_name(xid, wid)
    return f"{parent}/statusMessages/{message_id}"


def parse_experiment_name(name: str, *, field: str = "name") -> int:
    """``experiments/{xid}`` → xid; anything else is the caller's mistake."""
    match = _EXPERIMENT.match(name)
    if not match:
        raise InvalidArgumentError(f"{field}: {name!r} is not of the form experiments/{{xid}}")
    return int(match[1])


def parse_work_unit_name(name: str, *, field: str = "name") -> tuple[int, int]:
    """``experiments/{xid}/workUnits/{wid}`` → (xid, wid)."""
    match = _WORK_UNIT.match(name)
    if not match:
        raise InvalidArgumentError(
            f"{field}: {name!r} is not of the form experiments/{{xid}}/workUnits/{{wid}}"
        )
    return int(match[1]), int(match[2])
