"""A restricted-reads ESS (``XMC_READ_AUTHORIZATION=restricted``, decision 0048) for the
read-authorization tests, and the experiments they share: alice's private one (with a work
unit, an artifact, a webhook), one alice shares with the group ``ml-team``, and bob's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from tests.integration.ess_harness import TOKENS, Ess, EssFactory, metadata
from tests.integration.support import minimal_work_unit
from xmc.auth_settings import AuthSettings
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls
from xmc_api.xmc.v1 import notifications_pb2, notifications_pb2_grpc

#: Signs the HS256 tokens of the tests that carry a groups claim.
HS256_SECRET = "read-authorization-test-secret-of-32-bytes"
Metadata = tuple[tuple[str, str], ...]
ALICE, BOB, CAROL, ROOT = (metadata(who) for who in ("alice", "bob", "carol", "root"))


def restricted_auth() -> AuthSettings:
    """The harness's callers plus carol, a member of ml-team (a static token's groups)."""
    return AuthSettings(
        static_tokens={
            **{f"token-{who}": email for who, email in TOKENS.items()},
            "token-carol": "carol@example.com",
        },
        admins=frozenset({"root@example.com"}),
        service_accounts=frozenset({"reconciler@xmc.internal"}),
        hs256_secret=HS256_SECRET,
        restricted_reads=True,
        static_groups={"carol@example.com": frozenset({"ml-team"})},
    )


@dataclass(frozen=True)
class World:
    ess: Ess
    private: str  # alice's, nobody else's
    unit: str  # its work unit
    operation: str  # the unit's create operation
    artifact: str  # an artifact of the private experiment
    webhook: str  # a webhook of the private experiment
    shared: str  # alice's, readable by the group ml-team
    bobs: str  # bob's own


async def create_experiment(ess: Ess, who: Metadata, acls: XidAcls | None = None) -> str:
    experiment = Experiment(title="read-auth")
    if acls is not None:
        experiment.acls.CopyFrom(acls)
    created: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=experiment), metadata=who
    )
    return created.name


async def set_acls(ess: Ess, experiment: str, acls: XidAcls, who: Metadata = ALICE) -> None:
    await ess.api.UpdateExperiment(
        api_pb2.UpdateExperimentRequest(
            experiment=Experiment(name=experiment, acls=acls), update_mask=FieldMask(paths=["acls"])
        ),
        metadata=who,
    )


async def build_world(ess: Ess) -> World:
    private = await create_experiment(ess, ALICE)
    operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=private, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )
    artifact = await ess.api.CreateArtifact(
        api_pb2.CreateArtifactRequest(parent=private, artifact=Artifact(notes="weights")),
        metadata=ALICE,
    )
    hooks = notifications_pb2_grpc.NotificationServiceStub(ess.channel)
    webhook = await hooks.CreateWebhook(
        notifications_pb2.CreateWebhookRequest(
            parent=private, webhook=notifications_pb2.Webhook(url="https://hooks.example.com/x")
        ),
        metadata=ALICE,
    )
    group = XidAcls(readers=[XidAcls.Role(group="ml-team")])
    return World(
        ess=ess,
        private=private,
        unit=operation.name.split("/operations/")[0],
        operation=operation.name,
        artifact=artifact.name,
        webhook=webhook.name,
        shared=await create_experiment(ess, ALICE, group),
        bobs=await create_experiment(ess, BOB),
    )


@pytest.fixture
async def world(ess_factory: EssFactory) -> World:
    return await build_world(await ess_factory(auth=restricted_auth()))


def refused_with(error: grpc.aio.AioRpcError | None, code: grpc.StatusCode) -> str:
    """The details of ``error``, which must be a refusal with ``code``."""
    assert error is not None, f"expected {code.name}, the call succeeded"
    assert error.code() == code, error.details()
    return error.details() or ""


async def refusal(call: Any) -> grpc.aio.AioRpcError | None:
    """The error a call (a unary call, or a stream read to its end) ended with, if any."""
    try:
        if hasattr(call, "__aiter__"):
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as error:
        return error
    return None
