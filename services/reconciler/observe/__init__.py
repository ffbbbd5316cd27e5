"""What the Reconciler reads off JobSets, Workloads and Pods (SPEC §8), as pure functions.

Every function takes the objects exactly as the API server returns them (JSON-shaped
mappings, camelCase keys, absent or null fields tolerated) and returns data: an
:class:`~reconciler.observation.Observation` for the UpdateBatcher, a message, or a frozen
decision with a small enum the shell can act on and label metrics with. Nothing here does
I/O or reads a clock, so the watch loop, the finalizer path and the orphan sweep can be
tested case by case.

Modules, one per object or rule: ``read`` (the XMC ids, the JobSet an object belongs to;
the tolerant readers are ``xmc.kjson``), ``jobset`` (§8.1), ``workload`` (§8.2), ``pods``
(§8.3), ``finalizer`` (§8.4), ``orphans`` (§8.6).
"""

from reconciler.observe.finalizer import (
    DEFAULT_MAX_STOPPED_WRITE_RETRY_AGE,
    FinalizerAction,
    FinalizerDecision,
    decide_finalizer,
    finalizer_removal_patch,
)
from reconciler.observe.jobset import (
    FAILED_JOBSET_MASK,
    JOBSET_MASK,
    jobset_metadata,
    jobset_pods,
    jobset_state_rule,
    jobset_status,
    observe_jobset,
)
from reconciler.observe.orphans import (
    OrphanDecision,
    OrphanReason,
    WorkUnitSnapshot,
    decide_orphan,
)
from reconciler.observe.pods import (
    DEFAULT_STARTUP_GRACE,
    POD_MASK,
    STARTUP_FAILURE_REASONS,
    StuckContainer,
    cluster_error,
    observe_pods,
    startup_diagnostics,
)
from reconciler.observe.read import JOBSET_NAME_LABEL, JOBSET_UID_LABEL, belongs_to, work_unit_ids
from reconciler.observe.workload import (
    WAITING_REASONS,
    WORKLOAD_MASK,
    QueuePosition,
    observe_workload,
    scheduling_message,
    workload_metadata,
    workload_owner,
)

__all__ = [
    "DEFAULT_MAX_STOPPED_WRITE_RETRY_AGE",
    "DEFAULT_STARTUP_GRACE",
    "FAILED_JOBSET_MASK",
    "JOBSET_MASK",
    "JOBSET_NAME_LABEL",
    "JOBSET_UID_LABEL",
    "POD_MASK",
    "STARTUP_FAILURE_REASONS",
    "WAITING_REASONS",
    "WORKLOAD_MASK",
    "FinalizerAction",
    "FinalizerDecision",
    "OrphanDecision",
    "OrphanReason",
    "QueuePosition",
    "StuckContainer",
    "WorkUnitSnapshot",
    "belongs_to",
    "cluster_error",
    "decide_finalizer",
    "decide_orphan",
    "finalizer_removal_patch",
    "jobset_metadata",
    "jobset_pods",
    "jobset_state_rule",
    "jobset_status",
    "observe_jobset",
    "observe_pods",
    "observe_workload",
    "scheduling_message",
    "startup_diagnostics",
    "work_unit_ids",
    "workload_metadata",
    "workload_owner",
]
