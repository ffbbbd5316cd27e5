"""A work unit's args (its hyperparameters) and what a sweep's args say together.

The xmanager client puts a trial's hyperparameters into each container's
``ExecutableSpec.args``; the store keeps their union per work unit (column ``args``,
migration 0005) so List/Search can filter and sort on them, and the summaries here say which
keys tell a sweep's units apart (docs/decisions/0035-args-are-filterable.md).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from xmc.model.states import WorkUnitState
from xmc.query.sql import is_number
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import ExecutableSpec, WorkUnit


def _containers(work_unit: WorkUnit) -> list[ExecutableSpec]:
    """Every container, in precedence order: the jobs' main containers in job order, then
    their init containers, then their sidecars (helpers, whose args rarely describe the
    trial, so they only fill keys the trial's own containers leave unset)."""
    jobs = work_unit.executable.jobset.jobs
    return [
        *(job.spec for job in jobs),
        *(spec for job in jobs for spec in job.init_containers),
        *(spec for job in jobs for spec in job.sidecars),
    ]


def work_unit_args(work_unit: WorkUnit) -> dict[str, str]:
    """The union of the containers' ``args``. When two containers give one key different
    values, the first container in ``_containers`` order wins: a trial's main container
    states its hyperparameters, and one value per key keeps every filter and sort
    meaningful (the other values still reach their containers unchanged)."""
    merged: dict[str, str] = {}
    for spec in _containers(work_unit):
        for key, value in spec.args.items():
            merged.setdefault(key, value)
    return dict(sorted(merged.items()))


def arg_numbers_json(args: Mapping[str, str]) -> str:
    """The ``arg_numbers`` column (migration 0005): the values that are numbers, as JSON
    numbers. ``Decimal`` spells each one as JSON accepts it (``+4`` → ``4``, ``.5`` →
    ``0.5``, ``007`` → ``7``, ``1e999`` → ``1E+999``); Postgres keeps it as ``numeric``."""
    numbers = ((key, arg_number(value)) for key, value in args.items())
    members = ", ".join(f"{json.dumps(k)}: {n}" for k, n in numbers if n is not None)
    return f"{{{members}}}"


@dataclass(frozen=True)
class KeySpread:
    """How one key spreads over a set of work units: the number of distinct values, and
    how many of the units have the key at all."""

    key: str
    distinct: int
    present: int


def key_spreads(units_args: Iterable[Mapping[str, str]]) -> tuple[list[KeySpread], int]:
    """Each key's spread over ``units_args``, and the number of units: what the store
    computes in SQL for a whole experiment (``xmc.store.arg_stats``), here for a page a
    client already holds."""
    values: dict[str, set[str]] = {}
    present: Counter[str] = Counter()
    total = 0
    for args in units_args:
        total += 1
        for key, value in args.items():
            values.setdefault(key, set()).add(value)
            present[key] += 1
    return [KeySpread(k, len(v), present[k]) for k, v in values.items()], total


def varying_first(spreads: Iterable[KeySpread], total: int) -> list[str]:
    """The keys ordered for a sweep's table: varying keys first, most distinct values
    first, then constant keys; ties by name. A key some units lack varies (its absence
    is one more value): those units differ from the others in it."""

    def values(spread: KeySpread) -> int:
        return spread.distinct + (1 if spread.present < total else 0)

    ordered = sorted(spreads, key=lambda s: (values(s) <= 1, -values(s), s.key))
    return [s.key for s in ordered]


def varying_keys(spreads: Iterable[KeySpread], total: int) -> list[str]:
    """Only the keys that tell some units apart, in ``varying_first`` order."""
    spreads = list(spreads)
    varying = {s.key for s in spreads if s.distinct > 1 or s.present < total}
    return [k for k in varying_first(spreads, total) if k in varying]


@dataclass
class ArgGroup:
    """The units sharing one value of the grouped key (``value`` None: units without it)."""

    value: str | None
    count: int = 0
    states: Counter[WorkUnitState] = field(default_factory=Counter)


def group_by_arg(
    units: Iterable[tuple[Mapping[str, str], WorkUnitState]], key: str
) -> list[ArgGroup]:
    """Units (their args and state) grouped by the value of ``key``, each group with its
    state counts. Groups come in the order ``args.<key>`` sorts in List: values that are
    numbers in numeric order, then other values in text order, then units without the key."""
    groups: dict[str | None, ArgGroup] = {}
    for args, state in units:
        value = args.get(key)
        group = groups.setdefault(value, ArgGroup(value))
        group.count += 1
        group.states[state] += 1
    return sorted(groups.values(), key=lambda g: _sort_key(g.value))


def _sort_key(value: str | None) -> tuple[int, Decimal, str]:
    if value is None:
        return (2, Decimal(0), "")
    number = arg_number(value)
    return (1, Decimal(0), value) if number is None else (0, number, value)


def arg_number(value: str) -> Decimal | None:
    """The numeric reading of an arg value, as List reads it (``xmc.query.sql.is_number``)."""
    return Decimal(value) if is_number(value) else None


def state_summary(states: Mapping[WorkUnitState, int], order: Sequence[WorkUnitState]) -> str:
    """``"3 RUNNING, 1 FAILED"``: the non-zero counts in ``order``."""
    return ", ".join(f"{states[s]} {s.name}" for s in order if states.get(s))
