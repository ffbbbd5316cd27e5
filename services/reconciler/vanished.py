"""No ghosts: an execution whose JobSet vanished from the cluster without passing XMC's
finalizer is ended FAILED, saying so (docs/decisions/0028-vanished-jobsets-fail.md).

A JobSet normally leaves through the finalizer path (``reconciler.finalizer``), which
writes the execution's end before it lets go. One that vanishes without it — a namespace
force-deleted, etcd restored from a backup, the finalizer removed by hand, an ephemeral
kubesim restarted — leaves its execution RUNNING forever: nothing will ever be observed
of it again. The Reconciler knows the cluster (its JobSet cache); the ESS knows which
executions should have a JobSet (``ListDeployedExecutions``). The leader compares the two
every ``interval`` seconds:

1. only while every watch is synced (listed, connected, no re-list owed): a stale cache
   would make live JobSets look gone;
2. it lists the deployed executions, page by page (the cost is per sweep, not per event);
3. an execution whose JobSet (by name, with its execution-id label) is not in the cache
   becomes a *suspect*, timed on this process's monotonic clock from the first sweep
   that missed it; one seen again is cleared;
4. a suspect missing for ``grace`` — and whose Create was finished by the Actuator at
   least ``grace`` ago, on the Actuator's clock read against this host's: two XMC hosts,
   so only their skew counts — is checked with a direct GET of the JobSet (404, or a JobSet
   of another execution, confirms), then written FAILED through
   ``UpdateWorkUnitExecutions`` with the EID fence, so a newer execution is never touched
   and the ESS's state machine decides whether the write is allowed.

The FAILED time is this host's clock, but never before the stored state's time (the
cluster's clock, decision 11): the time order of §5.2 then cannot refuse it, and no later
observation of the execution can exist to be overtaken — its JobSet is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

import structlog

from reconciler import metrics
from reconciler.ess_client import EssClient, EssError, UpdateResult
from reconciler.observation import Observation, Source
from reconciler.observe import work_unit_ids
from xmc.kube import JOBSETS, KubeError
from xmc.kube_client import KubeClient
from xmc.labels import jobset_name
from xmc.messages import backend_message
from xmc.model.deployed import DeployedExecution
from xmc.model.states import Severity, WorkUnitState
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution

log = structlog.get_logger()
Obj = dict[str, Any]
Key = tuple[int, int, int]

WRITER: Final = "reconciler/vanished"
MASK: Final = ("status.state", "status.system_message")
#: How long the uid of a deleted JobSet is remembered for the message.
_TOMBSTONE_SECONDS: Final = 3600.0


@dataclass(frozen=True)
class VanishedSettings:
    interval: float = 30.0
    """Real seconds between two sweeps."""
    grace: timedelta = timedelta(seconds=60)
    """How long a JobSet must be missing (and its create finished) before the execution is
    ended."""
    page_size: int = 1000
    """Executions per ``ListDeployedExecutions`` page."""


# --- the decision (pure) -------------------------------------------------------------------


def has_its_jobset(jobset: Mapping[str, Any] | None, eid: int) -> bool:
    """Whether ``jobset`` (the one of the work unit's name, or None) is execution ``eid``'s."""
    if jobset is None:
        return False
    ids = work_unit_ids(jobset)
    return ids is not None and ids[2] == eid


@dataclass(frozen=True)
class SweepDecision:
    #: Every execution missing its JobSet now, with when it was first missed (monotonic).
    suspects: dict[Key, float]
    #: Those missing for the whole grace: confirm with a GET, then end them.
    due: list[DeployedExecution]


def decide_vanished(
    deployed: Sequence[DeployedExecution],
    *,
    jobset_of: Callable[[str], Mapping[str, Any] | None],
    suspects: Mapping[Key, float],
    now: float,
    wall_now: datetime,
    grace: timedelta,
) -> SweepDecision:
    """One sweep's comparison of what should exist with the (synced) cache. ``now`` is the
    monotonic clock ``suspects`` were timed on; ``wall_now`` this host's wall clock, read
    against the Actuator's ``deploy_time``. Executions no longer listed drop out."""
    found: dict[Key, float] = {}
    due: list[DeployedExecution] = []
    seconds = grace.total_seconds()
    for execution in deployed:
        key = (execution.xid, execution.wid, execution.eid)
        if has_its_jobset(jobset_of(jobset_name(execution.xid, execution.wid)), execution.eid):
            continue
        first = suspects.get(key, now)
        found[key] = first
        deployed_long_ago = (
            execution.deploy_time is None or wall_now - execution.deploy_time >= grace
        )
        if now - first >= seconds and deployed_long_ago:
            due.append(execution)
    return SweepDecision(found, due)


def vanished_text(name: str, uid: str | None, eid: int) -> str:
    where = f"JobSet {name}" + (f" (uid {uid})" if uid else "")
    return (
        f"{where} of execution {eid} disappeared from the cluster without XMC's finalizer, "
        "so how it ended was never recorded; XMC ended the execution FAILED"
    )


def vanished_observation(
    execution: DeployedExecution, *, uid: str | None, wall_now: datetime
) -> Observation:
    """The FAILED write: this host's time, never before the stored state's (see the module
    docstring); the message says what happened, forced over an earlier ERROR."""
    xid, wid, eid = execution.xid, execution.wid, execution.eid
    text = vanished_text(jobset_name(xid, wid), uid, eid)
    status = WorkUnitStatus(
        state=WorkUnitStatus.WorkUnitState.ValueType(WorkUnitState.FAILED),
        system_message=backend_message(Severity.ERROR, xid, wid, text),
    )
    set_timestamp(status.state_update_time, max(wall_now, execution.state_update_time))
    return Observation(
        xid, wid, eid, Source.JOBSET, WorkUnitExecution(status=status), MASK,
        force_status_message_update=True,
    )  # fmt: skip


# --- the shell -----------------------------------------------------------------------------


@dataclass
class VanishedSweep:
    """The leader's periodic sweep (see the module docstring); ``sweep`` is one pass."""

    kube: KubeClient
    ess: EssClient
    namespace: str
    #: The JobSet cache's look-up by name.
    jobset_of: Callable[[str], Mapping[str, Any] | None]
    #: Whether every watch is synced right now.
    synced: Callable[[], bool]
    wall_clock: Callable[[], datetime]
    settings: VanishedSettings = field(default_factory=VanishedSettings)
    monotonic: Callable[[], float] = time.monotonic
    suspects: dict[Key, float] = field(default_factory=dict)
    #: name → (uid, eid, monotonic time) of JobSets the watch saw deleted: the message
    #: names the uid when it is known.
    _tombstones: dict[str, tuple[str, int, float]] = field(default_factory=dict)

    def forget(self) -> None:
        """Not leading (any more): a new leader starts its grace from scratch."""
        self.suspects.clear()

    def note_deleted(self, jobset: Mapping[str, Any]) -> None:
        """The watch delivered DELETED (through the finalizer or not): remember its uid."""
        meta = jobset.get("metadata") or {}
        ids = work_unit_ids(jobset)
        if ids is not None and meta.get("name") and meta.get("uid"):
            self._tombstones[str(meta["name"])] = (str(meta["uid"]), ids[2], self.monotonic())

    async def step(self, *, leading: bool) -> None:
        """The periodic loop's iteration: the leader sweeps, a standby forgets its suspects
        (a new leader waits the whole grace again); a passing ESS or cluster failure is
        one failed pass, logged and counted, not a crash."""
        if not leading:
            self.forget()
            return
        try:
            await self.sweep()
        except (EssError, KubeError) as error:
            metrics.VANISHED_SWEEPS_TOTAL.labels("failed").inc()
            log.warning("vanished-JobSet sweep failed; next pass retries", error=str(error))

    async def sweep(self) -> int:
        """One pass; returns how many executions it ended."""
        if not self.synced():
            metrics.VANISHED_SWEEPS_TOTAL.labels("skipped").inc()
            return 0
        started = self.monotonic()
        deployed = await self._list_deployed()
        if not self.synced():  # the cache went stale while we listed
            metrics.VANISHED_SWEEPS_TOTAL.labels("skipped").inc()
            return 0
        decision = decide_vanished(
            deployed,
            jobset_of=self.jobset_of,
            suspects=self.suspects,
            now=self.monotonic(),
            wall_now=self.wall_clock(),
            grace=self.settings.grace,
        )
        self.suspects = decision.suspects
        ended = 0
        for execution in decision.due:
            ended += await self._end(execution)
        self._prune_tombstones()
        metrics.VANISHED_SUSPECTS.set(len(self.suspects))
        metrics.VANISHED_SWEEPS_TOTAL.labels("done").inc()
        metrics.VANISHED_SWEEP_SECONDS.observe(self.monotonic() - started)
        if self.suspects or ended:
            log.info("vanished-JobSet sweep", deployed=len(deployed),
                     missing=len(self.suspects), ended=ended)  # fmt: skip
        return ended

    async def _list_deployed(self) -> list[DeployedExecution]:
        found: list[DeployedExecution] = []
        token = ""
        while True:
            page, token = await self.ess.deployed(
                page_token=token, page_size=self.settings.page_size
            )
            found += page
            if not token:
                return found

    async def _end(self, execution: DeployedExecution) -> int:
        """Confirm with a GET, then write FAILED; 1 when the ESS applied it."""
        key = (execution.xid, execution.wid, execution.eid)
        name = jobset_name(execution.xid, execution.wid)
        bound = log.bind(xid=execution.xid, wid=execution.wid, eid=execution.eid, jobset=name)
        if has_its_jobset(await self.kube.get(JOBSETS, self.namespace, name), execution.eid):
            bound.info("JobSet missing from the cache is there: the cache was behind")
            self.suspects.pop(key, None)
            return 0
        tombstone = self._tombstones.get(name)
        uid = tombstone[0] if tombstone is not None and tombstone[1] == execution.eid else None
        observation = vanished_observation(execution, uid=uid, wall_now=self.wall_clock())
        (result,) = await self.ess.update([observation], writer=WRITER)
        self.suspects.pop(key, None)
        if (
            result.outcome == UpdateResult.APPLIED
            and WorkUnitState(result.state) is WorkUnitState.FAILED
        ):
            metrics.VANISHED_JOBSETS_TOTAL.inc()
            bound.error("JobSet vanished without XMC's finalizer; execution ended FAILED", uid=uid)
            return 1
        bound.info("vanished JobSet: the ESS kept the execution as it is",
                   outcome=UpdateResult.Outcome.Name(result.outcome),
                   state=WorkUnitState(result.state).name,
                   rejection=result.state_rejection)  # fmt: skip
        return 0

    def _prune_tombstones(self) -> None:
        oldest = self.monotonic() - max(_TOMBSTONE_SECONDS, 4 * self.settings.grace.total_seconds())
        for name in [n for n, (_, _, at) in self._tombstones.items() if at < oldest]:
            del self._tombstones[name]
