"""What the published client (``xmanager`` 0.8.5.post1, ``xm_cloud``) does when a quota
refuses it (docs/quotas.md): its sweep stops with the refusal, the admitted units exist,
and its launch is closed. Against an in-process ESS (creates need no cluster)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import pytest

from tests.compat.support import HERE
from tests.integration.ess_harness import Ess, EssFactory, metadata
from xmc.model.states import LaunchState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.xmc.v1 import quota_pb2, quota_pb2_grpc

pytestmark = pytest.mark.compat


async def test_a_refused_sweep_stops_with_the_refusal_and_keeps_what_was_admitted(
    full_python: Path, ess_factory: EssFactory
) -> None:
    ess: Ess = await ess_factory()
    quota = quota_pb2.Quota(name="quotas/users/alice@example.com", live_work_units=2)
    await quota_pb2_grpc.QuotaServiceStub(ess.channel).SetQuota(
        quota_pb2.SetQuotaRequest(quota=quota), metadata=metadata("root")
    )
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env = {
        **keep,
        "XMANAGER_ENDPOINT": f"http://127.0.0.1:{ess.server.port}",
        "XMC_AUTH_TOKEN": "token-alice",
        "XMC_USER_EMAIL": "alice@example.com",
    }
    process = await asyncio.create_subprocess_exec(
        str(full_python), str(HERE / "client_sweep.py"), "launch", "4",
        cwd=tempfile.gettempdir(), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    text = err.decode()
    assert process.returncode != 0
    assert "StatusCode.RESOURCE_EXHAUSTED" in text, text[-3000:]
    assert "quota: user:alice@example.com may have at most 2 live work units" in text
    found = await ess.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent="experiments/1"), metadata=metadata("alice")
    )
    assert len(found.work_units) == 2
    experiment = await ess.api.GetExperiment(
        api_pb2.GetExperimentRequest(name="experiments/1"), metadata=metadata("alice")
    )
    assert experiment.status.launch_state == LaunchState.COMPLETED
