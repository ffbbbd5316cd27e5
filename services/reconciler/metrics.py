"""Prometheus metrics of the Reconciler (exposed by ``xmc-reconciler --metrics-listen``).

Every label is low-cardinality by construction: ``Source`` values and the ESS's
per-item outcome names, never ids.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

OBSERVATIONS_TOTAL = Counter(
    "xmc_reconciler_observations_total",
    "Observations handed to the UpdateBatcher, by source (jobset, workload, pod)",
    ["source"],
)
COALESCED_TOTAL = Counter(
    "xmc_reconciler_coalesced_total",
    "Pending observations replaced by a newer one of the same slot before being sent",
    ["source"],
)
PENDING_UPDATES = Gauge(
    "xmc_reconciler_pending_updates", "Observations waiting in the UpdateBatcher"
)
WRITES_TOTAL = Counter(
    "xmc_reconciler_writes_total",
    "Observations sent to ESS in a successful UpdateWorkUnitExecutions call, by source",
    ["source"],
)
WRITE_RESULTS_TOTAL = Counter(
    "xmc_reconciler_write_results_total",
    "Per-item results of UpdateWorkUnitExecutions (APPLIED, UNCHANGED, STALE_EXECUTION, NOT_FOUND)",
    ["outcome"],
)
FLUSH_SECONDS = Histogram(
    "xmc_reconciler_flush_seconds",
    "Time one UpdateBatcher flush took to send all its batches (failed flushes included)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
UPDATES_DROPPED_NOT_LEADING_TOTAL = Counter(
    "xmc_reconciler_updates_dropped_not_leading_total",
    "Observations the UpdateBatcher held when this replica stopped leading, dropped unsent "
    "(the next leader re-observes its cache)",
)
FLUSH_FAILURES_TOTAL = Counter(
    "xmc_reconciler_flush_failures_total",
    "UpdateBatcher flushes whose send raised; their items were put back for the next flush",
)
FINALIZER_RETRIES_TOTAL = Counter(
    "xmc_reconciler_finalizer_retries_total",
    "Attempts to write the final status of a deleted JobSet that failed and will be retried",
)
TERMINAL_WRITES_REJECTED_TOTAL = Counter(
    "xmc_reconciler_terminal_writes_rejected_total",
    "Finalizer-path terminal writes the ESS refused (the execution stayed live), by guard "
    "reason; the finalizer is kept and the write retried",
    ["reason"],
)
FINALIZERS_FORCE_REMOVED_TOTAL = Counter(
    "xmc_reconciler_finalizers_force_removed_total",
    "Finalizers removed without a successful final write, after maxStoppedWriteRetryAge",
)
ORPHANS_DELETED_TOTAL = Counter(
    "xmc_reconciler_orphans_deleted_total",
    "JobSets deleted as orphans (older eid than the work unit's, or terminal / gone work unit)",
)
OBSERVATIONS_DROPPED_TOTAL = Counter(
    "xmc_reconciler_observations_dropped_total",
    "Observations of batches the ESS refused (after bounded retries of INTERNAL), by code",
    ["code"],
)
RELISTS_TOTAL = Counter(
    "xmc_reconciler_relists_total",
    "Full lists of a watched resource, by resource and reason (initial; expired: 410; "
    "too_large: the server had never reached the watch's resourceVersion; retry)",
    ["resource", "reason"],
)
VANISHED_JOBSETS_TOTAL = Counter(
    "xmc_reconciler_vanished_jobsets_total",
    "Executions ended FAILED because their JobSet disappeared from the cluster without "
    "passing XMC's finalizer (counted when the ESS applied the write)",
)
VANISHED_SWEEPS_TOTAL = Counter(
    "xmc_reconciler_vanished_sweeps_total",
    "Passes of the vanished-JobSet sweep, by result (done; skipped: a watch not synced or "
    "not leading; failed: the ESS or the cluster could not be read)",
    ["result"],
)
VANISHED_SWEEP_SECONDS = Histogram(
    "xmc_reconciler_vanished_sweep_seconds",
    "Time one completed pass of the vanished-JobSet sweep took (listing included)",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
VANISHED_SUSPECTS = Gauge(
    "xmc_reconciler_vanished_suspects",
    "Executions the last sweep found without their JobSet and still inside the grace period",
)
WORKQUEUE_DEPTH = Gauge(
    "xmc_reconciler_workqueue_depth",
    "Keys (JobSet names) waiting for a worker of the work queue, by queue",
    ["queue"],
)
WORKQUEUE_ADDS_TOTAL = Counter(
    "xmc_reconciler_workqueue_adds_total",
    "Keys added to the work queue that were not already waiting (the rest coalesced), by queue",
    ["queue"],
)
WORKQUEUE_WAIT_SECONDS = Histogram(
    "xmc_reconciler_workqueue_wait_seconds",
    "Time a key waited in the work queue before a worker took it, by queue",
    ["queue"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
WORKQUEUE_PROCESSING_SECONDS = Histogram(
    "xmc_reconciler_workqueue_processing_seconds",
    "Time one run of a key took (its Kubernetes reads included), by queue",
    ["queue"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30),
)
WORKQUEUE_RETRIES_TOTAL = Counter(
    "xmc_reconciler_workqueue_retries_total",
    "Runs of a key that raised and were scheduled again after a backoff, by queue",
    ["queue"],
)
WORKQUEUE_DROPPED_TOTAL = Counter(
    "xmc_reconciler_workqueue_dropped_total",
    "Keys given up after their last retry also raised (the next event or resync adds them "
    "again), by queue",
    ["queue"],
)
LOG_CAPTURES_TOTAL = Counter(
    "xmc_reconciler_log_captures_total",
    "Container log captures by outcome: stored (the ESS has it), unavailable (no log could "
    "be read; the end is stored without text), dropped (queue full), lost (the ESS kept "
    "refusing)",
    ["outcome"],
)
LOG_CAPTURE_SECONDS = Histogram(
    "xmc_reconciler_log_capture_seconds",
    "Time the finalizer path spent capturing a deleted JobSet's logs",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
FENCED_WRITES_TOTAL = Counter(
    "xmc_reconciler_fenced_writes_total",
    "Writes the ESS refused because a newer leader's generation had written (decision 0054)",
)
