"""What clients see during a fault of the matrix (bench/faults.py), in every scenario: a
few clients keep writing across the fault, and each of their answers is recorded.

:class:`ClientLoad` keeps ``WRITERS`` clients creating work units, a call every ``PACE``
seconds each, from ``BASELINE_SECONDS`` before the fault until ``AFTER_SECONDS`` after
the first call begun after it that succeeded. Every OK answer is recorded (its unit
joins the sweep's intents, so the matrix's counts judge it: acknowledged, so it must be
in Postgres — the new primary after a failover, :func:`missing_acknowledged` — and must
complete); every failed call is counted by its status code, before and after the fault.
A failed call is retried after ``RETRY_PAUSE``, as a client retrying UNAVAILABLE would.

The figures (:func:`figures`): the outage as clients see it (from the fault to the first
OK of a call begun after it), each client's longest gap between two OK answers across the
fault beside the same run's window before it, and the errors by code. Written for the
Postgres failover (decision 0051), where the outage is the promotion; every scenario runs
it since, so the matrix's table has the same client columns for each.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field

import asyncpg
import grpc
from bench.fault_counts import Intent

from tests.integration.support import minimal_work_unit
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc

WRITERS = 4
#: Seconds between one writer's calls (a sweep's pace, not a flood: every acknowledged
#: unit must also run and complete on the matrix's kubesim).
PACE = 0.5
#: Seconds of writes before the fault: the run's own baseline.
BASELINE_SECONDS = 5.0
#: Seconds of writes after the first OK after the fault.
AFTER_SECONDS = 3.0
RPC_TIMEOUT = 5.0
RETRY_PAUSE = 0.1


@dataclass
class Call:
    """One finished call of a writer: when it began and ended, its code."""

    began: float
    ended: float
    code: str  # grpc.StatusCode name, "OK" for an answer


@dataclass
class Figures:
    outage: float | None  # fault → first OK of a call begun after it; None: none by the end
    gap_before: float  # longest gap between one writer's OKs, before the fault
    gap_after: float  # the same, in the window that holds the fault
    errors_before: dict[str, int] = field(default_factory=dict)
    errors_after: dict[str, int] = field(default_factory=dict)
    oks: int = 0

    def lines(self) -> list[str]:
        outage = "never" if self.outage is None else f"{self.outage:.1f} s"
        return [
            f"outage as clients see it: {outage} (fault → first OK write); "
            f"{self.oks} writes acknowledged",
            f"longest gap between a client's OKs: {self.gap_after:.2f} s across the fault, "
            f"{self.gap_before:.2f} s before it (baseline)",
            f"client errors by code: after the fault {self.errors_after or 'none'}, "
            f"before {self.errors_before or 'none'}",
        ]


def longest_gap(oks: list[float], start: float, end: float) -> float:
    """The longest time without an OK in ``[start, end]``, given one writer's OK times
    (the window's edges count: a writer with no OK in it has gap ``end - start``)."""
    inside = sorted(t for t in oks if start <= t <= end)
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def figures(calls: list[list[Call]], started: float, fault: float, ended: float) -> Figures:
    """The figures of one run from each writer's calls (see the module docstring). A
    call that began before the fault and failed after it counts after: the fault failed
    it."""
    oks = [[c.ended for c in mine if c.code == "OK"] for mine in calls]
    after_oks = [c.ended for mine in calls for c in mine if c.code == "OK" and c.began >= fault]
    errors_before: Counter[str] = Counter()
    errors_after: Counter[str] = Counter()
    for call in (c for mine in calls for c in mine if c.code != "OK"):
        (errors_after if call.ended >= fault else errors_before)[call.code] += 1
    return Figures(
        outage=min(after_oks) - fault if after_oks else None,
        gap_before=max(longest_gap(mine, started, fault) for mine in oks),
        gap_after=max(longest_gap(mine, fault, ended) for mine in oks),
        errors_before=dict(errors_before),
        errors_after=dict(errors_after),
        oks=sum(map(len, oks)),
    )


class ClientLoad:
    """``WRITERS`` clients creating work units under ``parent`` until :meth:`finish`."""

    def __init__(self, api: api_pb2_grpc.ExperimentStateServiceStub, parent: str) -> None:
        self._api, self._parent = api, parent
        self.calls: list[list[Call]] = [[] for _ in range(WRITERS)]
        #: Every acknowledged create, in the matrix's terms.
        self.intents: list[Intent] = []
        self._stopping = asyncio.Event()
        #: Set by the first OK answer to a call begun after the fault.
        self._recovered = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.started = self.fault = self.ended = 0.0

    async def start(self) -> None:
        """Start the writers; return after the baseline window."""
        self.started = time.monotonic()
        self._tasks = [asyncio.create_task(self._write(mine)) for mine in self.calls]
        await asyncio.sleep(BASELINE_SECONDS)  # the baseline window itself, not a sync

    def mark_fault(self) -> None:
        """The fault landed now; later calls are no-ops (the first landing counts)."""
        if not self.fault:
            self.fault = time.monotonic()

    async def finish(self, within: float) -> Figures:
        """Once a write that began after the fault succeeded (or ``within`` seconds),
        ``AFTER_SECONDS`` more, then stop the writers."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._recovered.wait(), self.fault + within - time.monotonic())
        await asyncio.sleep(AFTER_SECONDS)  # the window after the failover, measured
        self._stopping.set()
        await asyncio.gather(*self._tasks)
        self.ended = time.monotonic()
        return figures(self.calls, self.started, self.fault, self.ended)

    def roles(self) -> dict[str, str]:
        """The acknowledged units' roles in the matrix's counts: each completes."""
        return {intent.unit: "complete" for intent in self.intents}

    async def _write(self, calls: list[Call]) -> None:
        request = api_pb2.CreateWorkUnitRequest(parent=self._parent, work_unit=minimal_work_unit())
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                operation = await self._api.CreateWorkUnit(request, timeout=RPC_TIMEOUT)
            except grpc.aio.AioRpcError as error:
                calls.append(Call(began, time.monotonic(), error.code().name))
                await asyncio.sleep(RETRY_PAUSE)  # the client's pause before its retry
                continue
            calls.append(Call(began, time.monotonic(), "OK"))
            if self.fault and began >= self.fault:
                self._recovered.set()
            name = str(operation.name)
            self.intents.append(Intent("create", name.split("/operations/")[0], name))
            with contextlib.suppress(TimeoutError):  # the pace, cut short by finish()
                await asyncio.wait_for(self._stopping.wait(), began + PACE - time.monotonic())


async def missing_acknowledged(dsn: str, intents: list[Intent]) -> list[str]:
    """The acknowledged intents whose Operation Postgres (the new primary after a
    failover) does not hold: read straight from it, not through the ESS."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT name FROM operations WHERE name = ANY($1::text[])",
            [intent.operation for intent in intents],
        )
    finally:
        await conn.close()
    held = {row["name"] for row in rows}
    return [f"{i.kind} {i.unit} ({i.operation})" for i in intents if i.operation not in held]
