"""What every handler shares: the ``ApiContext`` (store, faults, watches, admission
steps) on the app, JSON answers, and the errors of a path or method not served.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from kubesim.clock import SimClock
from kubesim.container_logs import LogScript
from kubesim.errors import ApiError
from kubesim.faults import Faults
from kubesim.freshness import WAIT_SECONDS
from kubesim.store import ObjectStore
from kubesim.watch import WatchHub

Obj = dict[str, Any]

_JSON_SEPARATORS = (",", ":")


@dataclass
class ApiContext:
    store: ObjectStore
    faults: Faults
    watches: WatchHub
    bookmark_interval: float = 1.0
    """Seconds between BOOKMARK events on watches that allow them."""
    fresh_wait_seconds: float = WAIT_SECONDS
    """How long a read waits for a resourceVersion the store has not reached before it
    is refused 504 Too large (``kubesim.freshness``)."""
    update_checks: dict[str, Callable[[Obj, Obj], None]] = field(default_factory=dict)
    """Per resource key, a validating admission check of (old, new) for updates and
    patches of the main resource; it raises ``ApiError`` to deny (stands in for webhooks)."""
    create_defaults: dict[str, Callable[[Obj], Obj]] = field(default_factory=dict)
    """Per resource key, a mutating admission step applied to a create's body before it is
    stored (stands in for mutating webhooks)."""
    clock: SimClock = field(default_factory=SimClock)
    """The cluster's clock (the one the store stamps with): logs are written on it."""
    log_scripts: Callable[[Obj], Mapping[str, LogScript]] | None = None
    """What each container of a pod prints, by name: its behaviour's script, installed
    with the simulated controllers (None without them: the API alone never imports them,
    and its containers print nothing)."""


CONTEXT = web.AppKey("kubesim", ApiContext)


def error_response(error: ApiError) -> web.Response:
    headers = {}
    if "retryAfterSeconds" in error.details:
        headers["Retry-After"] = str(error.details["retryAfterSeconds"])
    return json_response(error.status(), error.code, headers)


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=_JSON_SEPARATORS).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def no_route() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method ({method})")
