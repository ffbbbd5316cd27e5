"""``xmc-ess``: ``migrate`` applies the schema; ``serve`` (the gRPC server) lands with issue 3."""

from __future__ import annotations

import argparse
import asyncio
import sys

import structlog

from xmc.config import Settings
from xmc.logging import configure_logging
from xmc.placeholder import not_yet
from xmc.store.migrate import migrate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="xmc-ess", description="XMC Experiment State Server")
    parser.add_argument("--database-url", help="overrides XMC_DATABASE_URL")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="apply the Postgres schema migrations and exit")
    sub.add_parser("serve", help="serve the gRPC API")
    args = parser.parse_args(argv)

    configure_logging(service="ess")
    settings = Settings.from_env()
    dsn = args.database_url or settings.database_url
    if args.command == "migrate":
        applied = asyncio.run(migrate(dsn))
        structlog.get_logger().info("migrated", applied=applied)
        return
    sys.exit(not_yet("xmc-ess serve", 3))
