"""A bare ``grpc.aio`` server: the floor under any Python ESS in the same benchmarks.

It does no work at all: each call's first 8 bytes give the size of its answer (big
endian), and it answers with that many bytes, cached. Run as its own process, like the
ESS, it measures what gRPC alone costs to carry requests and responses of the ESS's sizes
on this machine; a ratio against raw SQL above this floor's is out of reach of any
grpc.aio server, whatever it does inside.

    .venv/bin/python bench/bare_grpc.py PORT
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

METHOD = "/bench.Bare/Sized"
_answers: dict[int, bytes] = {}


def sized_request(response_size: int, request_size: int) -> bytes:
    """A request of ``request_size`` bytes asking for an answer of ``response_size``."""
    head = response_size.to_bytes(8, "big")
    return head + bytes(max(0, request_size - len(head)))


async def _sized(request: bytes, _context: Any) -> bytes:
    size = int.from_bytes(request[:8], "big")
    answer = _answers.get(size)
    if answer is None:
        answer = _answers[size] = bytes(size)
    return answer


async def serve(port: int) -> None:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ]
    )
    handler = grpc.unary_unary_rpc_method_handler(_sized)
    service, method = METHOD.strip("/").split("/")
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {method: handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
