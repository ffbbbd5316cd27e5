"""The dashboard on a free port over an ESS channel, for the page and browser tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
import redis.asyncio as aioredis

from tests.integration.ess_harness import SIGNING_KEY
from tests.servers import REDIS_URL
from tests.stack import delete_prefixed_keys, free_ports, wait_listening
from ui.app import create_app
from ui.context import UiOptions
from ui.main import start_site

BIN = Path(sys.executable).parent


@contextlib.asynccontextmanager
async def running_ui(
    channel: grpc.aio.Channel, *, token: str = "token-alice", poll_seconds: float = 0.3
) -> AsyncIterator[str]:
    """The dashboard's base URL (``http://127.0.0.1:PORT``) while the block runs."""
    app = create_app(channel, UiOptions(default_token=token, poll_seconds=poll_seconds))
    runner, port = await start_site(app, "127.0.0.1:0")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@dataclass(frozen=True)
class LiveStack:
    """An ESS and an xmc-ui as OS processes: the dashboard's URL and the ESS's port."""

    ui: str
    ess_port: int
    processes: tuple[asyncio.subprocess.Process, ...]


@contextlib.asynccontextmanager
async def ess_and_ui_processes(
    database_url: str, logs_dir: Path, env: Mapping[str, str]
) -> AsyncIterator[LiveStack]:
    """``xmc-ess serve`` and ``xmc-ui`` in front of it, with ``env`` (the auth settings)
    over the test's database, Redis (a prefix of its own) and no cluster; their logs are
    printed when the block ends, so a failing test shows them."""
    ess_port, ui_port, no_cluster = free_ports(3)
    prefix = f"live-{uuid.uuid4().hex[:8]}:"
    full = {
        **os.environ,
        "XMC_DATABASE_URL": database_url,
        "XMC_REDIS_URL": REDIS_URL,
        "XMC_ESS_LISTEN": f"127.0.0.1:{ess_port}",
        "XMC_METRICS_LISTEN": "",
        "XMC_TASK_SIGNING_KEY": SIGNING_KEY,
        "XMC_STREAM_PREFIX": prefix,
        # No cluster: a live log read finds it unreachable at once, whatever kubeconfig
        # the machine has.
        "XMC_KUBE_URL": f"http://127.0.0.1:{no_cluster}",
        **env,
    }
    logs = {name: (logs_dir / f"{name}.log").open("wb") for name in ("ess", "ui")}
    ess = await asyncio.create_subprocess_exec(
        str(BIN / "xmc-ess"), "serve", env=full, stdout=logs["ess"], stderr=logs["ess"]
    )
    ui = await asyncio.create_subprocess_exec(
        str(BIN / "xmc-ui"), "--listen", f"127.0.0.1:{ui_port}",
        "--ess-target", f"127.0.0.1:{ess_port}", env=full, stdout=logs["ui"], stderr=logs["ui"],
    )  # fmt: skip
    try:
        await wait_listening(ess_port, ess, "xmc-ess")
        await wait_listening(ui_port, ui, "xmc-ui")
        yield LiveStack(f"http://127.0.0.1:{ui_port}", ess_port, (ess, ui))
    finally:
        for process in (ui, ess):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), timeout=30)
        for log in logs.values():
            log.close()
        client = aioredis.from_url(REDIS_URL)
        await delete_prefixed_keys(client, prefix)
        await client.aclose()
        for name in logs:
            print(f"----- {name} -----", (logs_dir / f"{name}.log").read_text()[-4000:], sep="\n")
