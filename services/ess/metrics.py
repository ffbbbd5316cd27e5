"""Prometheus metrics of the ESS (exposed by ``xmc-ess serve --metrics-listen``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RPC_TOTAL = Counter(
    "xmc_ess_rpc_total", "RPCs served, by method and status code", ["method", "code"]
)
RPC_SECONDS = Histogram(
    "xmc_ess_rpc_seconds",
    "RPC latency by method",
    ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
TASKS_ENQUEUED = Counter(
    "xmc_ess_tasks_enqueued_total", "Tasks the outbox relay put on the task stream", ["kind"]
)
TASKS_REDRIVEN = Counter(
    "xmc_ess_tasks_redriven_total",
    "Published tasks the relay published again: the stream lost them or they were refused",
    ["kind"],
)
TASKS_ABANDONED = Counter(
    "xmc_ess_tasks_abandoned_total",
    "Tasks the relay gave up on after max_publishes; their Operation was closed with an error",
)
RELAY_PASS_FAILURES = Counter(
    "xmc_ess_relay_pass_failures_total",
    "Outbox relay passes that failed (Redis or Postgres unavailable) and were retried",
)
TASKS_RESUMED = Counter(
    "xmc_ess_paused_tasks_total", "Parked tasks handled by the resume worker", ["resolution"]
)
TASK_STREAM_TRIMMED = Counter(
    "xmc_ess_task_stream_trimmed_total",
    "Entries the relay trimmed from the task stream: their tasks were finished",
)
CREATES_ABANDONED_AFTER_COMMIT = Counter(
    "xmc_ess_creates_abandoned_after_commit_total",
    "CreateWorkUnit calls whose caller gave up (deadline, cancel) during the COMMIT that "
    "created their unit: the unit exists and the caller was not told",
)
JWKS_FETCHES = Counter(
    "xmc_ess_jwks_fetches_total",
    "Fetches of the OIDC issuer's key set (XMC_AUTH_JWKS_URL), by outcome (ok, failed)",
    ["outcome"],
)
JWKS_KEYS = Gauge("xmc_ess_jwks_keys", "Signature keys held from XMC_AUTH_JWKS_URL")
WATCHERS = Gauge("xmc_ess_watchers", "Open WatchExperiments streams on this ESS (docs/watch.md)")
WATCH_EVENTS = Counter(
    "xmc_ess_watch_events_total", "Events the watch hub read and offered to its watchers"
)
WATCH_CATCH_UPS = Counter(
    "xmc_ess_watch_catch_ups_total",
    "Database reads of one watcher: a resume from a cursor, or a watcher that overflowed",
)
# Accounting (docs/usage.md): each run counted once it ends, by the ESS replica that claims it.
# Labels are bounded (xmc.model.usage.bounded_label): the queue and the accelerator type,
# never a user or an experiment.
RUN_SECONDS = Counter(
    "xmc_ess_run_seconds_total", "Seconds executions ran (RUNNING or PARTIALLY_FAILED)", ["queue"]
)
CPU_SECONDS = Counter(
    "xmc_ess_cpu_seconds_total", "Requested CPUs × seconds run, of ended runs", ["queue"]
)
MEMORY_GIB_SECONDS = Counter(
    "xmc_ess_memory_gib_seconds_total", "Requested memory (GiB) × seconds run", ["queue"]
)
GPU_SECONDS = Counter(
    "xmc_ess_gpu_seconds_total", "Requested GPUs × seconds run, of ended runs", ["queue"]
)
ACCELERATOR_SECONDS = Counter(
    "xmc_ess_accelerator_seconds_total",
    "Requested accelerators (GPUs, TPU chips) × seconds run, by accelerator type",
    ["queue", "accelerator"],
)
