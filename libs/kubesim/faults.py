"""Fault injection, so tests can prove our retry and resume paths against the same API
server everything else runs on: fail the next N calls of a verb on a resource with a status
code (429 carries ``Retry-After`` like a throttling server), slow calls down, and end every
open watch (clients must resume from their last resourceVersion).

Choosing what to do for a call (``Faults.take``) is pure bookkeeping; only ``Faults.apply``
sleeps and raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubesim.errors import ApiError, bad_request

VERBS = frozenset({"get", "list", "create", "update", "patch", "delete", "watch"})

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class Fault:
    verb: str
    """One of ``VERBS``, or ``*`` for every verb."""
    resource: str = "*"
    """A plural (``jobsets``), a plural with its subresource (``jobsets/status``), or ``*``."""
    code: int | None = None
    """The status code to fail with; None only adds latency."""
    times: int | None = 1
    """How many matching calls this fault affects; None = until cleared."""
    latency_seconds: float = 0.0
    """Real (not simulated) seconds added before matching calls are served."""
    retry_after_seconds: int | None = None
    """``Retry-After`` for the failure; 429 defaults to 1 like a throttling server."""
    url_contains: str | None = None
    """Only calls whose decoded path and query contain this text (an object's name, a
    label selector's value); None: every call of the verb and resource."""

    def matches(self, verb: str, resource: str, url: str = "") -> bool:
        plural = resource.split("/", 1)[0]
        return (
            self.verb in ("*", verb)
            and self.resource in ("*", resource, plural)
            and (self.url_contains is None or self.url_contains in url)
        )

    def error(self) -> ApiError | None:
        if self.code is None:
            return None
        retry_after = self.retry_after_seconds
        if retry_after is None and self.code == 429:
            retry_after = 1
        details = {} if retry_after is None else {"retryAfterSeconds": retry_after}
        reason = _REASONS.get(self.code, "InternalError" if self.code >= 500 else "BadRequest")
        return ApiError(self.code, reason, f"kubesim: injected fault ({self.code})", details)


@dataclass(frozen=True)
class Decision:
    """What to do to one call: wait ``latency_seconds``, then fail with ``error`` if set."""

    latency_seconds: float = 0.0
    error: ApiError | None = None


class Faults:
    def __init__(self, close_watches: Callable[[], int]) -> None:
        self._faults: list[Fault] = []
        self._close_watches = close_watches

    def add(self, fault: Fault) -> Fault:
        _validate(fault)
        self._faults.append(fault)
        return fault

    def fail(
        self,
        verb: str,
        resource: str = "*",
        *,
        code: int = 500,
        times: int | None = 1,
        retry_after_seconds: int | None = None,
    ) -> Fault:
        """Make the next ``times`` matching calls fail with ``code``."""
        return self.add(Fault(verb, resource, code, times, 0.0, retry_after_seconds))

    def delay(
        self,
        verb: str,
        resource: str = "*",
        *,
        seconds: float,
        times: int | None = None,
        url_contains: str | None = None,
    ) -> Fault:
        """Serve matching calls ``seconds`` later (all of them unless ``times`` is set; only
        those whose URL contains ``url_contains`` when it is set)."""
        return self.add(Fault(verb, resource, None, times, seconds, url_contains=url_contains))

    def clear(self) -> None:
        self._faults.clear()

    def close_watches(self) -> int:
        """End every open watch stream now; returns how many were open."""
        return self._close_watches()

    @property
    def pending(self) -> tuple[Fault, ...]:
        return tuple(self._faults)

    def take(self, verb: str, resource: str, url: str = "") -> Decision:
        """Consume the faults that match one call (``url``: its decoded path and query):
        every matching latency adds up, the first matching failure is used (one of its
        ``times`` spent)."""
        latency = 0.0
        error: ApiError | None = None
        for fault in list(self._faults):
            if not fault.matches(verb, resource, url):
                continue
            if fault.code is not None and error is not None:
                continue
            latency += fault.latency_seconds
            error = error or fault.error()
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
        return Decision(latency, error)

    async def apply(self, verb: str, resource: str, url: str = "") -> None:
        """Wait and/or raise as the faults for this call say."""
        decision = self.take(verb, resource, url)
        if decision.latency_seconds > 0:
            await asyncio.sleep(decision.latency_seconds)
        if decision.error is not None:
            raise decision.error


def fault_from_json(body: Any) -> Fault:
    """The body of ``POST /kubesim/faults``; a malformed one is a 400."""
    if not isinstance(body, dict) or not isinstance(body.get("verb"), str):
        raise bad_request('a fault needs at least {"verb": ...}')
    try:
        return Fault(
            verb=body["verb"],
            resource=str(body.get("resource", "*")),
            code=None if body.get("code") is None else int(body["code"]),
            times=None if body.get("times", 1) is None else int(body.get("times", 1)),
            latency_seconds=float(body.get("latency_seconds", 0.0)),
            retry_after_seconds=(
                None
                if body.get("retry_after_seconds") is None
                else int(body["retry_after_seconds"])
            ),
            url_contains=None if body.get("url_contains") is None else str(body["url_contains"]),
        )
    except (TypeError, ValueError) as error:
        raise bad_request(f"invalid fault: {error}") from None


def _validate(fault: Fault) -> None:
    if fault.verb != "*" and fault.verb not in VERBS:
        raise bad_request(f"unknown verb {fault.verb!r}; one of {sorted(VERBS)} or '*'")
    if fault.code is not None and not 400 <= fault.code <= 599:
        raise bad_request("code must be an HTTP error status (400-599)")
    if fault.code is None and fault.latency_seconds <= 0:
        raise bad_request("a fault needs a code, a latency, or both")
    if fault.times is not None and fault.times < 1:
        raise bad_request("times must be at least 1 (or null for until cleared)")
    if fault.latency_seconds < 0:
        raise bad_request("latency_seconds must be >= 0")
    if fault.url_contains == "":
        raise bad_request("url_contains must not be empty (null matches every call)")
