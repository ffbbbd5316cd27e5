"""``xmc wu list``'s arg columns and ``--group-by`` rows (``xmc_cli.sweeps``)."""

from __future__ import annotations

from collections import Counter

import pytest

from xmc.model.args import ArgGroup
from xmc.model.states import WorkUnitState
from xmc_cli.sweeps import arg_columns, group_dicts, group_rows, parse_arg_list

S = WorkUnitState
UNITS = [
    {"lr": "1", "bs": "8", "seed": "1", "a": "1", "b": "1", "c": "1"},
    {"lr": "2", "bs": "8", "seed": "2", "a": "2", "b": "2", "c": "2"},
    {"lr": "3", "bs": "8", "seed": "2", "a": "3", "b": "3", "c": "3"},
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, None), ("", []), ("lr", ["lr"]), (" lr , bs,,", ["lr", "bs"])],
)
def test_parse_arg_list(text: str | None, expected: list[str] | None) -> None:
    assert parse_arg_list(text) == expected


@pytest.mark.parametrize(
    ("units", "chosen", "limit", "expected"),
    [
        pytest.param(UNITS, None, 4, ["a", "b", "c", "lr"], id="first varying keys, by name"),
        pytest.param(UNITS, None, 9, ["a", "b", "c", "lr", "seed"], id="constant keys never"),
        pytest.param(UNITS, ["bs", "nope"], 4, ["bs", "nope"], id="chosen as given"),
        pytest.param(UNITS, [], 4, [], id="chosen none"),
        pytest.param([], None, 4, [], id="no units"),
    ],
)
def test_arg_columns(
    units: list[dict[str, str]], chosen: list[str] | None, limit: int, expected: list[str]
) -> None:
    assert arg_columns(units, chosen, limit) == expected


def test_group_rows_and_json() -> None:
    groups = [
        ArgGroup("0.1", 3, Counter({S.FAILED: 1, S.RUNNING: 2})),
        ArgGroup(None, 1, Counter({S.COMPLETED: 1})),
    ]
    assert group_rows(groups) == [["0.1", "3", "2 RUNNING, 1 FAILED"], ["-", "1", "1 COMPLETED"]]
    assert group_dicts("lr", groups) == [
        {"key": "lr", "value": "0.1", "count": 3, "states": {"RUNNING": 2, "FAILED": 1}},
        {"key": "lr", "value": None, "count": 1, "states": {"COMPLETED": 1}},
    ]
