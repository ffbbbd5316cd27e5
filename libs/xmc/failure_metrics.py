"""``xmc_work_unit_failures_total``, one metric for every process that ends executions
FAILED: the ESS (the Reconciler's observations, tasks it could not deliver) and the
Actuator (JobSets the cluster refused). One definition, so the name, help and labels
cannot drift between them; a dashboard sums it over jobs (docs/metrics.md)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

from xmc.model.business import FailureReason
from xmc.model.states import WorkUnitState
from xmc.store.transactions import ItemResult

FAILURES: Final = Counter(
    "xmc_work_unit_failures_total",
    "Executions that ended FAILED, by reason (exit_code, killed, disrupted, startup, job, "
    "refused, undeliverable, unknown); a failure that is then retried counts too",
    ["reason"],
)


def count_decided_failure(written: ItemResult | None, reason: FailureReason) -> None:
    """Count a FAILED that XMC decided itself, if the write made the execution FAILED
    (the guard may have kept a state that was already terminal)."""
    if written is not None and written.state_changed and written.state is WorkUnitState.FAILED:
        FAILURES.labels(reason.value).inc()
