"""The fault matrix's table (bench/fault_table.py): each scenario's convergence beside
the baseline of the same invocation, and what its clients saw."""

from __future__ import annotations

import pytest
from bench.fault_counts import Counts
from bench.fault_table import Run, baseline_median, client_column, table, two_replicas


def run(scenario: str, converged: float | None, **clients: object) -> Run:
    return Run(scenario, Counts(), converged_after=converged, **clients)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scenario", "median"),
    [
        ("kill-ess", 10.0),  # one replica: the one-replica baseline
        ("postgres-restart", 10.0),
        ("kill-ess-x2", 20.0),  # two of each: the two-replica baseline
        ("pause-reconciler-leader", 20.0),
        ("pg-failover", 20.0),  # the HA deployment's faults: two of each
        ("redis-cluster-failover", 20.0),
        ("net-cut:ess-postgres", 30.0),  # in namespaces (two of each): their own baseline
    ],
)
def test_each_scenario_compares_with_its_own_baseline(scenario: str, median: float) -> None:
    runs = [run("baseline", 9.0), run("baseline", 11.0), run("baseline-x2", 20.0)]
    runs.append(run("net-baseline", 30.0))
    assert baseline_median(runs, scenario) == median
    assert two_replicas(scenario) == (median != 10.0)


def test_no_baseline_in_the_invocation_is_no_ratio() -> None:
    runs = [run("kill-ess", 12.0)]
    assert baseline_median(runs, "kill-ess") is None
    assert "×" not in table(runs).splitlines()[2]


@pytest.mark.parametrize(
    ("runs", "column"),
    [
        ([run("x", 1.0)], "-"),  # no clients ran
        ([run("x", 1.0, client_gap=0.5, client_errors={})], "0"),
        (
            [
                run("x", 1.0, client_gap=9.0, client_errors={"UNAVAILABLE": 80}),
                run("x", 1.0, client_gap=8.0, client_errors={"UNAVAILABLE": 4, "CANCELLED": 1}),
            ],
            "UNAVAILABLE 84, CANCELLED 1",
        ),
    ],
)
def test_client_column(runs: list[Run], column: str) -> None:
    assert client_column(runs) == column


def test_the_table_has_one_line_per_scenario_with_its_ratio() -> None:
    runs = [
        run("baseline-x2", 10.0, client_gap=0.6, client_errors={}),
        run("pg-failover", 25.0, client_gap=9.5, client_errors={"UNAVAILABLE": 84}),
        run("pg-failover", None, client_gap=10.5, client_errors={"UNAVAILABLE": 3}),
    ]
    lines = table(runs).splitlines()
    assert len(lines) == 4
    failover = lines[3]
    assert failover.startswith("pg-failover")
    assert "25.0 / 25.0 / 25.0 (2.50×) (1 never)" in failover
    assert "10.5" in failover  # the longest client gap of its runs
    assert failover.endswith("UNAVAILABLE 87")


def test_a_rolling_restart_has_no_ratio() -> None:
    """Its convergence runs from the end of its load, not from a fault."""
    line = table([run("baseline", 10.0), run("rolling-restart", 1.0)]).splitlines()[3]
    assert "×" not in line
