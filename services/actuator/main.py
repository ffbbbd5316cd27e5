"""``xmc-actuator``: turns signed tasks into guarded JobSet actions (SPEC §6–§7)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import structlog

from actuator.app import Actuator
from actuator.consumer import ConsumerSettings
from actuator.repair import RepairSettings
from xmc.health import OpsServer
from xmc.logging import configure_logging
from xmc.settings import load_settings
from xmc.supervise import run_service, supervise


async def _serve(actuator: Actuator, metrics_listen: str, stopping: asyncio.Event) -> None:
    ops = OpsServer(metrics_listen, actuator.readiness)
    port = await ops.start()
    if port is not None:
        structlog.get_logger().info("metrics and health serving", port=port)
    try:
        await actuator.start()
        runner = asyncio.create_task(actuator.run(), name="actuator")
        await supervise([runner], stopping=stopping)
    finally:
        await actuator.stop()
        await ops.stop()
    with contextlib.suppress(asyncio.CancelledError):
        await runner


def main(argv: list[str] | None = None) -> None:
    defaults = ConsumerSettings()
    parser = argparse.ArgumentParser(prog="xmc-actuator", description="XMC Actuator")
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument(
        "--claim-idle",
        type=float,
        default=defaults.claim_idle,
        help="seconds before another Actuator may claim an unacked task",
    )
    parser.add_argument("--max-deliveries", type=int, default=defaults.max_deliveries)
    repair = RepairSettings()
    parser.add_argument(
        "--repair-interval",
        type=float,
        default=repair.interval_seconds,
        help="seconds between steps of the repair sweep",
    )
    parser.add_argument(
        "--repair-after",
        type=float,
        default=repair.stuck_after_seconds,
        help="seconds an execution may stay INITIALIZING/RESTARTING/STOPPING before repair",
    )
    parser.add_argument("--consumer-name", default=None, help="default: host-pid-random")
    parser.add_argument("--metrics-listen", default=None, help="overrides XMC_METRICS_LISTEN")
    args = parser.parse_args(argv)

    configure_logging(service="actuator")
    settings = load_settings().core
    metrics_listen = (
        args.metrics_listen if args.metrics_listen is not None else settings.metrics_listen
    )
    consumer_settings = ConsumerSettings(
        concurrency=args.concurrency,
        claim_idle=args.claim_idle,
        max_deliveries=args.max_deliveries,
    )
    repair_settings = RepairSettings(
        interval_seconds=args.repair_interval, stuck_after_seconds=args.repair_after
    )
    actuator = Actuator(
        settings,
        consumer_settings,
        repair_settings=repair_settings,
        consumer_name=args.consumer_name,
    )
    run_service(lambda stopping: _serve(actuator, metrics_listen, stopping), service="actuator")
