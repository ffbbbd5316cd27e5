"""``xmc-ess``: ``migrate`` applies the schema; ``serve`` runs the Experiment State Server."""

from __future__ import annotations

import argparse
import asyncio

import structlog

from ess.app import EssOptions, EssServer
from xmc.health import OpsServer
from xmc.logging import configure_logging
from xmc.settings import Settings, load_settings
from xmc.store.transactions import migrate
from xmc.supervise import run_service


async def _serve(
    settings: Settings, options: EssOptions, metrics_listen: str, stopping: asyncio.Event
) -> None:
    server = EssServer(settings, options)
    stopping_task = asyncio.create_task(_forward(stopping, server))
    ops = OpsServer(metrics_listen, server.readiness)
    try:
        port = await ops.start()
        if port is not None:
            structlog.get_logger().info("metrics and health serving", port=port)
        await server.start()
        await server.wait()
    finally:
        stopping_task.cancel()
        await server.stop()
        await ops.stop()


async def _forward(stopping: asyncio.Event, server: EssServer) -> None:
    """SIGTERM (``stopping``) becomes the ESS's own stop request."""
    await stopping.wait()
    server.request_stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="xmc-ess", description="XMC Experiment State Server")
    parser.add_argument("--database-url", help="overrides XMC_DATABASE_URL")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="apply the Postgres schema migrations and exit")
    serve = sub.add_parser("serve", help="serve the gRPC API")
    serve.add_argument("--listen", help="host:port to bind; overrides XMC_ESS_LISTEN")
    serve.add_argument(
        "--metrics-listen", default=None, help="host:port of /metrics; overrides XMC_METRICS_LISTEN"
    )
    args = parser.parse_args(argv)

    configure_logging(service="ess")
    loaded = load_settings()
    settings = loaded.core
    overrides = {"database_url": args.database_url}
    if args.command == "serve" and args.listen:
        overrides["ess_listen"] = args.listen
    settings = settings.replace(**{k: v for k, v in overrides.items() if v})
    if args.command == "migrate":
        applied = asyncio.run(migrate(settings.database_url))
        structlog.get_logger().info("migrated", applied=applied)
        return
    metrics_listen = (
        args.metrics_listen if args.metrics_listen is not None else settings.metrics_listen
    )
    options = EssOptions.from_settings(loaded)
    run_service(lambda stopping: _serve(settings, options, metrics_listen, stopping), service="ess")
