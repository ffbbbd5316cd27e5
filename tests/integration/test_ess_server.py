"""The ESS as a server: reflection, health and TLS (the outbox under a Redis outage is in
``test_ess_outbox.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.integration.ess_harness import Ess, metadata
from tests.integration.tls import self_signed
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

ALICE = metadata("alice")


async def _reflect(channel: grpc.aio.Channel, request: Any) -> Any:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    async for response in stub.ServerReflectionInfo(iter([request])):
        return response
    raise AssertionError("no reflection response")


async def test_reflection_lists_every_service_and_all_26_methods(ess: Ess) -> None:
    listed = await _reflect(ess.channel, reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {s.name for s in listed.list_services_response.service}
    assert names >= {
        "cloud.xmanager.v1.ExperimentStateService",
        "google.longrunning.Operations",
        "xmc.internal.v1.WorkUnitExecutionService",
        "xmc.internal.v1.SchedulingService",
        "grpc.health.v1.Health",
    }
    found = await _reflect(
        ess.channel,
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="cloud.xmanager.v1.ExperimentStateService"
        ),
    )
    files = [
        FileDescriptorProto.FromString(raw)
        for raw in found.file_descriptor_response.file_descriptor_proto
    ]
    (service,) = [s for f in files for s in f.service if s.name == "ExperimentStateService"]
    assert len(service.method) == 26


async def test_health_answers_without_a_token(ess: Ess) -> None:
    stub = health_pb2_grpc.HealthStub(ess.channel)
    for service in ("", "cloud.xmanager.v1.ExperimentStateService"):
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING


async def test_tls_when_a_certificate_is_configured(ess_factory: Any, tmp_path: Path) -> None:
    cert_file, key_file = self_signed(tmp_path)
    ess: Ess = await ess_factory(tls_cert_file=str(cert_file), tls_key_file=str(key_file))
    credentials = grpc.ssl_channel_credentials(root_certificates=cert_file.read_bytes())
    async with grpc.aio.secure_channel(f"localhost:{ess.server.port}", credentials) as channel:
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        created = await api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment(title="tls")), metadata=ALICE
        )
        assert created.title == "tls"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{ess.server.port}") as plain:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await api_pb2_grpc.ExperimentStateServiceStub(plain).ListExperiments(
                api_pb2.ListExperimentsRequest(), metadata=ALICE, timeout=2
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, "plaintext cannot reach TLS"
