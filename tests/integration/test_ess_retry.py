"""XMC's client rule (``xmc.ess_retry``) against real gRPC servers stopped gracefully
under load: a stopping ``grpc.aio`` server answers CANCELLED for the calls it had
received but not yet handed to a handler (grpc/grpc#41785), so a client without the rule
fails some calls at every stop, and one with it none."""

from __future__ import annotations

import asyncio
from collections import Counter

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.waiting import eventually
from xmc.ess_retry import channel_options

CLIENTS, ROUNDS = 16, 2
OPTIONS = channel_options()


async def serve(port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, bound


async def test_with_the_rule_no_call_fails_while_each_of_two_servers_restarts() -> None:
    servers = [await serve(), await serve()]
    target = "ipv4:" + ",".join(f"127.0.0.1:{port}" for _, port in servers)
    outcomes: Counter[str] = Counter()
    stop = asyncio.Event()

    async def client() -> None:
        channel = grpc.aio.insecure_channel(target, options=OPTIONS)
        stub = health_pb2_grpc.HealthStub(channel)
        while not stop.is_set():
            try:
                await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
                outcomes["OK"] += 1
            except grpc.aio.AioRpcError as error:
                outcomes[error.code().name] += 1
        await channel.close()

    async def served(more: int) -> None:
        """Until ``more`` calls more have been answered OK."""
        at_least = outcomes["OK"] + more
        await eventually(lambda: outcomes["OK"] >= at_least, within=30, what="calls served")

    clients = [asyncio.create_task(client()) for _ in range(CLIENTS)]
    try:
        for _ in range(ROUNDS):
            for index, (server, port) in enumerate(servers):
                await served(200)
                await server.stop(5)  # as the ESS stops: in-flight calls may finish
                servers[index] = await serve(port)
        await served(200)
    finally:
        stop.set()
        await asyncio.gather(*clients)
        for server, _ in servers:
            await server.stop(None)
    assert set(outcomes) == {"OK"}, outcomes
