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

from xmc.model.manifest import KeptManifest
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
from xmc.store.business import count_live_units, fetch_first_running
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
from xmc.store.fences import check_fence
from xmc.store.listing import ListRequest
from xmc.store.manifests import StoredManifest, fetch_manifest
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
from xmc.store.task_settlement import (
    StateWrite,
    failed_execution_write,
    finish_task,
    park_task,
)
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
    "check_fence",
    "check_later",
    "claim_closed_runs",
    "claim_due",
    "claim_due_deliveries",
    "claim_parked_tasks",
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
    "fetch_first_running",
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
