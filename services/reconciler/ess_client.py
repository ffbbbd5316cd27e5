"""The Reconciler's only way to ESS: masked observation writes, work-unit look-ups and the
listing of deployed executions (the vanished-JobSet sweep).

gRPC errors are classified here, once (STYLE: one classification per boundary):
``EssUnavailable`` means "try again later, nothing is wrong with the request" (the batcher
puts the items back); ``EssRejected`` means ESS refused the request itself, so resending the
same bytes cannot help. Every call carries a deadline, so a hung ESS looks unavailable
instead of stalling a flush slot forever.

Fencing (decision 0054): with leader election, every ``UpdateWorkUnitExecutions`` carries
the generation of the leader's term in its metadata (``fencing``, the LeaderElector), and
a refusal of it (FAILED_PRECONDITION, ``EssFenced``) is told back to the elector.

Identity: the internal write RPC accepts only service identities (SPEC §2.4); the bearer
token comes from ``XMC_SERVICE_TOKEN`` (``xmc.settings.ServiceClientSettings``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final, Protocol

import grpc

from reconciler import metrics
from reconciler.observation import Observation
from reconciler.observe import WorkUnitSnapshot
from xmc.ess_retry import channel_options
from xmc.keepalive import grpc_client_options
from xmc.model.deployed import DeployedExecution
from xmc.model.fence import Fence, parse_refusal
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc.names import work_unit_ids, work_unit_name
from xmc.retry import Backoffs
from xmc.timestamps import to_datetime
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import executions_pb2, executions_pb2_grpc, logs_pb2, logs_pb2_grpc

UpdateResult = executions_pb2.UpdateWorkUnitExecutionResult

#: Codes that say nothing about the request: ESS is down, overloaded, or too slow, or
#: (CANCELLED: this client never cancels a call) stopped before it started the call
#: (grpc/grpc#41785; decision 0055). A CANCELLED taken for a verdict was bisected and
#: its observations dropped.
_TRANSIENT: frozenset[grpc.StatusCode] = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)


#: Reconnect quickly to a restarted ESS: gRPC's default backoff (1 s, ×1.6, up to 120 s)
#: kept the finalizer path failing seconds after a new ESS was serving. Calls a draining
#: ESS dropped are resent by XMC's client rule (``xmc.ess_retry``) before the batcher
#: sees them fail.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 5000),
    *channel_options(),
)


class EssError(Exception):
    """A failed ESS call; ``code`` is the gRPC status code."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class EssUnavailable(EssError):
    """ESS could not be reached or did not answer in time: retry the same request later."""


class EssRejected(EssError):
    """ESS refused the request (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED, …)."""


class EssFenced(EssRejected):
    """ESS refused a write of generation ``refused``: it has seen ``newest``, a newer
    leader's. Sending it again cannot help; this replica no longer leads."""

    def __init__(self, code: grpc.StatusCode, details: str, refused: int, newest: int) -> None:
        super().__init__(code, details)
        self.refused = refused
        self.newest = newest


class Fencing(Protocol):
    """What the client needs of the leader election (``LeaderElector``)."""

    def fence(self) -> Fence: ...

    def fenced(self, refused: int, newest: int) -> None: ...


def classify(error: grpc.aio.AioRpcError) -> EssError:
    """The typed error for a failed RPC (pure)."""
    code = error.code()
    details = error.details() or ""
    if code in _TRANSIENT:
        return EssUnavailable(code, details)
    if code == grpc.StatusCode.FAILED_PRECONDITION and (fenced := parse_refusal(details)):
        return EssFenced(code, details, *fenced)
    return EssRejected(code, details)


#: Codes that may be a passing server fault rather than a verdict on the request: retried
#: a bounded number of times, with these delays (seconds), before the batch is dropped.
_RETRIED_REJECTIONS: frozenset[grpc.StatusCode] = frozenset(
    {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
)
REJECTED_RETRIES: Final = Backoffs((0.5, 1.0, 2.0, 4.0))


def retry_rejected(error: EssRejected, attempt: int) -> float | None:
    """Seconds to wait before sending a refused batch again (attempt is 1-based), or None
    to drop it: INTERNAL and UNKNOWN a few times, a verdict on the request never (pure)."""
    if error.code not in _RETRIED_REJECTIONS:
        return None
    return REJECTED_RETRIES.within(attempt)


def is_verdict(error: EssRejected) -> bool:
    """Whether the ESS refused the request for what it is (not a passing fault) (pure)."""
    return error.code not in _RETRIED_REJECTIONS


class TerminalWrite(enum.StrEnum):
    """What one finalizer write came to; also a metric label."""

    #: The execution is terminal now, by this write or an earlier one (a COMPLETED before
    #: the stop, the Actuator's STOPPED): the finalizer may go.
    LANDED = "landed"
    #: The JobSet belongs to an older execution (EID fence): nothing of it is to be kept.
    FENCED = "fenced"
    #: The work unit no longer exists.
    GONE = "gone"
    #: The execution is still live: the terminal state was refused. Removing the finalizer
    #: now would leave it live for good, so this is a failure to report and retry.
    REJECTED = "rejected"


def judge_terminal_write(result: UpdateResult) -> TerminalWrite:
    """Whether a terminal write of the finalizer path took effect (pure)."""
    if result.outcome == UpdateResult.STALE_EXECUTION:
        return TerminalWrite.FENCED
    if result.outcome == UpdateResult.NOT_FOUND:
        return TerminalWrite.GONE
    if WorkUnitState(result.state) in EXECUTION_TERMINAL_STATES:
        return TerminalWrite.LANDED
    return TerminalWrite.REJECTED


def snapshot_of(work_unit: WorkUnit) -> WorkUnitSnapshot:
    """``…/executions/{eid}`` of the current execution plus its state (pure)."""
    current = work_unit.current_work_unit_execution
    eid = int(current.name.rsplit("/", 1)[1]) if current.name else 0
    return WorkUnitSnapshot(eid=eid, state=WorkUnitState(current.status.state))


def deployed_of(item: executions_pb2.DeployedExecution) -> DeployedExecution | None:
    """The wire item as data (pure); None for a work-unit name this client cannot read."""
    ids = work_unit_ids(item.work_unit)
    if ids is None:
        return None
    return DeployedExecution(
        xid=ids[0],
        wid=ids[1],
        eid=item.execution_id,
        state=WorkUnitState(item.state),
        state_update_time=to_datetime(item.state_update_time),
        deploy_time=to_datetime(item.deploy_time) if item.HasField("deploy_time") else None,
    )


class EssClient:
    """One ``grpc.aio`` channel to ESS, used by every flush and look-up of the Reconciler."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None,
        tls: bool = False,
        deadline: float = 10.0,
        dead_peer_seconds: float = 20.0,
    ) -> None:
        """``dead_peer_seconds``: gRPC pings drop a connection the ESS stopped answering
        (``xmc.keepalive``), so a cut path costs reconnects, not calls on a dead one."""
        options = [*_CHANNEL_OPTIONS, *grpc_client_options(dead_peer_seconds)]
        self._channel = (
            grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(), options)
            if tls
            else grpc.aio.insecure_channel(target, options)
        )
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self._deadline = deadline
        #: Set by the Reconciler with leader election: its writes carry the term's token.
        self.fencing: Fencing | None = None
        self._executions = executions_pb2_grpc.WorkUnitExecutionServiceStub(self._channel)
        self._api = api_pb2_grpc.ExperimentStateServiceStub(self._channel)
        self._logs = logs_pb2_grpc.ContainerLogServiceStub(self._channel)

    async def update(
        self, observations: Sequence[Observation], *, writer: str
    ) -> list[executions_pb2.UpdateWorkUnitExecutionResult]:
        """One ``UpdateWorkUnitExecutions`` call; one result per observation, in order."""
        request = executions_pb2.UpdateWorkUnitExecutionsRequest(
            updates=[o.to_update() for o in observations], writer=writer
        )
        fencing = self.fencing
        metadata = self._metadata + (() if fencing is None else fencing.fence().metadata())
        try:
            response = await self._executions.UpdateWorkUnitExecutions(
                request, metadata=metadata, timeout=self._deadline
            )
        except grpc.aio.AioRpcError as exc:
            error = classify(exc)
            if isinstance(error, EssFenced) and fencing is not None:
                metrics.FENCED_WRITES_TOTAL.inc()
                fencing.fenced(error.refused, error.newest)
            raise error from exc
        results = list(response.results)
        for result in results:
            metrics.WRITE_RESULTS_TOTAL.labels(
                outcome=UpdateResult.Outcome.Name(result.outcome)
            ).inc()
        return results

    async def work_unit(self, xid: int, wid: int) -> WorkUnitSnapshot | None:
        """The work unit's current eid and state; ``None`` if it does not exist (any more)."""
        try:
            work_unit = await self._api.GetWorkUnit(
                api_pb2.GetWorkUnitRequest(name=work_unit_name(xid, wid)),
                metadata=self._metadata,
                timeout=self._deadline,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise classify(exc) from exc
        return snapshot_of(work_unit)

    async def deployed(
        self, *, page_token: str, page_size: int
    ) -> tuple[list[DeployedExecution], str]:
        """One page of ``ListDeployedExecutions`` and the token of the next ("" at the end)."""
        try:
            response = await self._executions.ListDeployedExecutions(
                executions_pb2.ListDeployedExecutionsRequest(
                    page_size=page_size, page_token=page_token
                ),
                metadata=self._metadata,
                timeout=self._deadline,
            )
        except grpc.aio.AioRpcError as exc:
            raise classify(exc) from exc
        items = [deployed_of(item) for item in response.executions]
        return [item for item in items if item is not None], response.next_page_token

    async def record_logs(self, captures: Sequence[logs_pb2.ContainerLogCapture]) -> list[bool]:
        """One ``RecordContainerLogs`` call; per capture, whether its unit exists."""
        try:
            response = await self._logs.RecordContainerLogs(
                logs_pb2.RecordContainerLogsRequest(captures=captures),
                metadata=self._metadata,
                timeout=self._deadline,
            )
        except grpc.aio.AioRpcError as exc:
            raise classify(exc) from exc
        return list(response.stored)

    async def close(self) -> None:
        await self._channel.close()
