"""``xmc_work_units``: live work units by experiment owner, queue and state (docs/metrics.md,
decision 0050).

Read from Postgres every ``interval`` seconds by a supervised loop, not at scrape time:
a scrape must not wait on the database, and many Prometheus servers (or a curl loop)
scraping must not multiply the read. The collector serves the last snapshot whole, so a
scrape never sees a half-replaced set, and an owner or queue whose units all ended drops
out instead of lingering at its last value (what a labelled ``Gauge`` would do).

Every ESS replica reads and exports the same figures: aggregate with ``max by``, not
``sum`` (the Grafana dashboard does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector

from xmc.model.states import WorkUnitState
from xmc.store.transactions import Store, count_live_units
from xmc.supervise import every

NAME: Final = "xmc_work_units"
#: Seconds between reads; a dashboard refreshing every 30 s sees figures at most this old.
DEFAULT_INTERVAL: Final = 15.0

Snapshot = Sequence[tuple[str, str, WorkUnitState, int]]


class LiveUnits(Collector):
    """Holds the last snapshot and serves it as one gauge family."""

    def __init__(self) -> None:
        self._snapshot: Snapshot = ()
        #: False until the first read: the family is still described, with no samples.
        self.read = False

    def replace(self, snapshot: Snapshot) -> None:
        self._snapshot = tuple(snapshot)
        self.read = True

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            NAME,
            "Live (non-terminal) work units, by experiment owner, queue (LocalQueue; empty "
            "when unknown) and state; read from Postgres every 15 s",
            labels=("owner", "queue", "state"),
        )
        for owner, queue, state, units in self._snapshot:
            family.add_metric((owner, queue, state.name), units)
        yield family


LIVE_UNITS: Final = LiveUnits()
REGISTRY.register(LIVE_UNITS)


async def refresh(store: Store) -> None:
    async with store.connection() as conn:
        LIVE_UNITS.replace(await count_live_units(conn))


async def run(store: Store, stopping: asyncio.Event, *, interval: float = DEFAULT_INTERVAL) -> None:
    """The supervised loop: a failed read is logged and counted, the last figures stay."""
    await every(
        "live-unit-gauges", interval, lambda: refresh(store), stopping=stopping, first_after=0
    )
