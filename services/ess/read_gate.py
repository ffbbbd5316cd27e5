"""Restricted reads at the gRPC boundary (``XMC_READ_AUTHORIZATION=restricted``, decision
0048): one rule per RPC of every service the ESS serves, enforced by the interceptor before
the servicer runs, so no RPC can be added without saying how it is scoped (the table test
``tests/unit/test_read_rules.py`` lists every method and fails on one without a rule).

Most RPCs name one experiment in a request field (a resource name or parent under
``experiments/{xid}``, an artifact, a webhook): the gate finds that experiment and answers
NOT_FOUND unless the caller may read it, with the words a missing experiment gets, so a
caller cannot tell an experiment it may not read from one that does not exist. That covers
writes too: a caller who may not read an experiment learns nothing from trying to change it
(a reader who may not write still gets PERMISSION_DENIED from the writer check). The RPCs
that span experiments (the experiment listing, a watch of all of them) are filtered in SQL
by their servicer (:data:`Guard.FILTERED`); internal RPCs are for services, which read
everything. Without restricted reads, or for admins and services, the gate does nothing.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ess.auth import Identity
from xmc.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from xmc.names import MAX_ID, experiment_name
from xmc.store.transactions import (
    Store,
    fetch_artifact_parent,
    fetch_readers,
    fetch_webhook_experiment,
    readable_experiments_sql,
)


class Guard(enum.Enum):
    #: The field is a name under ``experiments/{xid}`` (an experiment, work unit,
    #: execution, operation, or a parent): that experiment must be readable.
    EXPERIMENT = "experiment"
    #: The field is ``artifacts/{aid}``: the artifact's experiment must be readable.
    ARTIFACT = "artifact"
    #: The field is ``webhooks/{id}``: an experiment's webhook needs that experiment
    #: readable (a user's own webhook is checked by its servicer: owner or admin).
    WEBHOOK = "webhook"
    #: Spans experiments: the servicer filters by what the caller may read, in SQL.
    FILTERED = "filtered"
    #: Internal: the servicer admits only service identities, which read everything.
    SERVICE_ONLY = "service only"
    #: Reads no experiment's data (creates one; the request names none).
    NO_EXPERIMENT = "no experiment"
    #: The servicer admits only admins, who read everything (the audit log, quotas' writes).
    ADMIN_ONLY = "admin only"


@dataclass(frozen=True)
class ReadRule:
    guard: Guard
    #: The request field holding the name (dotted for a nested message's field).
    field: str = ""
    #: The field may be empty: then the request names no experiment (a watch of all).
    optional: bool = False
    #: The field may name a user (``users/me``) instead: checked by the servicer.
    users_allowed: bool = False


_API = "/cloud.xmanager.v1.ExperimentStateService/"
_OPS = "/google.longrunning.Operations/"
_EXEC = "/xmc.internal.v1.WorkUnitExecutionService/"
_SCHED = "/xmc.internal.v1.SchedulingService/"

_NAME = ReadRule(Guard.EXPERIMENT, "name")
_PARENT = ReadRule(Guard.EXPERIMENT, "parent")
_SERVICE = ReadRule(Guard.SERVICE_ONLY)

#: Every RPC the ESS serves (health and reflection aside: they read nothing) → its rule.
READ_RULES: Final[Mapping[str, ReadRule]] = {
    _API + "CreateExperiment": ReadRule(Guard.NO_EXPERIMENT),
    _API + "GetExperiment": _NAME,
    _API + "GetExperimentStatus": _NAME,
    _API + "ListExperiments": ReadRule(Guard.FILTERED),
    _API + "SearchExperiments": ReadRule(Guard.FILTERED),
    _API + "UpdateExperiment": ReadRule(Guard.EXPERIMENT, "experiment.name"),
    _API + "UpdateExperimentLaunchState": _NAME,
    _API + "CreateWorkUnit": _PARENT,
    _API + "GetWorkUnit": _NAME,
    _API + "GetCurrentWorkUnitExecution": _NAME,
    _API + "ListWorkUnitExecutions": _PARENT,
    _API + "ListWorkUnits": _PARENT,
    _API + "SearchWorkUnits": _PARENT,
    _API + "StopWorkUnit": _NAME,
    _API + "BatchStopWorkUnits": _PARENT,
    _API + "RestartWorkUnit": _NAME,
    _API + "BatchRestartWorkUnits": _PARENT,
    _API + "UpdateWorkUnit": ReadRule(Guard.EXPERIMENT, "work_unit.name"),
    _API + "CreateArtifact": _PARENT,
    _API + "GetArtifact": ReadRule(Guard.ARTIFACT, "name"),
    _API + "ListArtifacts": _PARENT,
    _API + "SearchArtifacts": _PARENT,
    _API + "UpdateArtifact": ReadRule(Guard.ARTIFACT, "artifact.name"),
    _API + "DeleteArtifact": ReadRule(Guard.ARTIFACT, "name"),
    _API + "ListStatusMessages": _PARENT,
    _API + "SearchStatusMessages": _PARENT,
    _OPS + "GetOperation": _NAME,
    _OPS + "ListOperations": _NAME,
    _OPS + "WaitOperation": _NAME,
    _OPS + "CancelOperation": _NAME,
    _OPS + "DeleteOperation": _NAME,
    _EXEC + "UpdateWorkUnitExecutions": _SERVICE,
    _EXEC + "ListDeployedExecutions": _SERVICE,
    _SCHED + "PauseScheduling": _SERVICE,
    _SCHED + "ResumeScheduling": _SERVICE,
    _SCHED + "GetSchedulingState": _SERVICE,
    "/xmc.internal.v1.ContainerLogService/RecordContainerLogs": _SERVICE,
    "/xmc.v1.TimelineService/GetWorkUnitTimeline": _NAME,
    "/xmc.v1.TimelineService/GetExperimentTimings": _NAME,
    "/xmc.v1.LogService/ListContainerLogs": _PARENT,
    "/xmc.v1.LogService/ReadWorkUnitLogs": _NAME,
    "/xmc.v1.LogService/ListExitCodes": _PARENT,
    "/xmc.v1.SpecService/GetExecutionManifest": _NAME,
    "/xmc.v1.SweepService/ListArgKeys": _PARENT,
    "/xmc.v1.SweepService/ListArgGroups": _PARENT,
    # One experiment when named; else all (or the caller's own), filtered by the servicer.
    "/xmc.v1.WatchService/WatchExperiments": ReadRule(
        Guard.EXPERIMENT, "experiment", optional=True
    ),
    "/xmc.v1.RetryService/GetExperimentRetryPolicy": _NAME,
    "/xmc.v1.RetryService/SetExperimentRetryPolicy": _NAME,
    "/xmc.v1.RetryService/GetWorkUnitRetries": _NAME,
    "/xmc.v1.NotificationService/CreateWebhook": ReadRule(
        Guard.EXPERIMENT, "parent", users_allowed=True
    ),
    "/xmc.v1.NotificationService/ListWebhooks": ReadRule(
        Guard.EXPERIMENT, "parent", users_allowed=True
    ),
    "/xmc.v1.NotificationService/DeleteWebhook": ReadRule(Guard.WEBHOOK, "name"),
    "/xmc.v1.NotificationService/ListDeliveries": _PARENT,
    # The queues span experiments: another's units are shown without their names.
    "/xmc.v1.QueueService/ListQueues": ReadRule(Guard.FILTERED),
    "/xmc.v1.QueueService/GetQueue": ReadRule(Guard.FILTERED),
    "/xmc.v1.QueueService/SetWorkUnitPriority": ReadRule(Guard.ADMIN_ONLY),
    # A quota is a principal's, not an experiment's: its own (or an admin's) to read.
    "/xmc.v1.QuotaService/ListQuotas": ReadRule(Guard.ADMIN_ONLY),
    "/xmc.v1.QuotaService/GetQuota": ReadRule(Guard.NO_EXPERIMENT),
    "/xmc.v1.QuotaService/SetQuota": ReadRule(Guard.ADMIN_ONLY),
    "/xmc.v1.QuotaService/DeleteQuota": ReadRule(Guard.ADMIN_ONLY),
    "/xmc.v1.QuotaService/ReconcileQuotaUsage": ReadRule(Guard.ADMIN_ONLY),
    "/xmc.v1.AuditService/ListAuditEvents": ReadRule(Guard.ADMIN_ONLY),
    # Spans experiments (filtered in SQL by readers); one, when named, must be readable.
    "/xmc.v1.UsageService/GetUsage": ReadRule(Guard.EXPERIMENT, "experiment", optional=True),
}

_UNDER_EXPERIMENT = re.compile(r"experiments/([1-9][0-9]{0,39})(?:/.*)?", re.DOTALL)
_ARTIFACT = re.compile(r"artifacts/([1-9][0-9]{0,39})")
_WEBHOOK = re.compile(r"webhooks/([1-9][0-9]{0,39})")


def field_text(request: Any, path: str) -> str:
    """The string at ``path`` (``"experiment.name"``) of a request message."""
    value = request
    for part in path.split("."):
        value = getattr(value, part)
    return str(value)


def _id(match: re.Match[str] | None, value: str, field: str) -> int | None:
    if match is None:
        return None
    number = int(match.group(1))
    if number > MAX_ID:
        raise InvalidArgumentError(f"{field}: {value!r} has id {number}, out of range")
    return number


def named_experiment(rule: ReadRule, value: str) -> int | None:
    """The xid an :data:`Guard.EXPERIMENT` field names; None when it names none the gate
    must check (empty: the servicer refuses it, or it is optional; a user's parent).
    Anything else that does not start ``experiments/{xid}`` is refused here, so the gate
    fails closed rather than trusting the servicer to reject it (pure)."""
    if not value or (rule.users_allowed and value.startswith("users/")):
        return None
    xid = _id(_UNDER_EXPERIMENT.fullmatch(value), value, rule.field)
    if xid is None:
        raise InvalidArgumentError(f"{rule.field}: {value!r} does not name an experiment")
    return xid


class ReadGate:
    """Checks each RPC's :class:`ReadRule` for a caller whose reads are restricted."""

    def __init__(self, store: Store, rules: Mapping[str, ReadRule] = READ_RULES) -> None:
        self._store = store
        self._rules = rules

    async def check(self, method: str, request: Any, identity: Identity) -> None:
        reads = identity.reads
        if reads.everything:
            return
        rule = self._rules.get(method)
        if rule is None:  # the table test keeps this from happening; fail closed anyway
            raise PermissionDeniedError(f"{method}: no read rule is declared for this method")
        value = field_text(request, rule.field) if rule.field else ""
        found = await self._experiment_of(rule, value)
        if found is None:
            return
        xid, missing = found
        async with self._store.connection() as conn:
            readers = await fetch_readers(conn, xid)
        if not reads.can_read(readers):
            raise NotFoundError(missing)

    async def _experiment_of(self, rule: ReadRule, value: str) -> tuple[int, str] | None:
        """The experiment to check, and what a caller who may not read it is told: the
        very words its servicer uses when the named resource does not exist."""
        if rule.guard is Guard.EXPERIMENT:
            xid = named_experiment(rule, value)
            missing = f"{rule.field}: {experiment_name(xid or 0)} does not exist"
            return None if xid is None else (xid, missing)
        if rule.guard is Guard.ARTIFACT:
            aid = _id(_ARTIFACT.fullmatch(value), value, rule.field)
            if aid is None:
                return None  # not an artifact name: its servicer refuses it
            async with self._store.connection() as conn:
                parent = await fetch_artifact_parent(conn, aid)
            xid = None if parent is None else named_experiment(_PARENT, parent)
            return None if xid is None else (xid, f"name: {value} does not exist")
        if rule.guard is Guard.WEBHOOK:
            webhook_id = _id(_WEBHOOK.fullmatch(value), value, rule.field)
            if webhook_id is None:
                return None
            async with self._store.connection() as conn:
                xid = await fetch_webhook_experiment(conn, webhook_id)
            return None if xid is None else (xid, f"name: {value} does not exist")
        return None


def experiments_readable_by(
    identity: Identity, *, xid_column: str = "", readers_column: str = "", first_param: int = 1
) -> tuple[str, list[Any]]:
    """The hook for every query that spans experiments (usage accounting, the audit log):
    ``(sql, params)`` true for the rows of experiments ``identity`` may read, to AND into
    a ``WHERE`` — ``("TRUE", [])`` when it reads everything. See
    ``xmc.store.transactions.readable_experiments_sql`` for the arguments."""
    return readable_experiments_sql(
        identity.reads,
        xid_column=xid_column,
        readers_column=readers_column,
        first_param=first_param,
    )
