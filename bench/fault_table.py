"""One run of the fault matrix and the table ``make faults`` prints (bench/faults.py).

Pure: a run is what a scenario's harness measured, the table is what a reader compares
— per scenario the runs, the intents lost, duplicated, left stuck, the services that
died, the runs that broke, what clients saw (their calls that failed, and the
longest time a client went without an OK answer) and the time to converge, with its
median beside the median of the ``baseline`` scenario of the same invocation (the
machine is shared: only figures of one run compare).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from bench.fault_counts import Counts


@dataclass
class Run:
    scenario: str
    counts: Counts
    #: Seconds from the fault to convergence (None: not by the deadline), and of the workload.
    converged_after: float | None = None
    wall: float = 0.0
    error: str | None = None
    #: Scenario-specific figures, printed under the run's line.
    figures: list[str] = field(default_factory=list)
    #: Client calls that failed in the run, by gRPC code (what a client saw); None: the
    #: scenario ran no clients.
    client_errors: dict[str, int] | None = None
    #: The longest time one client went without an OK answer across the fault (None:
    #: the scenario ran no clients).
    client_gap: float | None = None

    @property
    def clean(self) -> bool:
        c = self.counts
        return c.lost == c.duplicated == c.stuck == c.died == 0 and self.error is None


BASELINES = ("baseline", "baseline-x2", "net-baseline")
#: Converged counts from the end of its load, not from a fault: no baseline compares.
NO_RATIO = (*BASELINES, "rolling-restart")
#: Faults of the HA deployment (docs/operations.md "High availability": two of every
#: service, a standby for each store) besides the ``-x2`` ones: they run on two of every
#: service (issue 30 point 4, "two replicas under all of the above").
HA_FAULTS = ("pause-reconciler-leader", "pg-failover", "redis-failover", "redis-cluster-failover")


def baseline_of(scenario: str) -> str:
    """The baseline ``scenario`` compares with: the one in namespaces for network faults,
    the two-replica one for ``-x2`` scenarios and :data:`HA_FAULTS`, else the one-replica
    one. A scenario runs on two of every service exactly when its baseline does."""
    if scenario.startswith("net-"):
        return "net-baseline"
    if scenario.endswith("-x2") or scenario in HA_FAULTS:
        return "baseline-x2"
    return "baseline"


def two_replicas(scenario: str) -> bool:
    """Whether ``scenario`` runs on two of every service (see :func:`baseline_of`)."""
    return baseline_of(scenario) != "baseline"


def baseline_median(runs: list[Run], scenario: str) -> float | None:
    """The median convergence of :func:`baseline_of` ``scenario`` in this invocation;
    None when it ran no such baseline."""
    name = baseline_of(scenario)
    times = [r.converged_after for r in runs if r.scenario == name and r.converged_after]
    return statistics.median(times) if times else None


def client_column(mine: list[Run]) -> str:
    """``UNAVAILABLE 84, CANCELLED 1`` summed over the runs; ``0``; ``-`` without clients."""
    if all(r.client_errors is None for r in mine):
        return "-"
    errors: Counter[str] = Counter()
    for run in mine:
        errors.update(run.client_errors or {})
    return ", ".join(f"{code} {n}" for code, n in errors.most_common()) or "0"


def table(runs: list[Run]) -> str:
    head = (
        f"{'scenario':<28} {'runs':>4} {'lost':>4} {'dup':>3} {'stuck':>5} {'died':>4} "
        f"{'errors':>6}  {'client gap s':>12}  converged s (min / median / max, × baseline)"
        "  client errors"
    )
    lines = [head, "-" * len(head)]
    for scenario in dict.fromkeys(r.scenario for r in runs):
        mine = [r for r in runs if r.scenario == scenario]
        times = [r.converged_after for r in mine if r.converged_after is not None]
        never = len(mine) - len(times)
        spread = "-"
        if times:
            median = statistics.median(times)
            spread = f"{min(times):.1f} / {median:.1f} / {max(times):.1f}"
            base = baseline_median(runs, scenario)
            if base and scenario not in NO_RATIO:
                spread += f" ({median / base:.2f}×)"
        spread += f" ({never} never)" if never else ""
        gaps = [r.client_gap for r in mine if r.client_gap is not None]
        gap = f"{max(gaps):.1f}" if gaps else "-"
        lines.append(
            f"{scenario:<28} {len(mine):>4} {sum(r.counts.lost for r in mine):>4} "
            f"{sum(r.counts.duplicated for r in mine):>3} {sum(r.counts.stuck for r in mine):>5} "
            f"{sum(r.counts.died for r in mine):>4} {sum(r.error is not None for r in mine):>6}  "
            f"{gap:>12}  {spread:<44}  {client_column(mine)}"
        )  # fmt: skip
    return "\n".join(lines)
