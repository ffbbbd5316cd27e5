"""The create load of the rolling-restart bench (``bench/rolling_restart.py``): many
clients, each creating work units in a loop, every call tallied.

Each client behaves like the published ``xmanager`` client (``xm_cloud``): a plain
channel with no options, no ``wait_for_ready``, no retry of its own, and a work unit id
it chose (``CreateWorkUnitRequest.work_unit_id``, which the ESS turns into an idempotent
repeat: ``xmc.model.work_unit_ids``). What its first attempt got is tallied by gRPC code
(what a user of the published client sees); a failed attempt is then retried by XMC's
documented rule (``xmc.ess_retry``: on UNAVAILABLE or CANCELLED, the same request again
after gRPC's backoff) and the final outcome tallied too (what a client following the rule
sees). The target of the bench: no failure after the rule.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from tests.integration.support import minimal_work_unit
from xmc.ess_retry import RETRY
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc

#: Each call's own deadline: the published client sets none; an hour-long hang is a failure.
CALL_TIMEOUT = 30.0
#: A client's ids: client ``k`` chooses ``k * ID_BLOCK + 1, + 2, ...`` (distinct across clients).
ID_BLOCK = 1_000_000


@dataclass
class Tally:
    """Every call of the load: how its first attempt and its final outcome went."""

    first: Counter[str] = field(default_factory=Counter)
    final: Counter[str] = field(default_factory=Counter)
    #: Attempts beyond the first, over all calls.
    retries: int = 0
    #: Work unit name → the Operation name of every acknowledged create.
    acknowledged: dict[str, str] = field(default_factory=dict)
    #: When the first failed attempt came, seconds from the load's start (for the report).
    failed_at: list[float] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(self.final.values())

    def failures(self, counter: Counter[str]) -> int:
        return sum(n for code, n in counter.items() if code != "OK")

    def render(self, counter: Counter[str]) -> str:
        """``OK 812, UNAVAILABLE 3``: OK first, then the failures by code."""
        codes = sorted(counter, key=lambda code: (code != "OK", code))
        return ", ".join(f"{code} {counter[code]}" for code in codes) or "none"


class CreateLoad:
    """``clients`` concurrent loops of CreateWorkUnit into one experiment until stopped."""

    def __init__(self, target: str, parent: str, *, clients: int, think: float) -> None:
        self.channel = grpc.aio.insecure_channel(target)  # as the published client: no options
        self.api = api_pb2_grpc.ExperimentStateServiceStub(self.channel)
        self.parent, self.clients, self.think = parent, clients, think
        self.tally = Tally()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._began = 0.0

    def start(self) -> None:
        self._began = time.monotonic()
        self._tasks = [asyncio.create_task(self._client(k)) for k in range(1, self.clients + 1)]

    async def stop(self) -> Tally:
        """Let every client finish its call in hand (and its retries), then close."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
        await self.channel.close()
        return self.tally

    async def _client(self, k: int) -> None:
        # Spread the clients' first calls over one think time, as independent users would.
        await asyncio.sleep(random.uniform(0, self.think))
        wid = k * ID_BLOCK
        while not self._stop.is_set():
            wid += 1
            await self._create(wid)
            await asyncio.sleep(random.uniform(0.5, 1.5) * self.think)

    async def _create(self, wid: int) -> None:
        request = api_pb2.CreateWorkUnitRequest(
            parent=self.parent, work_unit_id=wid, work_unit=minimal_work_unit()
        )
        attempt = 1
        while True:
            try:
                operation = await self.api.CreateWorkUnit(request, timeout=CALL_TIMEOUT)
            except grpc.aio.AioRpcError as error:
                code = error.code()
                if attempt == 1:
                    self.tally.first[code.name] += 1
                    self.tally.failed_at.append(time.monotonic() - self._began)
                delay = RETRY.delay(code, attempt)
                if delay is None:
                    self.tally.final[code.name] += 1
                    return
                attempt += 1
                self.tally.retries += 1
                await asyncio.sleep(delay)
                continue
            if attempt == 1:
                self.tally.first["OK"] += 1
            self.tally.final["OK"] += 1
            name = str(operation.name)
            self.tally.acknowledged[name.split("/operations/")[0]] = name
            return
