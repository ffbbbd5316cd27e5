"""Who asked for a change, and in which request (docs/audit.md, decision 0047).

Every write that changes state records an :class:`Actor`: the principal (the caller's
authenticated email, or the service account or XMC component acting on its own) and the
request id that carried it (``x-request-id``, sent by the caller or made by the ESS). The
history rows, the Operation and the audit log all take it from here, so "who stopped my
trial?" has one answer everywhere.

Pure: the request-id rules and the "stopped by" reading are decisions on data.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from xmc.errors import InvalidArgumentError
from xmc.model.states import WorkUnitState
from xmc.model.timeline import Change

#: The metadata key (gRPC) and header (HTTP) a request id travels in.
REQUEST_ID_HEADER: Final = "x-request-id"
#: Longest request id accepted: enough for a UUID, a trace id with a span, a prefix.
MAX_REQUEST_ID_LENGTH: Final = 128

#: Principals of XMC's own decisions (no person asked for them).
RETRY_PRINCIPAL: Final = "xmc-retry-policy"
ACTUATOR_PRINCIPAL: Final = "xmc-actuator"
ESS_PRINCIPAL: Final = "xmc-ess"


@dataclass(frozen=True)
class Actor:
    """The principal a write is done for and the request id it came with ('' when the
    write is XMC's own work, not part of any request: the Actuator settling a task)."""

    principal: str
    request_id: str = ""


ACTUATOR: Final = Actor(ACTUATOR_PRINCIPAL)
ESS: Final = Actor(ESS_PRINCIPAL)


def parse_request_id(value: str | None) -> str | None:
    """A caller's request id, checked: None when it sent none (or an empty one), else the
    value itself. Refused (INVALID_ARGUMENT naming the header) when longer than
    :data:`MAX_REQUEST_ID_LENGTH` or holding anything but visible ASCII: it is echoed in
    logs, error messages and pages, where a newline or a control character could forge a
    line and a megabyte would be stored on every history row of the request."""
    if value is None or value == "":
        return None
    if len(value) > MAX_REQUEST_ID_LENGTH:
        raise InvalidArgumentError(
            f"{REQUEST_ID_HEADER}: at most {MAX_REQUEST_ID_LENGTH} characters, got {len(value)}"
        )
    if not all("!" <= ch <= "~" for ch in value):
        raise InvalidArgumentError(
            f"{REQUEST_ID_HEADER}: only visible ASCII characters (no spaces or control characters)"
        )
    return value


_AGO: Final = re.compile(r"^(\d+)([smhd])$")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_time_bound(text: str, *, now: datetime, field: str) -> datetime | None:
    """A bound of an audit range as people type it: ``30m``, ``2h``, ``7d`` (that long
    before ``now``) or an ISO 8601 time (UTC when it names no zone); None when empty.
    INVALID_ARGUMENT naming ``field`` otherwise. Shared by ``xmc audit`` and ``/audit``."""
    text = text.strip()
    if not text:
        return None
    match = _AGO.match(text)
    if match:
        return now - timedelta(**{_UNITS[match[2]]: int(match[1])})
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgumentError(
            f"{field}: {text!r} is neither 30m, 2h, 7d nor an ISO time (2026-12-03T08:00)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class AuditAction(enum.StrEnum):
    """What a change was: the RPC that asked for it (the audit log's ``action``)."""

    CREATE_EXPERIMENT = "CreateExperiment"
    UPDATE_EXPERIMENT = "UpdateExperiment"
    UPDATE_LAUNCH_STATE = "UpdateExperimentLaunchState"
    UPDATE_WORK_UNIT = "UpdateWorkUnit"
    CREATE_ARTIFACT = "CreateArtifact"
    UPDATE_ARTIFACT = "UpdateArtifact"
    DELETE_ARTIFACT = "DeleteArtifact"
    SET_RETRY_POLICY = "SetExperimentRetryPolicy"
    CREATE_WEBHOOK = "CreateWebhook"
    DELETE_WEBHOOK = "DeleteWebhook"
    PAUSE_SCHEDULING = "PauseScheduling"
    RESUME_SCHEDULING = "ResumeScheduling"
    SET_WORK_UNIT_PRIORITY = "SetWorkUnitPriority"
    SET_QUOTA = "SetQuota"
    DELETE_QUOTA = "DeleteQuota"
    # Read back from Operations, never written to the audit log.
    CREATE_WORK_UNIT = "CreateWorkUnit"
    STOP_WORK_UNIT = "StopWorkUnit"
    RESTART_WORK_UNIT = "RestartWorkUnit"


@dataclass(frozen=True)
class AuditEntry:
    """One row of the audit log, as written."""

    action: AuditAction
    target: str
    xid: int | None
    detail: str = ""


@dataclass(frozen=True)
class Attribution:
    """Who moved a unit into a state, in which request, and when (the ESS's clock)."""

    principal: str
    request_id: str
    time: datetime


@dataclass(frozen=True)
class Attributions:
    """The "created by / stopped by / restarted by" of a work unit; None: not (known)."""

    created: Attribution | None = None
    stopped: Attribution | None = None
    restarted: Attribution | None = None


_STOPS: Final = frozenset({WorkUnitState.STOPPING, WorkUnitState.STOPPED})


def attribute(history: Sequence[tuple[int, Change]]) -> Attributions:
    """Read a unit's (eid, change) history in commit order. Created by: the change out of
    nothing into INITIALIZING; restarted by: the last change into RESTARTING; stopped by:
    the change of the current (last) execution into STOPPING or STOPPED from a state that
    is neither — the request, not the Actuator carrying it out (STOPPING → STOPPED); a
    stop of an earlier execution was undone by the restart. Rows written before the audit
    trail existed have no principal and attribute nothing."""
    created = stopped = restarted = None
    current = history[-1][0] if history else 0
    for eid, change in history:
        if not change.principal:
            continue
        who = Attribution(change.principal, change.request_id, change.record_time)
        if change.new_state is WorkUnitState.INITIALIZING and not change.old_state:
            created = created or who
        elif change.new_state is WorkUnitState.RESTARTING:
            restarted = who
        elif (
            eid == current
            and change.new_state in _STOPS
            and change.old_state not in _STOPS
            and stopped is None
        ):
            stopped = who
    return Attributions(created, stopped, restarted)
