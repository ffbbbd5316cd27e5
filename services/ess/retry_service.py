"""``xmc.v1.RetryService`` (docs/retries.md): an experiment's default retry policy, and a
unit's attempts. Reads are open to any authenticated caller, like every read of the ESS
(unless reads are restricted: ``ess.read_gate``);
setting a default is for the experiment's writers, like any change to it."""

from __future__ import annotations

from typing import Any

from ess.auth import require_writer_of
from ess.interceptor import actor, caller
from ess.retries import unit_policy
from xmc.errors import InvalidArgumentError, NotFoundError
from xmc.model.audit import AuditAction, AuditEntry
from xmc.model.retry_policy import (
    RETRY_POLICY_ANNOTATION,
    PolicyError,
    parse_retry_policy,
    policy_json,
)
from xmc.names import (
    experiment_name,
    parse_execution_name,
    parse_experiment_name,
    parse_work_unit_name,
)
from xmc.store.transactions import (
    Store,
    StoredDecision,
    attempt_of,
    fetch_decisions,
    fetch_experiment,
    fetch_experiment_retry_policy,
    fetch_work_unit,
    record_audit,
    set_experiment_retry_policy,
)
from xmc.timestamps import set_timestamp
from xmc_api.xmc.v1 import retry_pb2, retry_pb2_grpc

#: Longest policy document accepted (a policy lists at most 2 × 256 codes).
MAX_POLICY_CHARS = 4096


def _normalized(text: str, field: str) -> str | None:
    """The policy in ``text`` as stored ("" clears: None); INVALID_ARGUMENT names the key."""
    if not text.strip():
        return None
    if len(text) > MAX_POLICY_CHARS:
        raise InvalidArgumentError(f"{field}: at most {MAX_POLICY_CHARS} characters")
    try:
        return policy_json(parse_retry_policy(text))
    except PolicyError as error:
        key = f".{error.key}" if error.key else ""
        raise InvalidArgumentError(f"{field}{key}: {error.detail}") from None


def decision_message(stored: StoredDecision) -> retry_pb2.RetryDecision:
    message = retry_pb2.RetryDecision(
        execution_id=stored.eid,
        verdict=stored.verdict,
        attempt=stored.attempt,
        max_attempts=stored.max_attempts,
        disrupted=stored.disrupted,
        reason=stored.reason,
        retry_execution_id=stored.retry_eid or 0,
        retry_attempt=stored.retry_attempt or 0,
        counted=bool(stored.counted),
        operation=stored.operation or "",
    )
    if stored.exit_code is not None:
        message.exit_code = stored.exit_code
    if stored.due_time is not None:
        set_timestamp(message.start_time, stored.due_time)
    set_timestamp(message.decide_time, stored.decided_time)
    return message


class RetryService(retry_pb2_grpc.RetryServiceServicer):
    def __init__(self, store: Store) -> None:
        self._store = store

    async def GetExperimentRetryPolicy(
        self, request: retry_pb2.GetExperimentRetryPolicyRequest, context: Any
    ) -> retry_pb2.ExperimentRetryPolicy:
        xid = parse_experiment_name(request.name)
        async with self._store.connection() as conn:
            await fetch_experiment(conn, xid)  # NOT_FOUND names it
            text = await fetch_experiment_retry_policy(conn, xid)
        return retry_pb2.ExperimentRetryPolicy(
            name=f"{experiment_name(xid)}/retryPolicy", policy=text or ""
        )

    async def SetExperimentRetryPolicy(
        self, request: retry_pb2.SetExperimentRetryPolicyRequest, context: Any
    ) -> retry_pb2.ExperimentRetryPolicy:
        xid = parse_experiment_name(request.name)
        text = _normalized(request.policy, "policy")
        async with self._store.transaction() as conn:
            require_writer_of(caller(), await fetch_experiment(conn, xid))
            if not await set_experiment_retry_policy(conn, xid, text):
                raise NotFoundError(f"name: {experiment_name(xid)} does not exist")
            entry = AuditEntry(
                AuditAction.SET_RETRY_POLICY, experiment_name(xid), xid, text or "(cleared)"
            )
            await record_audit(conn, actor(), entry, now=self._store.clock())
        return retry_pb2.ExperimentRetryPolicy(
            name=f"{experiment_name(xid)}/retryPolicy", policy=text or ""
        )

    async def GetWorkUnitRetries(
        self, request: retry_pb2.GetWorkUnitRetriesRequest, context: Any
    ) -> retry_pb2.WorkUnitRetries:
        xid, wid = parse_work_unit_name(request.name)
        async with self._store.transaction() as conn:
            work_unit = await fetch_work_unit(conn, xid, wid)
            default = await fetch_experiment_retry_policy(conn, xid)
            _, _, eid = parse_execution_name(work_unit.current_work_unit_execution.name)
            attempt = await attempt_of(conn, xid, wid, eid)
            decisions = await fetch_decisions(conn, xid, wid)
        policy = unit_policy(work_unit, default)
        own = RETRY_POLICY_ANNOTATION in work_unit.executable.jobset.annotations
        response = retry_pb2.WorkUnitRetries(
            name=f"{work_unit.name}/retries",
            policy=policy_json(policy) if policy else "",
            policy_source=("work_unit" if own else "experiment") if policy else "",
            execution_id=eid,
            attempt=attempt.number,
            max_attempts=policy.max_attempts if policy else 0,
        )
        response.decisions.extend(decision_message(d) for d in decisions)
        return response
