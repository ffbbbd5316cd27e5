"""The store as the services use it: the one ``xmc.store`` module a service may import
(import-linter contract "Services use the store only through xmc.store.transactions").

Two services write Postgres: the ESS (intents, observations, the outbox relay, the resume
worker, the janitor) and the Actuator, which settles the tasks it carried out, parks them
while scheduling is paused, and records the execution states whose outcome only it knows
(docs/decisions/0033). Every write either runs is named here; the rest of ``xmc.store``
(one module per table group) is how they are done, free to change without touching a
service.

Each function runs in the caller's transaction, opened on the ``Store`` facade
(``Store.transaction()``, or ``Store.connection()`` for a single read): a caller composes
several in one transaction (the relay abandons many tasks in one pass, the ESS writes a
work unit, its Operation and its task together). ``Store`` itself is exported because every
service owns one pool and decides where its transactions begin and end.

"Finish a task" is :func:`finish_task`, whoever finishes it: the Actuator settling a
result, the relay abandoning an undeliverable task, the resume worker skipping a parked
one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import structlog
from google.protobuf.message import Message

from xmc.errors import NotFoundError
from xmc.messages import backend_message
from xmc.model.audit import Actor
from xmc.model.manifest import KeptManifest
from xmc.model.merge import ExecutionUpdate
from xmc.model.states import Severity, WorkUnitState
from xmc.store import operations, outbox, scheduling
from xmc.store.arg_stats import (
    MAX_ARG_GROUPS,
    ArgKeys,
    StoredArgGroup,
    arg_groups,
    arg_key_order,
    arg_keys,
    arg_spreads,
)
from xmc.store.artifacts import (
    ARTIFACT_UPDATABLE,
    delete_artifact,
    fetch_artifact,
    insert_artifact,
    list_artifacts,
    update_artifact,
)
from xmc.store.audit import (
    AuditQuery,
    StoredAuditEvent,
    delete_expired_audit,
    list_audit_events,
    record_audit,
)
from xmc.store.business import confirm_first_starts, count_live_units
from xmc.store.connection import Connection, try_transaction_lock
from xmc.store.container_logs import (
    StoredLog,
    experiment_log_bytes,
    fetch_current_execution,
    fetch_exit_codes,
    fetch_logs,
    record_captures,
)
from xmc.store.creation import (
    Created,
    CreateOutcome,
    ExperimentAccess,
    NewWorkUnit,
    create_work_units,
)
from xmc.store.deployed import decode_page_token as decode_deployed_page_token
from xmc.store.deployed import encode_page_token as encode_deployed_page_token
from xmc.store.deployed import list_deployed
from xmc.store.deployed import page_size as deployed_page_size
from xmc.store.executions import (
    ItemResult,
    UpdateOutcome,
    update_work_unit_executions,
    write_decided_state,
)
from xmc.store.experiments import (
    EXPERIMENT_UPDATABLE,
    fetch_experiment,
    fetch_experiment_priority,
    insert_experiment,
    list_experiments,
    update_experiment,
)
from xmc.store.experiments import update_launch_state as update_experiment_launch_state
from xmc.store.listing import ListRequest
from xmc.store.manifests import StoredManifest, fetch_manifest, record_manifest
from xmc.store.migrate import migrate
from xmc.store.notifications import (
    DueDelivery,
    StoredAttempt,
    StoredDelivery,
    StoredWebhook,
    claim_due_deliveries,
    delete_expired_deliveries,
    delete_webhook,
    fetch_webhook,
    insert_webhook,
    list_deliveries,
    list_webhooks,
    queue_settled_events,
    record_attempt,
)
from xmc.store.operations import (
    ActionType,
    NewOperation,
    delete_expired_operations,
    fetch_operation,
    insert_operation,
    list_operations,
)
from xmc.store.outbox import (
    ExecutionTasks,
    OutboxStatus,
    OutboxTask,
    TaskFacts,
    check_every_published_now,
    check_later,
    claim_due,
    fetch_task_facts,
    mark_published,
    oldest_unfinished_entry,
    scan_intent_states,
)
from xmc.store.outbox import delete_expired as delete_expired_outbox_rows
from xmc.store.outbox import enqueue as enqueue_tasks
from xmc.store.outbox import rearm as rearm_task
from xmc.store.quotas import (
    StoredQuota,
    delete_quota_limits,
    fetch_quotas,
    fetch_usage,
    fold_all_quota_deltas,
    lock_usage,
    reconcile_usage,
    save_tokens,
    set_quota_limits,
)
from xmc.store.read_access import (
    fetch_artifact_parent,
    fetch_readers,
    fetch_webhook_experiment,
    readable_experiments_sql,
)
from xmc.store.repository import Store, wait_for_postgres
from xmc.store.retries import (
    StoredDecision,
    attempt_of,
    fetch_decisions,
    fetch_experiment_retry_policy,
    record_decision,
    retry_row,
    set_experiment_retry_policy,
    take_retry_slot,
)
from xmc.store.scheduling import (
    ParkedTask,
    Resolution,
    SchedulingControl,
    claim_parked_tasks,
    delete_expired_paused_tasks,
    fetch_scheduling_control,
    mark_orphaned_parked_tasks,
    mark_processed,
    set_paused,
)
from xmc.store.status_messages import list_status_messages
from xmc.store.timelines import PhaseStatistics, Timings, fetch_timings, fetch_unit_history
from xmc.store.usage import (
    ClosedRun,
    ExecutionRuns,
    GroupBy,
    Grouped,
    claim_closed_runs,
    fetch_execution_runs,
    fetch_grouped_usage,
    fetch_series,
    require_experiment,
)
from xmc.store.watch_events import (
    StoredEvent,
    delete_expired_experiment_events,
    read_after,
    read_horizon,
    read_snapshot,
    read_window,
)
from xmc.store.work_units import (
    WORK_UNIT_UPDATABLE,
    fetch_work_unit,
    list_work_units,
    restart_work_unit,
    select_work_unit_ids,
    update_work_unit,
)
from xmc.tasks import task_execution_id
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1.tasks_pb2 import Task

__all__ = [
    "ARTIFACT_UPDATABLE",
    "EXPERIMENT_UPDATABLE",
    "MAX_ARG_GROUPS",
    "WORK_UNIT_UPDATABLE",
    "ActionType",
    "ArgKeys",
    "AuditQuery",
    "ClosedRun",
    "Connection",
    "CreateOutcome",
    "Created",
    "DueDelivery",
    "ExecutionRuns",
    "ExecutionTasks",
    "ExperimentAccess",
    "GroupBy",
    "Grouped",
    "ItemResult",
    "KeptManifest",
    "ListRequest",
    "NewOperation",
    "NewWorkUnit",
    "OutboxStatus",
    "OutboxTask",
    "ParkedTask",
    "PhaseStatistics",
    "Resolution",
    "SchedulingControl",
    "StateWrite",
    "Store",
    "StoredArgGroup",
    "StoredAttempt",
    "StoredAuditEvent",
    "StoredDecision",
    "StoredDelivery",
    "StoredEvent",
    "StoredLog",
    "StoredManifest",
    "StoredQuota",
    "StoredWebhook",
    "TaskFacts",
    "Timings",
    "UpdateOutcome",
    "arg_groups",
    "arg_key_order",
    "arg_keys",
    "arg_spreads",
    "attempt_of",
    "check_every_published_now",
    "check_later",
    "claim_closed_runs",
    "claim_due",
    "claim_due_deliveries",
    "claim_parked_tasks",
    "confirm_first_starts",
    "count_live_units",
    "create_work_units",
    "decode_deployed_page_token",
    "delete_artifact",
    "delete_expired_audit",
    "delete_expired_deliveries",
    "delete_expired_experiment_events",
    "delete_expired_operations",
    "delete_expired_outbox_rows",
    "delete_expired_paused_tasks",
    "delete_quota_limits",
    "delete_webhook",
    "deployed_page_size",
    "encode_deployed_page_token",
    "enqueue_tasks",
    "experiment_log_bytes",
    "failed_execution_write",
    "fetch_artifact",
    "fetch_artifact_parent",
    "fetch_current_execution",
    "fetch_decisions",
    "fetch_execution_runs",
    "fetch_exit_codes",
    "fetch_experiment",
    "fetch_experiment_priority",
    "fetch_experiment_retry_policy",
    "fetch_grouped_usage",
    "fetch_logs",
    "fetch_manifest",
    "fetch_operation",
    "fetch_quotas",
    "fetch_readers",
    "fetch_scheduling_control",
    "fetch_series",
    "fetch_task_facts",
    "fetch_timings",
    "fetch_unit_history",
    "fetch_usage",
    "fetch_webhook",
    "fetch_webhook_experiment",
    "fetch_work_unit",
    "finish_task",
    "fold_all_quota_deltas",
    "insert_artifact",
    "insert_experiment",
    "insert_operation",
    "insert_webhook",
    "list_artifacts",
    "list_audit_events",
    "list_deliveries",
    "list_deployed",
    "list_experiments",
    "list_operations",
    "list_status_messages",
    "list_webhooks",
    "list_work_units",
    "lock_usage",
    "mark_orphaned_parked_tasks",
    "mark_processed",
    "mark_published",
    "migrate",
    "oldest_unfinished_entry",
    "park_task",
    "queue_settled_events",
    "read_after",
    "read_horizon",
    "read_snapshot",
    "read_window",
    "readable_experiments_sql",
    "rearm_task",
    "reconcile_usage",
    "record_attempt",
    "record_audit",
    "record_captures",
    "record_decision",
    "require_experiment",
    "restart_work_unit",
    "retry_row",
    "save_tokens",
    "scan_intent_states",
    "select_work_unit_ids",
    "set_experiment_retry_policy",
    "set_paused",
    "set_quota_limits",
    "take_retry_slot",
    "try_transaction_lock",
    "update_artifact",
    "update_experiment",
    "update_experiment_launch_state",
    "update_work_unit",
    "update_work_unit_executions",
    "wait_for_postgres",
    "write_decided_state",
]

log = structlog.get_logger()


@dataclass(frozen=True)
class StateWrite:
    """A masked write of ``state`` (and a system message, if any) for execution ``eid``."""

    eid: int
    state: WorkUnitState
    message: StructuredMessage | None = None


async def finish_task(
    conn: Connection,
    task: Task,
    *,
    outcome: str,
    writer: str,
    actor: Actor,
    now: datetime,
    state: StateWrite | None = None,
    response: Message | None = None,
    error: tuple[int, str] | None = None,
    manifest: KeptManifest | None = None,
) -> ItemResult | None:
    """Finish ``task`` for good, in the caller's transaction, so it never half-finishes:

    1. its outbox row records ``outcome``: the relay stops checking it, and a replayed
       entry of it is refused (a row already finished stays as it was);
    2. ``state``, if any, is written through the masked path, so the guard still decides
       (``write_decided_state``); its result is returned (None without a write);
    3. the task's Operation, if it has one, counts it done, with ``error`` (code,
       message) or ``response``. An Operation that no longer exists (expired after 90
       days, or never made) is logged and skipped: the task's effect still stands;
    4. ``manifest``, if any — the JobSet the task created — is recorded for its execution,
       so it is stored exactly when the outcome "created" is (decision 0039).
    """
    await outbox.finish(conn, task, outcome=outcome, now=now)
    written = None
    if state is not None:
        written = await write_decided_state(
            conn, task.xid, task.wid, state.eid, state.state,
            message=state.message, writer=writer, actor=actor, now=now,
        )  # fmt: skip
    if task.operation:
        try:
            await operations.finish_operation_task(
                conn, task.operation, now=now, response=response, error=error,
                task_id=task.task_id,
            )  # fmt: skip
        except NotFoundError:
            log.warning("the task's operation does not exist", operation=task.operation)
    if manifest is not None:
        await record_manifest(
            conn, task.xid, task.wid, task_execution_id(task), manifest,
            task_id=task.task_id, now=now,
        )  # fmt: skip
    return written


async def park_task(
    conn: Connection,
    task: Task,
    *,
    mark: ExecutionUpdate | None,
    writer: str,
    actor: Actor,
    now: datetime,
) -> bool:
    """Park ``task`` while scheduling is paused, in the caller's transaction: in
    PausedTasks (where the resume worker finds it) and in the outbox (so the relay does
    not re-drive it meanwhile); the first time, also ``mark``, the masked write that shows
    the work unit waiting. False when it was parked already (a redelivery): nothing
    changes, so a task is parked exactly once."""
    await outbox.park(conn, task, now=now)
    first_time = await scheduling.park_task(
        conn,
        task_id=task.task_id,
        xid=task.xid,
        wid=task.wid,
        # The resume worker judges a parked task by its target eid (ShouldSkipTask).
        eid=task.target_eid,
        kind=task.kind,
        task=task.SerializeToString(deterministic=True),
        now=now,
    )
    if first_time and mark is not None:
        await update_work_unit_executions(conn, [mark], writer=writer, actor=actor, now=now)
    return first_time


def failed_execution_write(task: Task, text: str) -> StateWrite:
    """The FAILED write of a create or restart that can never start: the work unit must
    not hang in INITIALIZING or RESTARTING."""
    return StateWrite(
        task_execution_id(task),
        WorkUnitState.FAILED,
        backend_message(Severity.FATAL, task.xid, task.wid, text),
    )
