"""The whole loop in one event loop, for the end-to-end tests: an ESS (gRPC, from the
``ess_factory`` fixture) → tasks → Actuator → kubesim (HTTP, with its simulators) →
Reconciler (watches) → UpdateBatcher → ESS, at real time (kubesim time scale 1, the ESS
and the Reconciler on the host's clock)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

from actuator.app import Actuator
from actuator.consumer import ConsumerSettings
from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from reconciler.app import Reconciler, ReconcilerOptions
from reconciler.batcher import BatcherOptions
from reconciler.ess_client import EssClient
from reconciler.vanished import VanishedSettings
from tests.integration.ess_harness import SIGNING_KEY, Ess, metadata
from tests.integration.support import WallClock, fetch_all
from tests.servers import REDIS_URL
from xmc.kube_client import KubeClient
from xmc.model.states import WorkUnitState
from xmc.settings import Settings
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage

S = WorkUnitState
ALICE = metadata("alice")
SCALE = 1.0


@dataclasses.dataclass
class System:
    ess: Ess
    sim: KubeSim
    kube: KubeClient
    actuator: Actuator
    reconciler: Reconciler
    kueue_version: str = "0.19"

    async def state(self, name: str) -> WorkUnitState:
        unit = await self.ess.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE)
        return S(unit.current_work_unit_execution.status.state)

    async def system_message(self, name: str) -> StructuredMessage:
        unit = await self.ess.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE)
        message: StructuredMessage = unit.current_work_unit_execution.status.system_message
        return message

    async def messages(self, name: str) -> list[tuple[int, int, str]]:
        """(execution id, severity, text) of every status message, oldest first."""
        found = await self.ess.api.ListStatusMessages(
            api_pb2.ListStatusMessagesRequest(parent=name), metadata=ALICE
        )
        return [
            (m.execution_id, int(m.content.severity), m.content.user_facing_text)
            for m in found.status_messages
        ]

    async def history(self, name: str) -> list[tuple[int, WorkUnitState]]:
        return [(eid, state) for eid, state, _at in await self.timed_history(name)]

    async def timed_history(self, name: str) -> list[tuple[int, WorkUnitState, datetime]]:
        """(eid, new state, its state_update_time) per accepted state change."""
        xid, wid = (int(part) for part in name.split("/")[1::2])
        rows = await fetch_all(
            self.ess.database_url,
            "SELECT eid, new_state, state_update_time FROM work_unit_status_history "
            "WHERE xid = $1 AND wid = $2 ORDER BY id",
            xid,
            wid,
        )
        return [(r["eid"], S(r["new_state"]), r["state_update_time"]) for r in rows]

    def jobset(self, name: str) -> dict[str, Any] | None:
        xid, wid = name.split("/")[1::2]
        found: dict[str, Any] | None = self.sim.store.find(JOBSET, "default", f"xmc-{xid}-{wid}")
        return found


@contextlib.asynccontextmanager
async def running_system(
    ess_factory: Any,
    *,
    controllers: bool = True,
    clock_offset: timedelta = timedelta(0),
    startup_grace: timedelta = timedelta(minutes=2),
    orphan_interval: float = 3600,
    flush_interval: float = 0.05,
    kueue_version: str | None = None,
    vanished: VanishedSettings | None = None,
    **ess_options: Any,
) -> AsyncIterator[System]:
    sim = KubeSim(
        controllers=controllers,
        time_scale=SCALE,
        clock_offset=clock_offset,
        kueue_version=kueue_version,
    )
    await sim.start()
    ess: Ess = await ess_factory(clock=WallClock(), kube_url=sim.url, **ess_options)
    settings = Settings(
        database_url=ess.database_url,
        redis_url=REDIS_URL,
        kube_url=sim.url,
        task_signing_key=SIGNING_KEY,
        stream_prefix=ess.names.prefix,
        ess_target=f"127.0.0.1:{ess.server.port}",
    )
    actuator = Actuator(settings, ConsumerSettings(claim_idle=30.0))
    await actuator.start()
    runner = asyncio.create_task(actuator.run())
    kube = await KubeClient.from_settings(settings)
    ess_client = EssClient(settings.ess_target, token="token-reconciler")
    reconciler = Reconciler(
        kube,
        ess_client,
        identity="r1",
        clock=utc_now,  # the Reconciler's host clock, not the cluster's: as deployed
        options=ReconcilerOptions(
            lease=None,
            batcher=BatcherOptions(flush_interval=flush_interval),
            startup_grace=startup_grace,
            diagnostics_interval=0.2,
            queue_position_interval=0.5,
            orphan_interval=orphan_interval,
            vanished=vanished or VanishedSettings(),
        ),
    )
    await reconciler.start()
    try:
        yield System(ess, sim, kube, actuator, reconciler, kueue_version or "0.19")
    finally:
        await reconciler.stop()
        await ess_client.close()
        await kube.close()
        await actuator.stop()
        runner.cancel()
        await sim.stop()
