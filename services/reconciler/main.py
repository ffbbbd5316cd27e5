"""``xmc-reconciler``: the observation loop (SPEC §8)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import uuid
from datetime import timedelta

import structlog

from reconciler.app import Reconciler, ReconcilerOptions
from reconciler.ess_client import EssClient
from reconciler.leader import LeaseSettings
from reconciler.vanished import VanishedSettings
from xmc.health import OpsServer
from xmc.kube_client import KubeClient
from xmc.logging import configure_logging
from xmc.settings import ServiceClientSettings, Settings, load_settings
from xmc.supervise import run_service, supervise
from xmc.timestamps import utc_now


async def _serve(
    settings: Settings,
    client: ServiceClientSettings,
    options: ReconcilerOptions,
    identity: str,
    metrics_listen: str,
    stopping: asyncio.Event,
) -> None:
    api = await KubeClient.from_settings(settings)
    ess = EssClient(
        settings.ess_target, token=client.token, dead_peer_seconds=settings.dead_peer_seconds
    )
    reconciler = Reconciler(api, ess, identity=identity, clock=utc_now, options=options)
    ess.fencing = reconciler.elector  # its writes carry the term's generation (0054)
    ops = OpsServer(metrics_listen, reconciler.readiness)
    try:
        port = await ops.start()
        if port is not None:
            structlog.get_logger().info("metrics and health serving", port=port)
        await reconciler.start()
        structlog.get_logger().info(
            "reconciler started", identity=identity, ess=settings.ess_target
        )
        running = asyncio.create_task(reconciler.run(), name="reconciler")
        await supervise([running], stopping=stopping)
    finally:
        await reconciler.stop()
        await ops.stop()
        await ess.close()
        await api.close()


def _seconds(text: str) -> float:
    """A positive number of seconds, or an error naming the value."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def lease_settings(namespace: str, seconds: float) -> LeaseSettings:
    """The Lease for ``--lease-seconds``: client-go's proportions (15 s: renew every 5 s,
    step down after 10 s without a renewal, retry every 2 s at most)."""
    return LeaseSettings(
        namespace=namespace, lease_seconds=seconds, renew_seconds=seconds / 3,
        retry_seconds=min(2.0, seconds / 5),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="xmc-reconciler", description="XMC Reconciler")
    parser.add_argument(
        "--identity", default=f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    )
    parser.add_argument(
        "--no-leader-election", action="store_true", help="a single replica: always write"
    )
    parser.add_argument("--metrics-listen", default=None, help="overrides XMC_METRICS_LISTEN")
    parser.add_argument(
        "--lease-seconds", type=_seconds, default=LeaseSettings().lease_seconds,
        help="seconds a leader's Lease keeps standbys away (renewed every third of it)",
    )  # fmt: skip
    defaults = VanishedSettings()
    parser.add_argument(
        "--vanished-grace", type=_seconds, default=defaults.grace.total_seconds(),
        help="seconds a JobSet must be missing before its execution is ended FAILED",
    )  # fmt: skip
    parser.add_argument(
        "--vanished-interval", type=_seconds, default=defaults.interval,
        help="seconds between two vanished-JobSet sweeps",
    )  # fmt: skip
    args = parser.parse_args(argv)

    configure_logging(service="reconciler")
    loaded = load_settings()
    settings = loaded.core
    metrics_listen = (
        args.metrics_listen if args.metrics_listen is not None else settings.metrics_listen
    )
    lease = (
        None if args.no_leader_election else lease_settings(settings.namespace, args.lease_seconds)
    )
    vanished = VanishedSettings(
        interval=args.vanished_interval, grace=timedelta(seconds=args.vanished_grace)
    )
    options = ReconcilerOptions(
        namespace=settings.namespace, lease=lease, vanished=vanished, logs=loaded.logs
    )
    run_service(
        lambda stopping: _serve(
            settings, loaded.service_client, options, args.identity, metrics_listen, stopping
        ),
        service="reconciler",
    )
