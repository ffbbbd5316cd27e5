"""What clients see during a fault (bench/fault_clients.py): the outage as clients see
it is the kill to the first OK of a call begun after it; a gap is the longest time one
client went without an OK; a failed call counts on the side of the fault it ended on."""

from __future__ import annotations

import pytest
from bench.fault_clients import Call, figures, longest_gap


@pytest.mark.parametrize(
    ("oks", "start", "end", "gap"),
    [
        ([], 0.0, 10.0, 10.0),  # no OK in the window: all of it
        ([5.0], 0.0, 10.0, 5.0),
        ([1.0, 2.0, 9.0], 0.0, 10.0, 7.0),
        ([0.5, 1.0, 1.5], 0.0, 2.0, 0.5),
        ([-3.0, 4.0, 12.0], 0.0, 10.0, 6.0),  # OKs outside the window are not in it
    ],
)
def test_longest_gap(oks: list[float], start: float, end: float, gap: float) -> None:
    assert longest_gap(oks, start, end) == pytest.approx(gap)


def test_figures_of_a_failover() -> None:
    calls = [
        [
            Call(0.0, 0.1, "OK"),
            Call(0.5, 0.6, "OK"),
            Call(0.9, 1.2, "UNAVAILABLE"),  # began before the kill at 1.0: counts after
            Call(1.3, 1.4, "UNAVAILABLE"),
            Call(1.5, 9.0, "OK"),  # began after the kill: the failover ends here
            Call(9.5, 9.6, "OK"),
        ],
        [Call(0.2, 0.3, "OK"), Call(0.95, 1.1, "OK"), Call(1.2, 8.5, "DEADLINE_EXCEEDED")],
    ]

    got = figures(calls, started=0.0, fault=1.0, ended=10.0)

    assert got.outage == pytest.approx(8.0)
    assert got.gap_before == pytest.approx(0.7)  # writer 2: 0.3 to the fault at 1.0
    assert got.gap_after == pytest.approx(8.9)  # writer 2: 1.1 to the end at 10.0
    assert got.errors_after == {"UNAVAILABLE": 2, "DEADLINE_EXCEEDED": 1}
    assert got.errors_before == {}
    assert got.oks == 6


def test_no_ok_after_the_fault_is_no_failover() -> None:
    got = figures([[Call(0.0, 0.1, "OK"), Call(2.0, 3.0, "UNAVAILABLE")]], 0.0, 1.0, 5.0)

    assert got.outage is None
    assert "never" in got.lines()[0]
