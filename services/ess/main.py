"""``xmc-ess``: ``migrate`` applies the schema; ``serve`` runs the Experiment State Server."""

from __future__ import annotations

import argparse
import asyncio
import signal

import structlog

from ess.app import EssOptions, EssServer
from xmc.config import Settings
from xmc.logging import configure_logging
from xmc.metrics import serve_metrics
from xmc.store.migrate import migrate


async def _serve(settings: Settings, options: EssOptions) -> None:
    server = EssServer(settings, options)
    await server.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.request_stop)
    await server.wait()
    await server.stop()


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
    settings = Settings.from_env()
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
    port = serve_metrics(metrics_listen)
    if port is not None:
        structlog.get_logger().info("metrics serving", port=port)
    asyncio.run(_serve(settings, EssOptions.from_env()))
