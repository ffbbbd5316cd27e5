"""What every handler shares: the app's keys, the options, template rendering and the ESS
as the calling user."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jinja2
from aiohttp import web

from ui.gateway import Ess, call_metadata
from ui.request_ids import request_id

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class UiOptions:
    #: Bearer token sent for callers that bring no ``Authorization`` header ('' = none).
    default_token: str = ""
    #: Seconds between the live updates a page polls for.
    poll_seconds: float = 2.0


CHANNEL: web.AppKey[grpc.aio.Channel] = web.AppKey("channel", grpc.aio.Channel)
OPTIONS: web.AppKey[UiOptions] = web.AppKey("options", UiOptions)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


def render(
    request: web.Request, template: str, context: dict[str, Any], *, status: int = 200
) -> web.Response:
    options = request.app[OPTIONS]
    text = (
        request.app[TEMPLATES]
        .get_template(template)
        .render(request=request, poll_ms=int(options.poll_seconds * 1000), **context)
    )
    return web.Response(text=text, status=status, content_type="text/html")


def ess(request: web.Request) -> Ess:
    """The ESS as this caller: their Authorization header, else the default token."""
    options = request.app[OPTIONS]
    metadata = call_metadata(
        request.headers.get("Authorization"), options.default_token, request_id(request)
    )
    return Ess(request.app[CHANNEL], metadata)
