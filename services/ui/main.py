"""``xmc-ui``: the web dashboard (and the REST/JSON face) of the ESS.

Settings (environment, flags override):

- ``XMC_UI_LISTEN`` — host:port of the pages (default ``127.0.0.1:8080``; port 0 = any).
- ``XMC_ESS_TARGET`` — the ESS's gRPC address; ``https://host:port`` for TLS.
- ``XMC_UI_TOKEN`` — bearer token for callers whose request carries no ``Authorization``
  header (a single-user or development dashboard); '' = send none.
- ``XMC_UI_POLL_SECONDS`` — how often a page refreshes its live region (default 2).
- ``XMC_METRICS_LISTEN`` — ``/metrics``, ``/healthz``, ``/readyz`` as every service has;
  the UI listener answers ``/healthz`` and ``/readyz`` too.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field

import grpc
import structlog
from aiohttp import web

from ui.app import create_app, ess_readiness
from ui.context import UiOptions
from xmc.errors import InvalidArgumentError
from xmc.ess_retry import channel_options
from xmc.health import OpsServer
from xmc.logging import configure_logging
from xmc.settings import XmcSettings, load_settings
from xmc.supervise import run_service

log = structlog.get_logger()


@dataclass(frozen=True)
class UiRun:
    """What :func:`serve` needs: the dashboard's settings and the shared ones it reads."""

    listen: str = "127.0.0.1:8080"
    ess_target: str = "127.0.0.1:50051"
    metrics_listen: str = ""
    options: UiOptions = field(default_factory=UiOptions)

    @classmethod
    def from_settings(cls, loaded: XmcSettings) -> UiRun:
        """The dashboard's settings; with restricted reads a default token is refused: a
        request that brings no credentials would read as the dashboard's identity."""
        ui = loaded.ui
        if ui.token and loaded.auth.restricted_reads:
            raise InvalidArgumentError(
                "XMC_UI_TOKEN: must be empty with XMC_READ_AUTHORIZATION=restricted (a "
                "request without an Authorization header would read as the dashboard's "
                "identity, not the person's)"
            )
        return cls(
            listen=ui.listen,
            ess_target=loaded.core.ess_target,
            metrics_listen=loaded.core.metrics_listen,
            options=UiOptions(default_token=ui.token, poll_seconds=ui.poll_seconds),
        )


def ess_channel(target: str) -> grpc.aio.Channel:
    """``host:port`` or ``http://host:port`` in plaintext, ``https://host:port`` with TLS;
    calls a restarting ESS dropped are resent by XMC's client rule (``xmc.ess_retry``)."""
    scheme, sep, rest = target.partition("://")
    if sep and scheme.lower() == "https":
        return grpc.aio.secure_channel(
            rest.rstrip("/"), grpc.ssl_channel_credentials(), channel_options()
        )
    return grpc.aio.insecure_channel(rest.rstrip("/") if sep else target, channel_options())


async def start_site(app: web.Application, listen: str) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port``; the bound port (port 0 asks the OS for one)."""
    host, _, port = listen.rpartition(":")
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host or "0.0.0.0", int(port))
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        raise OSError(error.errno, f"xmc-ui on {listen}: {error.strerror}") from error
    return runner, int(runner.addresses[0][1])


async def serve(settings: UiRun, stopping: asyncio.Event) -> None:
    channel = ess_channel(settings.ess_target)
    ops = OpsServer(settings.metrics_listen, ess_readiness(channel))
    runner: web.AppRunner | None = None
    try:
        metrics_port = await ops.start()
        if metrics_port is not None:
            log.info("metrics and health serving", port=metrics_port)
        runner, port = await start_site(create_app(channel, settings.options), settings.listen)
        log.info("dashboard serving", port=port, ess=settings.ess_target)
        await stopping.wait()
        log.info("stopping: finishing requests in flight")
    finally:
        if runner is not None:
            await runner.cleanup()  # stops accepting, lets requests in flight finish
        await ops.stop()
        await channel.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="xmc-ui", description="XMC web dashboard")
    parser.add_argument("--listen", help="host:port of the pages; overrides XMC_UI_LISTEN")
    parser.add_argument("--ess-target", help="the ESS's gRPC address; overrides XMC_ESS_TARGET")
    parser.add_argument(
        "--metrics-listen", default=None, help="host:port of /metrics; overrides XMC_METRICS_LISTEN"
    )
    args = parser.parse_args(argv)
    configure_logging(service="ui")
    settings = UiRun.from_settings(load_settings())
    settings = UiRun(
        listen=args.listen or settings.listen,
        ess_target=args.ess_target or settings.ess_target,
        metrics_listen=(
            args.metrics_listen if args.metrics_listen is not None else settings.metrics_listen
        ),
        options=settings.options,
    )
    run_service(lambda stopping: serve(settings, stopping), service="ui")
