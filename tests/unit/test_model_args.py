"""A work unit's args and a sweep's summaries of them (``xmc.model.args``)."""

from __future__ import annotations

from collections import Counter

import pytest

from xmc.model.args import (
    ArgGroup,
    KeySpread,
    arg_numbers_json,
    group_by_arg,
    key_spreads,
    state_summary,
    varying_first,
    varying_keys,
    work_unit_args,
)
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import ExecutableSpec, WorkUnit

S = WorkUnitState
Args = dict[str, str]


def unit(
    mains: list[Args], init: list[Args] | None = None, sidecars: list[Args] | None = None
) -> WorkUnit:
    """One job per entry of ``mains``; the init containers and sidecars go on the first."""
    work_unit = WorkUnit()
    for i, args in enumerate(mains):
        job = work_unit.executable.jobset.jobs.add(name=f"job{i}")
        job.spec.args.update(args)
    first = work_unit.executable.jobset.jobs[0]
    for specs, extra in ((first.init_containers, init), (first.sidecars, sidecars)):
        for args in extra or []:
            specs.append(ExecutableSpec(args=args))
    return work_unit


@pytest.mark.parametrize(
    ("work_unit", "expected"),
    [
        pytest.param(WorkUnit(), {}, id="no executable"),
        pytest.param(unit([{}]), {}, id="a container without args"),
        pytest.param(unit([{"lr": "0.1", "bs": "32"}]), {"bs": "32", "lr": "0.1"}, id="one"),
        pytest.param(unit([{"lr": "0.1"}, {"bs": "32"}]), {"bs": "32", "lr": "0.1"},
                     id="union over jobs"),
        pytest.param(unit([{"lr": "0.1"}, {"lr": "0.2"}]), {"lr": "0.1"},
                     id="conflict: the first job wins"),
        pytest.param(unit([{"lr": "0.1"}], sidecars=[{"lr": "9", "port": "80"}]),
                     {"lr": "0.1", "port": "80"}, id="a sidecar fills, never overrides"),
        pytest.param(unit([{}, {"lr": "0.2"}], sidecars=[{"lr": "9"}]), {"lr": "0.2"},
                     id="a later main container beats an earlier job's sidecar"),
        pytest.param(unit([{}], init=[{"lr": "1"}], sidecars=[{"lr": "2"}]), {"lr": "1"},
                     id="init containers before sidecars"),
        pytest.param(unit([{"v": ""}]), {"v": ""}, id="empty value kept"),
    ],
)  # fmt: skip
def test_work_unit_args(work_unit: WorkUnit, expected: Args) -> None:
    assert work_unit_args(work_unit) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({}, "{}"),
        ({"opt": "adam", "lr": "0.01"}, '{"lr": 0.01}'),
        ({"a": "+4", "b": ".5", "c": "007", "d": "5.", "e": "1e999", "f": "-0", "g": "1E-3"},
         '{"a": 4, "b": 0.5, "c": 7, "d": 5, "e": 1E+999, "f": -0, "g": 0.001}'),
        ({"x": "NaN", "y": "inf", "z": "1e1000", 'q"': "1"}, '{"q\\"": 1}'),
    ],
)  # fmt: skip
def test_arg_numbers_json(args: Args, expected: str) -> None:
    assert arg_numbers_json(args) == expected


@pytest.mark.parametrize(
    ("units", "ordered", "varying"),
    [
        pytest.param([], [], [], id="no units"),
        pytest.param([{"lr": "1"}] * 3, ["lr"], [], id="one constant key"),
        pytest.param(
            [{"lr": "1", "bs": "8", "seed": "1"}, {"lr": "2", "bs": "8", "seed": "2"},
             {"lr": "3", "bs": "8", "seed": "2"}],
            ["lr", "seed", "bs"], ["lr", "seed"], id="most distinct values first",
        ),
        pytest.param([{"a": "1", "b": "1"}, {"a": "2", "b": "2"}], ["a", "b"], ["a", "b"],
                     id="ties by name"),
        pytest.param([{"lr": "1", "x": "1"}, {"lr": "1"}], ["x", "lr"], ["x"],
                     id="a key some units lack varies"),
        pytest.param([{"z": "1"}, {"a": "1"}, {"a": "1"}], ["a", "z"], ["a", "z"],
                     id="absence counts as a value"),
    ],
)  # fmt: skip
def test_varying_keys_come_first(units: list[Args], ordered: list[str], varying: list[str]) -> None:
    spreads, total = key_spreads(units)
    assert total == len(units)
    assert varying_first(spreads, total) == ordered
    assert varying_keys(spreads, total) == varying


def test_key_spreads_count_distinct_values_and_presence() -> None:
    spreads, total = key_spreads([{"a": "1", "b": "x"}, {"a": "2"}, {"a": "1"}])
    assert total == 3
    assert sorted(spreads, key=lambda s: s.key) == [KeySpread("a", 2, 3), KeySpread("b", 1, 1)]


@pytest.mark.parametrize(
    ("units", "key", "expected"),
    [
        pytest.param([], "lr", [], id="no units"),
        pytest.param(
            [({"lr": "10"}, S.RUNNING), ({"lr": "2"}, S.FAILED), ({"lr": "10"}, S.COMPLETED),
             ({"lr": "10"}, S.RUNNING)],
            "lr",
            [ArgGroup("2", 1, Counter({S.FAILED: 1})),
             ArgGroup("10", 3, Counter({S.RUNNING: 2, S.COMPLETED: 1}))],
            id="numeric values in numeric order, states counted",
        ),
        pytest.param(
            [({}, S.RUNNING), ({"lr": "auto"}, S.RUNNING), ({"lr": "1e-3"}, S.SCHEDULING),
             ({"lr": "0.01"}, S.SCHEDULING)],
            "lr",
            [ArgGroup("1e-3", 1, Counter({S.SCHEDULING: 1})),
             ArgGroup("0.01", 1, Counter({S.SCHEDULING: 1})),
             ArgGroup("auto", 1, Counter({S.RUNNING: 1})),
             ArgGroup(None, 1, Counter({S.RUNNING: 1}))],
            id="numbers, then text, then units without the key",
        ),
        pytest.param(
            [({"lr": "0.1"}, S.RUNNING), ({"lr": "1e-1"}, S.RUNNING)],
            "lr",
            [ArgGroup("0.1", 1, Counter({S.RUNNING: 1})),
             ArgGroup("1e-1", 1, Counter({S.RUNNING: 1}))],
            id="groups by the text: equal numbers spelled apart stay apart",
        ),
    ],
)  # fmt: skip
def test_group_by_arg(
    units: list[tuple[Args, WorkUnitState]], key: str, expected: list[ArgGroup]
) -> None:
    assert group_by_arg(units, key) == expected


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ({}, ""),
        ({S.FAILED: 1, S.RUNNING: 3}, "3 RUNNING, 1 FAILED"),
        ({S.RUNNING: 0, S.COMPLETED: 2}, "2 COMPLETED"),
    ],
)
def test_state_summary(states: dict[WorkUnitState, int], expected: str) -> None:
    assert state_summary(states, [S.SCHEDULING, S.RUNNING, S.COMPLETED, S.FAILED]) == expected
