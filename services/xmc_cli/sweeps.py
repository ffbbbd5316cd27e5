"""A sweep's work units by their args: the arg columns of ``xmc wu list`` and its
``--group-by`` table.

Which args vary is computed here from the units listed (every page of the filter): the CLI
already holds those units, so it costs no call, and the columns follow the filter. The
ESS's ``xmc.v1.SweepService.ListArgKeys`` (the dashboard's columns) gives the same answer
in SQL for a whole experiment, which is this one when the filter is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from xmc.model.args import (
    ArgGroup,
    group_by_arg,
    key_spreads,
    state_summary,
    varying_keys,
    work_unit_args,
)
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.xmc.v1 import logs_pb2, logs_pb2_grpc

from .client import Client

#: Work units one ListExitCodes call may name.
EXIT_CODES_PER_CALL: Final = 1000
#: Arg columns shown when ``--args`` does not choose them: the first varying keys.
DEFAULT_ARG_COLUMNS = 4


def parse_arg_list(text: str | None) -> list[str] | None:
    """``--args lr,bs`` → ``["lr", "bs"]``; None when not given (the varying keys then)."""
    if text is None:
        return None
    return [key.strip() for key in text.split(",") if key.strip()]


def arg_columns(
    units_args: Sequence[dict[str, str]],
    chosen: list[str] | None,
    limit: int = DEFAULT_ARG_COLUMNS,
) -> list[str]:
    """The chosen keys, else the first ``limit`` keys that vary, most distinct first."""
    if chosen is not None:
        return chosen
    spreads, total = key_spreads(units_args)
    return varying_keys(spreads, total)[:limit]


def exit_codes(client: Client, parent: str, units: Sequence[WorkUnit]) -> list[str]:
    """Each unit's current exit code as shown ("—": none known yet), a ListExitCodes per
    thousand units (docs/logs.md)."""
    stub = logs_pb2_grpc.LogServiceStub(client.channel())
    wids = [int(w.name.rsplit("/", 1)[1]) for w in units]
    codes: dict[int, str] = {}
    for start in range(0, len(wids), EXIT_CODES_PER_CALL):
        request = logs_pb2.ListExitCodesRequest(
            parent=parent, work_unit_ids=wids[start : start + EXIT_CODES_PER_CALL]
        )
        found = client.call(stub.ListExitCodes, request)
        for item in found.exit_codes:
            if item.HasField("exit_code"):
                codes[item.work_unit_id] = str(item.exit_code)
    return [codes.get(wid, "—") for wid in wids]


def _state(w: WorkUnit) -> WorkUnitState:
    return WorkUnitState(w.current_work_unit_execution.status.state)


def groups_of(units: Sequence[WorkUnit], key: str) -> list[ArgGroup]:
    return group_by_arg(((work_unit_args(w), _state(w)) for w in units), key)


def group_rows(groups: Sequence[ArgGroup]) -> list[list[str]]:
    """One table row per group: the value (``-`` for units without the key), the count
    and the state counts."""
    order = list(WorkUnitState)
    return [
        ["-" if g.value is None else g.value, str(g.count), state_summary(g.states, order)]
        for g in groups
    ]


def group_dicts(key: str, groups: Sequence[ArgGroup]) -> list[dict[str, Any]]:
    """``--output json`` of ``--group-by``."""
    return [
        {
            "key": key,
            "value": g.value,
            "count": g.count,
            "states": {s.name: n for s, n in sorted(g.states.items())},
        }
        for g in groups
    ]
