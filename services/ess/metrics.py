"""Prometheus metrics of the ESS (exposed by ``xmc-ess serve --metrics-listen``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

RPC_TOTAL = Counter(
    "xmc_ess_rpc_total", "RPCs served, by method and status code", ["method", "code"]
)
RPC_SECONDS = Histogram(
    "xmc_ess_rpc_seconds",
    "RPC latency by method",
    ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
TASKS_ENQUEUED = Counter("xmc_ess_tasks_enqueued_total", "Tasks put on the task stream", ["kind"])
ENQUEUE_FAILURES = Counter(
    "xmc_ess_enqueue_failures_total", "Tasks that could not be put on the task stream", ["kind"]
)
TASKS_RESUMED = Counter(
    "xmc_ess_paused_tasks_total", "Parked tasks handled by the resume worker", ["resolution"]
)
