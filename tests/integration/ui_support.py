"""The dashboard on a free port over an ESS channel, for the page and browser tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc

from ui.app import create_app
from ui.context import UiOptions
from ui.main import start_site


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
