"""Prometheus metrics of the Actuator (exposed by ``xmc-actuator --metrics-listen``).

Every label is low-cardinality by construction: task kinds, ``Outcome`` values and
``TaskRejectReason``-style DLQ reasons, never ids.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

TASKS_TOTAL = Counter(
    "xmc_actuator_tasks_total",
    "Task deliveries finished by this consumer, by task kind and outcome",
    ["kind", "outcome"],
)
TASK_SECONDS = Histogram(
    "xmc_actuator_task_seconds",
    "Time from reading a task off the stream to finishing it (retries included), by kind",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
DLQ_TOTAL = Counter(
    "xmc_actuator_dlq_total", "Task stream entries copied to the DLQ, by reason", ["reason"]
)
DLQ_REPEATS_TOTAL = Counter(
    "xmc_actuator_dlq_repeats_total",
    "Dead letters not added because the entry was in the DLQ already: a redelivery after a "
    "crash between the DLQ and the ack, or a second consumer of the same entry",
)
RECLAIMED_TOTAL = Counter(
    "xmc_actuator_reclaimed_total",
    "Pending entries claimed with XAUTOCLAIM from an idle (presumably dead) consumer",
)
REPAIRS_TOTAL = Counter(
    "xmc_actuator_repairs_total",
    "Executions the repair sweep found stuck in an XMC-written state and acted on, by action "
    "(write_terminal, redrive, give_up)",
    ["action"],
)
