"""CreateWorkUnit under a stalled Postgres (issue 24): callers whose deadline passes while
their create waits get DEADLINE_EXCEEDED and no unit; the others get OK and exactly their
unit; nobody gets INTERNAL. Before the fix, the first caller that gave up made the whole
group answer INTERNAL for units that were created, which a retrying client duplicated.

Postgres is a private cluster frozen with SIGSTOP (the shared one must never stall)."""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg
import grpc
import pytest
from google.longrunning.operations_proto_pb2 import Operation

from tests.integration.ess_harness import EssFactory, metadata
from tests.integration.postgres_server import PostgresServer
from tests.integration.support import minimal_work_unit
from xmc.names import work_unit_name
from xmc.store.migrate import apply_migrations
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata

# A stalled Postgres at real time: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

ALICE = metadata("alice")
#: The scenario of issue 24: Postgres stalled 8 s, 20 creates, half with 3 s deadlines.
FREEZE_SECONDS = 8.0
CALLS = 20
SHORT_DEADLINE = 3.0
LONG_DEADLINE = 60.0


@pytest.fixture
async def database_url(private_postgres: PostgresServer) -> str:
    """The ESS's database on the private cluster (overrides the shared-server one)."""
    conn = await asyncpg.connect(private_postgres.admin_dsn)
    try:
        await apply_migrations(conn)
    finally:
        await conn.close()
    return private_postgres.admin_dsn


async def _create(
    api: api_pb2_grpc.ExperimentStateServiceStub,
    parent: str,
    deadline: float,
) -> tuple[str, str | None]:
    """(status code name, the created unit's name when OK)."""
    request = api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit())
    try:
        operation: Operation = await api.CreateWorkUnit(request, metadata=ALICE, timeout=deadline)
    except grpc.aio.AioRpcError as error:
        return error.code().name, None
    meta = OperationMetadata()
    operation.metadata.Unpack(meta)
    return "OK", meta.target


async def test_creates_under_a_frozen_postgres_answer_ok_only_for_the_units_created(
    ess_factory: EssFactory, private_postgres: PostgresServer, database_url: str
) -> None:
    ess = await ess_factory()
    experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="stall")), metadata=ALICE
    )
    loop = asyncio.get_running_loop()
    deadlines = [SHORT_DEADLINE if i % 2 == 0 else LONG_DEADLINE for i in range(CALLS)]

    with private_postgres.frozen():
        frozen_at = loop.time()
        calls = [
            asyncio.ensure_future(_create(ess.api, experiment.name, deadline))
            for deadline in deadlines
        ]
        # The stall itself is the scenario: a fixed duration, longer than the short deadlines.
        await asyncio.sleep(FREEZE_SECONDS - (loop.time() - frozen_at))
        short_done = [c.done() for c, d in zip(calls, deadlines, strict=True) if d < FREEZE_SECONDS]
        assert all(short_done), "the short-deadline callers gave up while Postgres was frozen"
    answers = await asyncio.wait_for(asyncio.gather(*calls), LONG_DEADLINE + 5)

    codes = Counter(code for code, _ in answers)
    assert codes == {"OK": CALLS // 2, "DEADLINE_EXCEEDED": CALLS // 2}, codes
    for (code, _), deadline in zip(answers, deadlines, strict=True):
        assert code == ("OK" if deadline == LONG_DEADLINE else "DEADLINE_EXCEEDED")
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT xid, wid FROM work_units")
    finally:
        await conn.close()
    stored = sorted(work_unit_name(r["xid"], r["wid"]) for r in rows)
    answered = sorted(unit for code, unit in answers if code == "OK" and unit is not None)
    assert stored == answered
