"""The OIDC issuer's signing keys (``XMC_AUTH_JWKS_URL``), kept in memory.

Authentication runs on every RPC, inside the interceptor, so it never does I/O: it looks a
token's ``kid`` up in the key set held here (a dict read). One background task, supervised
with the ESS's others (``jwks-refresher``), fetches the set with aiohttp:

* at start, then every ``jwks_refresh_seconds`` (a failed fetch keeps the keys already held
  and is retried sooner, with backoff — the ESS goes on verifying tokens with cached keys
  while the issuer is down);
* when a token names a ``kid`` the set does not hold (the issuer rotated its keys), at
  most once per ``jwks_min_refetch_seconds``: a flood of made-up key ids costs the issuer
  one request per interval, not one per RPC. The RPC that asked waits for that fetch at
  most ``jwks_wait_seconds``; one arriving while no fetch is allowed is refused at once.

Only signature keys of the algorithms ESS accepts for OIDC (RS256 and ES256) are kept, each
with its one algorithm: a token's header picks a key by ``kid``, never the algorithm.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import jwt
import structlog

from ess.metrics import JWKS_FETCHES, JWKS_KEYS
from xmc.health import Check
from xmc.retry import Backoffs

log = structlog.get_logger()

ACCEPTED_ALGORITHMS: Final = frozenset({"RS256", "ES256"})
#: Seconds between retries of a failed fetch (capped by the refresh interval).
RETRY_SCHEDULE: Final = Backoffs((1.0, 2.0, 5.0, 10.0, 30.0, 60.0))
#: A key set larger than this is not a key set.
MAX_BODY_BYTES: Final = 1024 * 1024
FETCH_TIMEOUT_SECONDS: Final = 10.0


class JwksError(Exception):
    """The key set could not be fetched or holds no usable key."""


@dataclass(frozen=True)
class Key:
    algorithm: str
    key: Any


def parse_key_set(document: Any) -> dict[str, Key]:
    """``kid`` -> key for every usable signature key in a JWKS document; keys without a
    ``kid``, of other uses or algorithms, or that do not parse are skipped."""
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise JwksError("not a JSON Web Key Set (no 'keys' list)")
    keys: dict[str, Key] = {}
    for entry in document["keys"]:
        if not isinstance(entry, Mapping):
            continue
        kid = entry.get("kid")
        if not isinstance(kid, str) or not kid or entry.get("use", "sig") != "sig":
            continue
        try:
            parsed = jwt.PyJWK.from_dict(dict(entry))
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError, KeyError):
            continue
        if parsed.algorithm_name in ACCEPTED_ALGORITHMS:
            keys[kid] = Key(parsed.algorithm_name, parsed.key)
    if not keys:
        raise JwksError("no RS256 or ES256 signature key with a 'kid'")
    return keys


class JwksKeys:
    """The issuer's keys: read synchronously (:meth:`get`), fetched by :meth:`run`."""

    def __init__(
        self,
        url: str,
        *,
        refresh_seconds: float,
        min_refetch_seconds: float,
        wait_seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self._refresh = refresh_seconds
        self._min_refetch = min_refetch_seconds
        self.wait_seconds = wait_seconds
        self._monotonic = monotonic
        self._keys: dict[str, Key] = {}
        #: Set once a key set has been fetched; cleared never.
        self._loaded = asyncio.Event()
        #: Set by a token naming an unknown kid; the refresher fetches at once.
        self._wanted = asyncio.Event()
        #: Replaced after every fetch attempt, so waiters see the one they asked for.
        self._fetched = asyncio.Event()
        self._last_fetch = float("-inf")
        self._last_success: float | None = None
        self._last_error = ""

    def get(self, kid: str) -> Key | None:
        return self._keys.get(kid)

    @property
    def loaded(self) -> bool:
        return self._loaded.is_set()

    async def refreshed_key(self, kid: str) -> Key | None:
        """``kid``'s key, after the one fetch this call may ask for (waited for at most
        ``wait_seconds``); None when the issuer does not hold it. A fetch is allowed once
        per ``min_refetch_seconds``: asked for sooner, it happens when allowed (a key the
        issuer has just published is found then) and this call does not wait for it."""
        if (key := self.get(kid)) is not None:
            return key
        fetched = self._fetched
        self._wanted.set()
        if self.loaded and self._monotonic() < self._last_fetch + self._min_refetch:
            return None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.wait_seconds):
                await fetched.wait()
        return self.get(kid)

    async def run(self, stop: asyncio.Event) -> None:
        """Fetch now, then on schedule or when asked, until ``stop``; never ends by a
        failed fetch (the keys held stay in use)."""
        failures = 0
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS),
            trust_env=True,  # HTTPS_PROXY / NO_PROXY, where egress goes through a proxy
        ) as session:
            while not stop.is_set():
                failures = 0 if await self._fetch_once(session) else failures + 1
                delay = min(RETRY_SCHEDULE.after(failures), self._refresh)
                await self._sleep(stop, delay if failures else self._refresh)

    async def _sleep(self, stop: asyncio.Event, delay: float) -> None:
        """Until ``delay`` passes, ``stop``, or a wanted fetch is allowed."""
        deadline = self._monotonic() + delay
        while not stop.is_set():
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                return
            if self._wanted.is_set():
                allowed_in = self._last_fetch + self._min_refetch - self._monotonic()
                if allowed_in <= 0:
                    return
                waits = [stop.wait()]
                remaining = min(remaining, allowed_in)
            else:
                waits = [stop.wait(), self._wanted.wait()]
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await _first(waits)

    async def _fetch_once(self, session: aiohttp.ClientSession) -> bool:
        self._last_fetch = self._monotonic()
        self._wanted.clear()
        try:
            keys = await self._fetch(session)
        except Exception as error:
            self._last_error = f"{type(error).__name__}: {error}"[:300]
            JWKS_FETCHES.labels("failed").inc()
            log.warning(
                "cannot fetch the issuer's keys; keeping the ones held",
                url=self.url,
                error=self._last_error,
                keys_held=len(self._keys),
            )
            return False
        else:
            if set(keys) != set(self._keys):
                log.info("issuer keys fetched", url=self.url, kids=sorted(keys))
            self._keys = keys
            self._last_error = ""
            self._last_success = self._monotonic()
            self._loaded.set()
            JWKS_FETCHES.labels("ok").inc()
            JWKS_KEYS.set(len(keys))
            return True
        finally:
            fetched, self._fetched = self._fetched, asyncio.Event()
            fetched.set()

    async def _fetch(self, session: aiohttp.ClientSession) -> dict[str, Key]:
        async with session.get(self.url, headers={"Accept": "application/json"}) as response:
            if response.status != 200:
                raise JwksError(f"HTTP {response.status}")
            body = await response.content.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            raise JwksError(f"larger than {MAX_BODY_BYTES} bytes")
        try:
            document = json.loads(body)
        except ValueError as error:
            raise JwksError(f"not JSON: {error}") from None
        return parse_key_set(document)

    def check(self) -> Check:
        """``/readyz``: ready once a key set is held (a failed refresh after that keeps
        the ESS ready, verifying with the keys it has; the detail says so)."""
        if not self.loaded:
            detail = f"no key set fetched yet from {self.url}"
            if self._last_error:
                detail += f": {self._last_error}"
            return Check("jwks", False, detail)
        assert self._last_success is not None
        age = self._monotonic() - self._last_success
        detail = f"{len(self._keys)} keys, fetched {age:.0f}s ago"
        if self._last_error:
            detail += f"; last refresh failed: {self._last_error}"
        return Check("jwks", True, detail)


async def _first(waits: list[Coroutine[Any, Any, Any]]) -> None:
    """Until the first of ``waits`` finishes; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
