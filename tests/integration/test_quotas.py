"""Quotas over real gRPC and Postgres (docs/quotas.md): a flooder refused with the limit
named while a bystander reads, live limits exact across two ESS replicas and kept in
step by the observation path, the shared bucket, group quotas from the token, the
admin API and the repair path."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import grpc
import jwt
from google.protobuf.empty_pb2 import Empty
from google.rpc import error_details_pb2, status_pb2

from tests.integration.ess_harness import Ess, EssFactory, auth_settings, metadata
from tests.integration.support import minimal_work_unit
from tests.integration.test_ess_api import expect_error
from tests.integration.test_ess_internal import SERVICE, observation
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.internal.v1 import executions_pb2
from xmc_api.xmc.v1 import quota_pb2, quota_pb2_grpc

ALICE, BOB, ROOT = metadata("alice"), metadata("bob"), metadata("root")
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def quotas(ess: Ess) -> quota_pb2_grpc.QuotaServiceStub:
    return quota_pb2_grpc.QuotaServiceStub(ess.channel)


async def set_quota(ess: Ess, name: str, **limits: Any) -> quota_pb2.Quota:
    answer: quota_pb2.Quota = await quotas(ess).SetQuota(
        quota_pb2.SetQuotaRequest(quota=quota_pb2.Quota(name=name, **limits)), metadata=ROOT
    )
    return answer


async def new_experiment(ess: Ess, who: Any = ALICE) -> str:
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=who
    )
    return str(experiment.name)


async def create(ess: Ess, parent: str, who: Any = ALICE) -> str | grpc.aio.AioRpcError:
    """A work unit's name, or the error that refused it."""
    try:
        operation = await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit()),
            metadata=who,
        )
    except grpc.aio.AioRpcError as error:
        return error
    return str(operation.name)


async def stored_counts(ess: Ess, xid: int) -> tuple[int, int, int]:
    """Work units, their CREATE operations and their tasks in the outbox."""
    assert ess.server.store is not None
    async with ess.server.store.connection() as conn:
        units = await conn.fetchval("SELECT count(*) FROM work_units WHERE xid = $1", xid)
        operations = await conn.fetchval(
            "SELECT count(*) FROM operations WHERE xid = $1 AND action_type = 1", xid
        )
        tasks = await conn.fetchval("SELECT count(*) FROM task_outbox WHERE xid = $1", xid)
    return units, operations, tasks


async def test_a_flooder_is_refused_with_the_limit_named_and_nothing_half_created(
    ess: Ess,
) -> None:
    """The ESS's clock is fixed, so the bucket never refills: alice gets exactly her
    burst (the experiment took one token), every other create is RESOURCE_EXHAUSTED, and
    bob's reads all answer meanwhile."""
    await set_quota(ess, "quotas/users/alice@example.com", creates_per_second=0.25, creates_burst=6)
    parent = await new_experiment(ess)
    theirs = await new_experiment(ess, BOB)

    async def bystander() -> int:
        answered = 0
        for _ in range(40):
            await ess.api.GetExperiment(api_pb2.GetExperimentRequest(name=theirs), metadata=BOB)
            answered += 1
        return answered

    results, answered = await asyncio.gather(
        asyncio.gather(*(create(ess, parent) for _ in range(80))), bystander()
    )
    created = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if not isinstance(r, str)]
    assert len(created) == 5
    assert answered == 40
    assert {r.code() for r in refused} == {EXHAUSTED}
    details = refused[0].details() or ""
    assert "user:alice@example.com may create at most 0.25" in details
    assert "per second (burst 6); retry in 4.00 s" in details
    # Answered after a hold of 1 s (real time; the ESS's clock stands still): 3 s left.
    trailers = dict(refused[0].trailing_metadata() or ())
    assert trailers["retry-after"] == "3"
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    retry = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(retry)
    assert retry.retry_delay.ToTimedelta().total_seconds() == 3
    # Exactly the admitted units exist, each with its Operation and its task.
    assert await stored_counts(ess, int(parent.split("/")[1])) == (5, 5, 5)
    # Bob is not throttled by alice's quota (no default is set).
    assert isinstance(await create(ess, theirs, BOB), str)
    # Time refills the bucket (past the remembered refusal too).
    ess.clock.advance(8)
    assert [isinstance(await create(ess, parent), str) for _ in range(3)] == [True, True, False]


async def observe(ess: Ess, work_units: list[str], state: WorkUnitState, seconds: int) -> None:
    await ess.executions.UpdateWorkUnitExecutions(
        executions_pb2.UpdateWorkUnitExecutionsRequest(
            updates=[observation(name, 1, state, ess, seconds=seconds) for name in work_units]
        ),
        metadata=SERVICE,
    )


async def test_a_live_limit_holds_exactly_across_two_replicas_and_follows_observations(
    ess_factory: EssFactory,
) -> None:
    first: Ess = await ess_factory()
    await set_quota(first, "quotas/users/alice@example.com", live_work_units=10)
    second: Ess = await ess_factory(clock=first.clock)  # reads the quota as it starts
    parent = await new_experiment(first)
    results = await asyncio.gather(*(create(first if i % 2 else second, parent) for i in range(60)))
    created = sorted(r for r in results if isinstance(r, str))
    assert len(created) == 10
    refusal = next(r for r in results if not isinstance(r, str))
    assert "user:alice@example.com may have at most 10 live work units (10 live now)" in (
        refusal.details() or ""
    )
    units = [f"{parent}/workUnits/{wid}" for wid in range(1, 11)]
    # Three finish (through the Reconciler's path), so three more fit, and no more.
    await observe(first, units[:3], WorkUnitState.RUNNING, 1)
    await observe(first, units[:3], WorkUnitState.COMPLETED, 2)
    first.clock.advance(5)  # past the remembered refusal
    results = await asyncio.gather(*(create(second, parent) for _ in range(6)))
    assert sum(isinstance(r, str) for r in results) == 3
    quota = await quotas(first).GetQuota(
        quota_pb2.GetQuotaRequest(name="quotas/users/alice@example.com"), metadata=ALICE
    )
    assert (quota.usage.live_work_units, quota.source) == (10, "quota")
    # The counts kept on the way equal a recount from the rows.
    recount = await quotas(first).ReconcileQuotaUsage(
        quota_pb2.ReconcileQuotaUsageRequest(), metadata=ROOT
    )
    assert recount.corrected == 0


async def test_the_bucket_is_shared_by_replicas(ess_factory: EssFactory) -> None:
    first: Ess = await ess_factory()
    await set_quota(first, "quotas/default", creates_per_second=2, creates_burst=4)
    second: Ess = await ess_factory(clock=first.clock)
    parent = await new_experiment(second, BOB)  # one token
    results = await asyncio.gather(
        *(create(first if i % 2 else second, parent, BOB) for i in range(20))
    )
    assert sum(isinstance(r, str) for r in results) == 3
    first.clock.advance(1.0)  # two tokens
    results = await asyncio.gather(
        *(create(first if i % 2 else second, parent, BOB) for i in range(20))
    )
    assert sum(isinstance(r, str) for r in results) == 2


def group_token(email: str, groups: list[str], ess: Ess) -> tuple[tuple[str, str], ...]:
    now = int(ess.clock.now.timestamp())
    token = jwt.encode(
        {"email": email, "groups": groups, "iat": now, "exp": now + 3600},
        SECRET,
        algorithm="HS256",
    )
    return (("authorization", f"Bearer {token}"),)


SECRET = "quota-test-secret-of-at-least-32-bytes!"


async def test_a_group_quota_counts_every_member(ess_factory: EssFactory) -> None:
    auth = auth_settings()
    ess: Ess = await ess_factory(
        auth=type(auth)(
            hs256_secret=SECRET,
            static_tokens=auth.static_tokens,
            admins=auth.admins,
            service_accounts=auth.service_accounts,
        )
    )
    await set_quota(ess, "quotas/groups/ml", live_experiments=3)
    carol = group_token("carol@example.com", ["ml"], ess)
    dave = group_token("dave@example.com", ["ml", "web"], ess)
    for who in (carol, dave, carol):
        await new_experiment(ess, who)
    await expect_error(new_experiment(ess, dave), EXHAUSTED, "group:ml may have at most 3")
    await new_experiment(ess, ALICE)  # not in ml
    quota = await quotas(ess).GetQuota(
        quota_pb2.GetQuotaRequest(name="quotas/groups/ml"), metadata=dave
    )
    assert quota.usage.live_experiments == 3
    await expect_error(
        quotas(ess).GetQuota(quota_pb2.GetQuotaRequest(name="quotas/groups/ml"), metadata=ALICE),
        grpc.StatusCode.PERMISSION_DENIED,
        "may read only their own quota",
    )


async def test_the_admin_api_and_the_repair_path(ess: Ess) -> None:
    api = quotas(ess)
    await expect_error(
        api.SetQuota(
            quota_pb2.SetQuotaRequest(quota=quota_pb2.Quota(name="quotas/default")),
            metadata=ALICE,
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "not an admin",
    )
    await expect_error(
        set_quota(ess, "quotas/teams/x", live_work_units=1),
        grpc.StatusCode.INVALID_ARGUMENT,
        "quota.name: expected quotas/users/",
    )
    await expect_error(
        set_quota(ess, "quotas/default", creates_burst=3),
        grpc.StatusCode.INVALID_ARGUMENT,
        "quota.creates_burst: needs creates_per_second",
    )
    quota = await set_quota(ess, "quotas/users/Alice@Example.com", live_work_units=4)
    assert (quota.name, quota.principal, quota.updated_by) == (
        "quotas/users/alice@example.com",
        "user:alice@example.com",
        "root@example.com",
    )
    parent = await new_experiment(ess)
    for _ in range(2):
        assert isinstance(await create(ess, parent), str)
    listed = await api.ListQuotas(quota_pb2.ListQuotasRequest(), metadata=ROOT)
    assert [(q.principal, q.usage.live_work_units) for q in listed.quotas] == [
        ("user:alice@example.com", 2)
    ]
    # A count broken by hand is put right by the repair path.
    assert ess.server.store is not None
    async with ess.server.store.connection() as conn:
        await conn.execute(
            "UPDATE quota_usage SET live_work_units = 40 WHERE principal = 'user:alice@example.com'"
        )
    answer = await api.ReconcileQuotaUsage(quota_pb2.ReconcileQuotaUsageRequest(), metadata=ROOT)
    assert answer.corrected == 1
    quota = await api.GetQuota(
        quota_pb2.GetQuotaRequest(name="quotas/users/alice@example.com"), metadata=ROOT
    )
    assert (quota.usage.live_work_units, quota.usage.live_experiments) == (2, 1)
    assert isinstance(
        await api.DeleteQuota(
            quota_pb2.DeleteQuotaRequest(name="quotas/users/alice@example.com"), metadata=ROOT
        ),
        Empty,
    )
    await expect_error(
        api.DeleteQuota(
            quota_pb2.DeleteQuotaRequest(name="quotas/users/alice@example.com"), metadata=ROOT
        ),
        grpc.StatusCode.NOT_FOUND,
        "has no quota set",
    )
    quota = await api.GetQuota(
        quota_pb2.GetQuotaRequest(name="quotas/users/alice@example.com"), metadata=ALICE
    )
    assert quota.source == "none"
    assert not quota.HasField("live_work_units")
    results = [await create(ess, parent) for _ in range(5)]
    assert Counter(isinstance(r, str) for r in results)[True] == 5
